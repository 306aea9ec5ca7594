"""The project page's "Download the model" section: the archive the backbone published beside its
latest checkpoint (``published_model``), its size, epoch, held-out loss (beside the unigram floor
where the index names one) and SHA-256, and the lines that load it with transformers once unpacked.

The section is on the page only while a model is known; ``/stats`` carries it too (``model``), and
its text under ``display`` (``model_*``), for the script to show a model published after the page
was loaded. Every value comes from the signed index and is escaped like everything else; the link's
URL is the manifest's ``network.checkpoint_url`` and the index's plain file name.
"""

from __future__ import annotations

import datetime
from typing import Any

from core.coordinator.page import formats
from core.coordinator.page.html import Markup, el
from core.coordinator.published_model import PublishedModel
from core.util.amounts import floor_gap

FIELDS = (
    "model_file",
    "model_size",
    "model_epoch",
    "model_held_out",
    "model_sha256",
    "model_import",
    "model_tokenizer",
    "model_load",
    "model_folder",
    "model_published",
)
"""The ``data-figure`` names of the section's text."""


def model_display(model: PublishedModel | None) -> dict[str, str]:
    """The text of each of the section's figures (empty without a model)."""
    if model is None:
        return dict.fromkeys(FIELDS, "")
    index = model.index
    auto = index.auto_class
    held_out = index.held_out
    if held_out is None:
        measured = ""
    else:
        floor = "" if held_out.floor is None else f", {floor_gap(held_out.loss, held_out.floor)}"
        measured = (
            f"{formats.loss(held_out.loss)} (accuracy {formats.share(held_out.accuracy)}, "
            f"measured at epoch {held_out.epoch:,} on {held_out.samples:,} sequences){floor}"
        )
    return {
        "model_file": index.file,
        "model_size": formats.size(index.size),
        "model_epoch": formats.count(index.epoch),
        "model_held_out": measured,
        "model_sha256": index.sha256,
        "model_import": f"from transformers import {auto}, AutoTokenizer",
        "model_tokenizer": f'tokenizer = AutoTokenizer.from_pretrained("{index.folder}")',
        "model_load": f'model = {auto}.from_pretrained("{index.folder}")',
        "model_folder": index.folder,
        "model_published": _day(index.published_at),
    }


def _day(when: float) -> str:
    """A Unix time's UTC date; a time no calendar has (signed, but nonsense) reads as unknown."""
    try:
        return datetime.datetime.fromtimestamp(when, datetime.UTC).date().isoformat()
    except (OverflowError, OSError, ValueError):
        return "on an unknown date"


def model_json(model: PublishedModel | None) -> dict[str, Any] | None:
    """What ``/stats`` says of the published model."""
    if model is None:
        return None
    index = model.index
    return {
        "url": model.url,
        "file": index.file,
        "size": index.size,
        "sha256": index.sha256,
        "epoch": index.epoch,
        "architecture": index.architecture,
        "held_out": None if index.held_out is None else index.held_out.to_json(),
        "published_at": index.published_at,
    }


def download_section(model: PublishedModel | None) -> Markup:
    """The section (hidden without a model, for the script to show when one is published)."""
    shown = model_display(model)

    def row(label: str, figure: str, *, code: bool = False, hidden: bool = False) -> Markup:
        value = el("code" if code else "span", shown[figure], data_figure=figure)
        return el("div", el("dt", label), el("dd", value), id=f"{figure}-row", hidden=hidden)

    link = el(
        "a",
        shown["model_file"],
        href=None if model is None else model.url,
        id="model-link",
        data_figure="model_file",
    )
    code = el(
        "pre",
        el(
            "code",
            el("span", shown["model_import"], data_figure="model_import"),
            "\n",
            el("span", shown["model_tokenizer"], data_figure="model_tokenizer"),
            "\n",
            el("span", shown["model_load"], data_figure="model_load"),
        ),
        class_="load",
    )
    return el(
        "section",
        el("h2", "Download the model"),
        el(
            "p",
            "The model as the volunteers trained it, exported for the ",
            el("a", "transformers", href="https://huggingface.co/docs/transformers"),
            " library and signed by the project's key; published ",
            el("span", shown["model_published"], data_figure="model_published"),
            ".",
            class_="lead",
        ),
        el("p", link, class_="download"),
        el(
            "dl",
            row("Size", "model_size"),
            row("Epoch", "model_epoch"),
            row(
                "Held-out loss",
                "model_held_out",
                hidden=model is None or model.index.held_out is None,
            ),
            row("SHA-256", "model_sha256", code=True),
            class_="facts",
        ),
        el(
            "p",
            "Unpack it: it holds the folder ",
            el("code", shown["model_folder"], data_figure="model_folder"),
            ", which these lines load (with ",
            el("code", "pip install transformers torch"),
            "):",
        ),
        code,
        id="download",
        class_="card download",
        hidden=model is None,
    )
