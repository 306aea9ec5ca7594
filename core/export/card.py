"""The model card: the folder's ``README.md``, which the Hugging Face Hub shows as the model's page.

YAML front matter for the Hub (library, task, language, tags), then what a reader needs to trust and
use the model: which project trained it, on what data, how far (the checkpoint's epoch and the
samples behind it, when it records them), how well on held-out text (beside the unigram floor, when
known) or why that is not known, by how many contributors when known, and the lines that load it
(and, for a causal model, generate with it).

It names no local path: the card is published as it is.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.export.records import Contributors, HeldOutFigures, NotEvaluated
from core.modes import active_modes
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
    """Samples the collaboration had trained on before the checkpoint's epoch, when it records
    them (``core.training.credit.samples``)."""
    loss: float | None
    """The training loss the checkpoint recorded."""
    evaluation: HeldOutFigures | NotEvaluated
    contributors: Contributors | None
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
        _evaluation(facts),
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
    seen = (
        f"after {facts.samples:,} samples in all"
        if facts.samples is not None
        else "which does not record how many samples came before it"
    )
    loss = f"; its training loss then was {facts.loss:.4f}" if facts.loss is not None else ""
    epoch = active_modes().parse(t.mode).epoch(t)
    epochs = (
        f"Each epoch is {epoch}; the peers' optimizer is {t.optimizer} at learning rate {t.lr:g}."
    )
    return (
        "## Training\n\n"
        f"These are the weights of the collaboration's checkpoint of epoch {facts.epoch:,}, "
        f"{seen}{loss}. {epochs}{_contributors(facts.contributors)}\n"
    )


def _contributors(found: Contributors | None) -> str:
    if found is None:
        return ""
    many = "" if found.complete else "at least "
    if found.accounts:
        return f" {many}{found.count:,} volunteer(s) contributed to it."
    # an open project's peers have no accounts: a volunteer's second computer, or a command-line
    # peer restarted with a new identity, is one more peer
    return (
        f" {many}{found.count:,} peer(s) contributed to it (an open project counts computers, "
        "not people)."
    )


def _evaluation(facts: CardFacts) -> str:
    evaluation = facts.evaluation
    if isinstance(evaluation, NotEvaluated):
        return f"## Evaluation\n\nNot evaluated: {evaluation.reason}.\n"
    token = "next token" if facts.causal else "masked token"
    loss = f"loss {evaluation.loss:.4f} nats per {token}"
    floor = evaluation.floor
    if floor is not None:
        gap = floor - evaluation.loss
        side = "below" if gap >= 0 else "above"
        loss += (
            f", {abs(gap):.2f} {side} the unigram floor of {floor:.2f} nats (what a model that "
            "only counts how often each token occurs scores)"
        )
    when = (
        f"its epoch {evaluation.epoch:,}"
        if evaluation.epoch == facts.epoch
        else f"epoch {evaluation.epoch:,}, the newest evaluation before this checkpoint"
    )
    return (
        "## Evaluation\n\n"
        f"On {evaluation.sequences:,} held-out sequences, never trained on, measured at {when}: "
        f"{loss}; accuracy {evaluation.accuracy:.2%} of {token}s.\n"
    )


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
