"""``barnraise export``: a collaborative project's trained model as a folder for transformers and
the Hugging Face Hub.

    barnraise export project.toml --out myproject-model
    barnraise export project.toml --checkpoint backbone/checkpoints/checkpoint-00000120.pt --out DIR

Without ``--checkpoint`` it takes the newest checkpoint of ``--checkpoints DIR``, by default the
backbone's ``backbone/checkpoints`` beside the manifest (the folder ``barnraise project new``
makes; ``aux/checkpoints`` in a project that an earlier release made). It writes
``config.json``, ``model.safetensors``, the project's tokenizer (``tokenizer.json``,
``tokenizer_config.json``, ``special_tokens_map.json``) and a model card (``README.md``), into
a folder that appears whole or not at all, never over one that holds anything unless
``--overwrite``.

The card's held-out figures and contributors come from the backbone's work folder
(``--backbone-dir``, by default the folder that holds the checkpoints' folder): its
``evaluation.jsonl`` and ``metrics.jsonl``. A missing log leaves its part out, saying why; a
damaged line is skipped. It prints the folder, its files with their sizes, the SHA-256 of
``model.safetensors`` and where the card's figures came from. A dmoe project has no single model
to export.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.util.errors import BarnraiseError

if TYPE_CHECKING:
    from core.export.folder import Exported

CHECKPOINTS = Path("backbone") / "checkpoints"
"""The backbone's checkpoints in a project's folder (``core.organize.backbone``)."""
EARLIER_CHECKPOINTS = Path("aux") / "checkpoints"
"""Where projects made by releases that named the backbone ``aux`` keep them: their services still
run with that folder, so it is looked in when the first is missing."""
USAGE_ERROR = 2


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "export",
        help="write a project's trained model as a transformers folder (for the Hugging Face Hub)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("manifest", type=Path, help="the project's TOML file")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--checkpoint", type=Path, metavar="PATH", help="the checkpoint to export")
    which.add_argument(
        "--checkpoints",
        type=Path,
        metavar="DIR",
        help=f"export the newest checkpoint in DIR (default: {CHECKPOINTS} beside the manifest)",
    )
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="the new folder")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace DIR even if it holds files"
    )
    parser.add_argument(
        "--backbone-dir",
        type=Path,
        metavar="DIR",
        help="the backbone's work folder, whose evaluation.jsonl and metrics.jsonl the model "
        "card reads (default: the folder that holds the checkpoints' folder)",
    )
    parser.add_argument(
        "--data-base",
        metavar="URL",
        help="URL or folder the manifest's relative tokenizer path uses (default: its folder)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # torch and the model load here, not when the parser is built
    from core.export.folder import WEIGHTS, export_model  # noqa: PLC0415

    checkpoints = args.checkpoints
    if args.checkpoint is None and checkpoints is None:
        project = args.manifest.expanduser().absolute().parent
        checkpoints = project / CHECKPOINTS
        if not checkpoints.exists() and (project / EARLIER_CHECKPOINTS).is_dir():
            checkpoints = project / EARLIER_CHECKPOINTS
    # the backbone keeps its checkpoints in <work folder>/checkpoints, its logs in the work folder
    backbone_dir = args.backbone_dir
    if backbone_dir is None:
        folder = checkpoints if args.checkpoint is None else args.checkpoint.parent
        backbone_dir = folder.expanduser().absolute().parent
    try:
        exported = export_model(
            args.manifest,
            args.checkpoint,
            args.out,
            checkpoints=checkpoints,
            data_base=args.data_base,
            backbone_dir=backbone_dir,
            overwrite=args.overwrite,
        )
    except BarnraiseError as exc:
        print(f"barnraise export: {exc}", file=sys.stderr)
        return USAGE_ERROR
    print(f"Exported the checkpoint of epoch {exported.epoch} ({exported.checkpoint}) to")
    print(f"  {exported.folder}")
    width = max(len(name) for name, _ in exported.files)
    for name, size in exported.files:
        print(f"  {name:<{width}}  {size:>14,} bytes")
    print(f"sha256 of {WEIGHTS}: {exported.sha256}")
    print("The model card says:")
    for line in card_sources(exported, backbone_dir):
        print(f"  {line}")
    return 0


def card_sources(exported: Exported, backbone_dir: Path) -> list[str]:
    """What the card states about the training and where each figure came from, in words."""
    from core.export.records import NotEvaluated  # noqa: PLC0415 - loads torch
    from core.training.peer.roles import METRICS_LOG  # noqa: PLC0415

    samples = (
        f"samples: {exported.samples:,} before epoch {exported.epoch:,}, as the checkpoint records"
        if exported.samples is not None
        else "samples: unknown, the checkpoint does not record them (a backbone that missed "
        "epochs records none)"
    )
    found = exported.evaluation
    if isinstance(found, NotEvaluated):
        where = f" ({found.log})" if found.log is not None else ""
        detail = f": {found.detail}" if found.detail else ""
        held_out = f"held-out figures: none, {found.reason}{where}{detail}"
    else:
        held_out = (
            f"held-out figures: of epoch {found.figures.epoch:,}, from {found.log}"
            f"{_skipped(found.skipped)}"
        )
    people = exported.contributors
    if people is None:
        counted = (
            f"contributors: not stated, {backbone_dir / METRICS_LOG} has no epoch before "
            f"{exported.epoch:,} (or is missing)"
        )
    else:
        who = "volunteer(s)" if people.accounts else "peer(s)"
        least = "" if people.complete else "at least "
        counted = (
            f"contributors: {least}{people.count:,} {who}, from {people.log}"
            f"{_skipped(people.skipped)}"
        )
    return [samples, held_out, counted]


def _skipped(lines: int) -> str:
    return f" ({lines:,} damaged line(s) skipped)" if lines else ""
