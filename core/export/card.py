"""The model card: the folder's ``README.md``, which the Hugging Face Hub shows as the model's page.

YAML front matter for the Hub (library, task, language, tags), then what a reader needs to trust and
use the model: which project trained it, on what data, how far (epoch and samples of the
checkpoint), how well on held-out text when the caller measured it, by how many volunteers when
known, and the lines that load it (and, for a causal model, generate with it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from core.project import Manifest

SHOWN_URLS = 5
"""Shard URLs listed per data source; the rest are counted."""


@dataclass(frozen=True)
class CardFacts:
    manifest: Manifest
    architecture: str
    """The transformers class that loads the folder."""
    auto_class: str
    """The ``Auto`` class the loading lines use."""
    pipeline_tag: str
    causal: bool
    """The model predicts each next token (rather than masked tokens)."""
    model_type: str
    """``config.json``'s ``model_type``, a tag on the Hub."""
    summary: str
    """The model's shape in a sentence."""
    parameters: int
    tokens: int
    """The tokenizer's vocabulary."""
    epoch: int
    samples: int | None
    """Samples the collaboration had trained on by then, when the checkpoint says."""
    loss: float | None
    """The training loss the checkpoint recorded."""
    evaluation: Mapping[str, float | int] | None
    """Held-out figures: ``loss``, ``accuracy``, ``epoch``, ``samples`` (each optional)."""
    contributors: int | None
    folder_name: str


def model_card(facts: CardFacts) -> str:
    m = facts.manifest
    project = m.project
    tags = "".join(
        f"- {tag}\n" for tag in ("barnraise", "collaborative-training", facts.model_type)
    )
    front = (
        "---\n"
        "library_name: transformers\n"
        f"pipeline_tag: {facts.pipeline_tag}\n"
        "language: en\n"
        f"tags:\n{tags}"
        "---\n"
    )
    description = f"\n{project.description}\n" if project.description else ""
    sections = [
        (
            f"# {project.name}\n{description}\n"
            f"This model was trained by the Barnraise project `{project.name}`: volunteers' "
            "computers trained it together, averaging their progress over the internet. It was "
            "exported with `barnraise export`.\n"
        ),
        (
            f"## Model\n\n{facts.summary} {facts.parameters:,} parameters; loads as "
            f"`{facts.architecture}`.\n"
        ),
        _data(facts),
        _training(facts),
        _evaluation(facts.evaluation, causal=facts.causal),
        _use(facts),
    ]
    return front + "\n" + "\n".join(sections)


def _data(facts: CardFacts) -> str:
    m = facts.manifest
    lines = ["## Training data\n"]
    for source in m.data.sources:
        urls = ", ".join(f"`{url}`" for url in source.urls[:SHOWN_URLS])
        more = len(source.urls) - SHOWN_URLS
        rest = f" and {more:,} more" if more > 0 else ""
        share = f", weight {source.weight:g}" if len(m.data.sources) > 1 else ""
        lines.append(
            f"- {len(source.urls):,} shard(s) ({source.format}, text in `{source.text_field}`"
            f"{share}): {urls}{rest}"
        )
    task = (
        "the model learned to predict every next token"
        if facts.causal
        else f"{m.data.mask_prob:.0%} of the tokens were masked for the model to predict"
    )
    lines.append(
        f"\nThe texts were cut into sequences of {m.data.seq_len} tokens with the project's "
        f"tokenizer ({facts.tokens:,} tokens, included here), and {task}.\n"
    )
    return "\n".join(lines)


def _training(facts: CardFacts) -> str:
    t = facts.manifest.training
    seen = f"after {facts.samples:,} samples" if facts.samples is not None else "samples unknown"
    loss = f"; its training loss then was {facts.loss:.4f}" if facts.loss is not None else ""
    people = (
        f" {facts.contributors:,} volunteer(s) contributed to it."
        if facts.contributors is not None
        else ""
    )
    return (
        "## Training\n\n"
        f"These are the weights of the collaboration's checkpoint of epoch {facts.epoch:,} "
        f"({seen}){loss}. Each epoch is one optimizer step over a collaborative batch of "
        f"{t.target_batch_size:,} samples ({t.optimizer}, learning rate {t.lr:g}).{people}\n"
    )


def _evaluation(evaluation: Mapping[str, float | int] | None, *, causal: bool) -> str:
    if not evaluation:
        return "## Evaluation\n\nNot evaluated: no held-out figures were given for this export.\n"
    figures = []
    if "loss" in evaluation:
        figures.append(f"loss {float(evaluation['loss']):.4f}")
    if "accuracy" in evaluation:
        predicted = "next tokens" if causal else "masked tokens"
        figures.append(f"accuracy {float(evaluation['accuracy']):.2%} of {predicted}")
    when = []
    if "epoch" in evaluation:
        when.append(f"epoch {int(evaluation['epoch']):,}")
    if "samples" in evaluation:
        when.append(f"{int(evaluation['samples']):,} samples")
    at = f" (measured at {', '.join(when)})" if when else ""
    shown = ", ".join(figures) or "no figures"
    return f"## Evaluation\n\nOn held-out text, never trained on: {shown}{at}.\n"


def _use(facts: CardFacts) -> str:
    name = facts.folder_name
    generate = (
        '\ninputs = tokenizer("The", return_tensors="pt")\n'
        "output = model.generate(**inputs, max_new_tokens=40)\n"
        "print(tokenizer.decode(output[0], skip_special_tokens=True))\n"
        if facts.causal
        else ""
    )
    wrapping = (
        "starts each text with [CLS], as in training, and leaves it open for the model to "
        "continue; the model ends a text with [SEP], where generation stops"
        if facts.causal
        else "wraps each text in [CLS] ... [SEP], as in training"
    )
    return (
        "## Use\n\n"
        "```python\n"
        f"from transformers import {facts.auto_class}, AutoTokenizer\n\n"
        f'tokenizer = AutoTokenizer.from_pretrained("{name}")\n'
        f'model = {facts.auto_class}.from_pretrained("{name}")\n'
        f"{generate}"
        "```\n\n"
        f'`"{name}"` is this folder, or the Hub repository it was uploaded to. The tokenizer '
        f"{wrapping}.\n"
    )
