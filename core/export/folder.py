"""``export_model``: a collaborative project's trained model as a folder the transformers library
loads, and the Hugging Face Hub takes as it is.

The folder holds ``config.json``, ``model.safetensors`` (the weights, under transformers' names),
the project's tokenizer (``tokenizer.json`` with ``tokenizer_config.json`` and
``special_tokens_map.json``) and a model card, ``README.md``. Everything is checked before the
first byte is written: the manifest is a collaborative one of a kind that has a mapping
(``kinds``), the checkpoint fits its model exactly (``weights``), the tokenizer is there and fits
the embeddings (``tokenizer``). The folder then appears whole or not at all (``staging``).

The model is built on torch's meta device, which allocates nothing: only its config and the names
and shapes of its tensors are needed, and the checkpoint brings the values.

The model card states the samples behind the checkpoint as the checkpoint records them
(``core.training.credit.samples``), and reads the rest from the backbone's work folder when it is named
(``records``): the held-out figures of the checkpoint's epoch and how many contributed.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from core.export.card import CardFacts, model_card
from core.export.errors import ExportError
from core.export.kinds import mapping_for
from core.export.records import (
    NO_FIGURES,
    Contributors,
    Evaluated,
    HeldOutFigures,
    NotEvaluated,
    contributors_before,
    held_out_at,
)
from core.export.staging import EXPORT_FOLDER
from core.export.tokenizer import project_tokenizer, write_json, write_tokenizer
from core.export.weights import checked_state, newest_checkpoint, read_checkpoint
from core.project import DmoeManifest, Manifest, load_any_manifest
from core.training.credit.samples import samples_total
from core.training.peer.recipe import build_model
from core.training.peer.roles import EVALUATION_LOG, METRICS_LOG
from core.util.files.staged_folder import StagedFolder, check_target

WEIGHTS = "model.safetensors"
_HASH_CHUNK = 1 << 20


@dataclass(frozen=True)
class Exported:
    folder: Path
    checkpoint: Path
    """The checkpoint whose weights the folder holds."""
    epoch: int
    files: tuple[tuple[str, int], ...]
    """Each file's name and size in bytes, by name."""
    sha256: str
    """Of ``model.safetensors``."""
    samples: int | None
    """The samples behind the checkpoint, as it records them."""
    evaluation: Evaluated | NotEvaluated
    """The card's held-out figures and where they came from, or why it has none."""
    contributors: Contributors | None


def export_model(
    manifest_path: Path,
    checkpoint: Path | None,
    out_dir: Path,
    *,
    checkpoints: Path | None = None,
    data_base: str | None = None,
    backbone_dir: Path | None = None,
    evaluation: HeldOutFigures | None = None,
    overwrite: bool = False,
) -> Exported:
    """Write the model of the checkpoint at ``checkpoint`` (else the newest in the folder
    ``checkpoints``) of the project at ``manifest_path`` into the folder ``out_dir``.

    ``data_base`` resolves a relative ``data.tokenizer`` as peers resolve it (default: the
    manifest's folder). ``backbone_dir``: the backbone's work folder, whose
    ``evaluation.jsonl`` gives the card the newest held-out figures at or before the checkpoint's
    epoch and whose ``metrics.jsonl`` gives the contributors; ``evaluation``: figures to show when
    that log has none. An existing ``out_dir`` that holds anything is refused unless ``overwrite``.
    Raises ``ExportError`` (or the manifest's ``ManifestError``) with a message for the person
    exporting; a missing or damaged log only leaves its part of the card out, saying why.
    """
    out_dir = out_dir.expanduser().absolute()
    check_target(out_dir, EXPORT_FOLDER, overwrite=overwrite)
    manifest = _collaborative(manifest_path)
    mapping = mapping_for(manifest.model.kind)
    if checkpoint is None:
        if checkpoints is None:
            raise ExportError("name the checkpoint to export, or a folder of checkpoints")
        checkpoint = newest_checkpoint(checkpoints)
    with torch.device("meta"):
        model = build_model(manifest)
    saved = read_checkpoint(checkpoint)
    state = checked_state(model, saved, checkpoint)
    with tempfile.TemporaryDirectory(prefix="barnraise-export-") as scratch:
        tokenizer_file, tokenizer = project_tokenizer(manifest, data_base, Path(scratch))
        tensors = mapping.tensors(model, state)
        config = mapping.config(model, tokenizer)
        config["dtype"] = str(state[next(iter(state))].dtype).removeprefix("torch.")
        held_out = _held_out(backbone_dir, saved.epoch, evaluation)
        contributors = (
            None
            if backbone_dir is None
            else contributors_before(
                backbone_dir / METRICS_LOG, saved.epoch, accounts=manifest.access.moderated
            )
        )
        samples = samples_total(saved.metadata)
        facts = CardFacts(
            manifest=manifest,
            architecture=mapping.architecture,
            auto_class=mapping.auto_class,
            pipeline_tag=mapping.pipeline_tag,
            causal=mapping.causal,
            model_type=str(config.get("model_type", "")),
            summary=mapping.summary(model),
            parameters=sum(p.numel() for p in model.parameters()),
            tokens=tokenizer.vocab_size,
            epoch=saved.epoch,
            samples=samples,
            loss=saved.loss,
            evaluation=held_out.figures if isinstance(held_out, Evaluated) else held_out,
            contributors=contributors,
            folder_name=out_dir.name,
        )
        staged = StagedFolder(out_dir, EXPORT_FOLDER, overwrite=overwrite)
        with staged as staging:
            save_file(tensors, str(staging / WEIGHTS), metadata={"format": "pt"})
            write_json(staging / "config.json", config)
            write_tokenizer(
                tokenizer_file,
                tokenizer,
                staging,
                manifest.model.max_position,
                causal=mapping.causal,
            )
            (staging / "README.md").write_text(model_card(facts), encoding="utf-8")
            files = tuple(sorted((p.name, p.stat().st_size) for p in staging.iterdir()))
            digest = _sha256(staging / WEIGHTS)
            staged.commit()
    return Exported(
        out_dir, checkpoint, saved.epoch, files, digest, samples, held_out, contributors
    )


def _held_out(
    backbone_dir: Path | None, epoch: int, given: HeldOutFigures | None
) -> Evaluated | NotEvaluated:
    """The held-out figures for the card of a checkpoint of ``epoch``: the backbone's log's, else
    the caller's (``given``), else why there are none."""
    found = (
        NO_FIGURES if backbone_dir is None else held_out_at(backbone_dir / EVALUATION_LOG, epoch)
    )
    if isinstance(found, NotEvaluated) and given is not None:
        return Evaluated(given, None)
    return found


def _collaborative(path: Path) -> Manifest:
    manifest = load_any_manifest(path)
    if isinstance(manifest, DmoeManifest):
        raise ExportError(
            f"{path} is a dmoe project: its experts live on the volunteers' expert servers, each "
            "with its own checkpoints, so there is no single model to export"
        )
    return manifest


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
