"""``barnraise export``: a collaborative project's trained model as a folder for transformers and
the Hugging Face Hub.

    barnraise export project.toml --out myproject-model
    barnraise export project.toml --checkpoint aux/checkpoints/checkpoint-00000120.pt --out DIR

Without ``--checkpoint`` it takes the newest checkpoint of ``--checkpoints DIR``, by default the
auxiliary peer's ``aux/checkpoints`` beside the manifest (the folder ``barnraise project new``
makes). It writes ``config.json``, ``model.safetensors``, the project's tokenizer
(``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json``) and a model card
(``README.md``), into a folder that appears whole or not at all, never over one that holds anything
unless ``--overwrite``. It prints the folder, its files with their sizes and the SHA-256 of
``model.safetensors``. A dmoe project has no single model to export.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from core.util.errors import BarnraiseError

CHECKPOINTS = Path("aux") / "checkpoints"
"""The auxiliary peer's checkpoints in a project's folder (``core.organize.backbone``)."""
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
        checkpoints = args.manifest.expanduser().absolute().parent / CHECKPOINTS
    try:
        exported = export_model(
            args.manifest,
            args.checkpoint,
            args.out,
            checkpoints=checkpoints,
            data_base=args.data_base,
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
    return 0
