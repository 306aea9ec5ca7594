"""The model published beside each checkpoint: an exported folder packed into one zip archive, with
a ``model.json`` that the project key signs (``core.trust.published_model``).

The export itself (``core.export``) sits above training and is composed where the backbone's
publishing is set up (``core.cli.peer.backbone``), which hands ``CheckpointPublishing`` a callable that
exports the checkpoint it just published and calls ``publish_model`` here with the folder. This
module only packs, hashes, signs and writes, with the checkpoint index's rules: the archive and the
index are each written aside and renamed into place (a reader sees the old index or the new one,
and the archive an index names is always whole), names are plain, and the folder keeps the archive
the index names and the one before it, for a download that began just before.

``HeldOutHistory`` remembers the backbone's held-out evaluations, so that each model's index (and
its model card) carries the newest one at or before its epoch, with its unigram floor.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from core.training.publish.folder import previously_published, prune
from core.trust.identity import Identity
from core.trust.published_model import (
    FILE_NAME,
    INDEX_NAME,
    HeldOut,
    ModelIndex,
    PublishedModelError,
    archive_name,
    sign_model_index,
)
from core.trust.signed_index import size_and_sha256
from core.util.files.atomic import remove_temporaries, write_atomically
from core.worker.events import PeerEvaluation

log = logging.getLogger(__name__)

_TEMP_PREFIX = ".publishing-model-"
_STORED_SUFFIXES = (".safetensors", ".bin", ".pt")
"""Weights hardly compress, and deflating gigabytes costs minutes: they are stored as they are."""
HISTORY_KEPT = 1000
"""Evaluations remembered: far more than the epochs between two checkpoints."""


class HeldOutHistory:
    """The backbone's held-out evaluations by epoch (the newest ``HISTORY_KEPT``).

    Recorded on the event loop (``PeerSettings.on_evaluation``) and read by the publication on a
    worker thread, hence the lock."""

    def __init__(self, kept: int = HISTORY_KEPT) -> None:
        self._kept = kept
        self._by_epoch: dict[int, HeldOut] = {}
        self._lock = threading.Lock()

    def record(self, evaluation: PeerEvaluation) -> None:
        """Remember one evaluation (one without a finite loss says nothing worth publishing)."""
        if evaluation.loss is None or not math.isfinite(evaluation.loss):
            return
        accuracy = min(max(float(evaluation.accuracy), 0.0), 1.0)
        floor = evaluation.floor
        if floor is not None and not (math.isfinite(floor) and floor >= 0):
            floor = None  # an index refuses it; the loss is still worth publishing
        held_out = HeldOut(
            evaluation.epoch, float(evaluation.loss), accuracy, evaluation.samples, floor
        )
        with self._lock:
            self._by_epoch[held_out.epoch] = held_out
            if len(self._by_epoch) > self._kept:
                del self._by_epoch[min(self._by_epoch)]

    def record_all(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Remember the evaluations a log kept (``evaluation.jsonl``); lines that are not one are
        skipped, and lines written before the floor was computed have none."""
        for record in records:
            try:
                evaluation = PeerEvaluation(
                    epoch=int(record["epoch"]),
                    loss=None if record["loss"] is None else float(record["loss"]),
                    accuracy=float(record["accuracy"]),
                    samples=int(record["samples"]),
                    tokens=int(record.get("tokens", 0)),
                    seconds=float(record.get("seconds", 0.0)),
                    time=float(record.get("time", 0.0)),
                    floor=None if record.get("floor") is None else float(record["floor"]),
                )
            except (KeyError, TypeError, ValueError):
                continue
            if evaluation.epoch >= 0 and evaluation.samples >= 0:
                self.record(evaluation)

    def at_or_before(self, epoch: int) -> HeldOut | None:
        """The evaluation of the newest epoch not after ``epoch``, if any."""
        with self._lock:
            epochs = [e for e in self._by_epoch if e <= epoch]
            return self._by_epoch[max(epochs)] if epochs else None


def publish_model(
    exported: Path,
    folder: Path,
    project_key: Identity,
    *,
    project: str,
    epoch: int,
    architecture: str,
    held_out: HeldOut | None,
) -> ModelIndex:
    """Pack the exported folder ``exported`` into ``folder/model-EPOCH.zip`` (its files inside a
    folder of the archive's name) and sign a new ``model.json`` naming it.

    Raises ``PublishedModelError`` for a negative epoch or a failed read or write (the message
    names the file).
    """
    if epoch < 0:
        raise PublishedModelError(f"a published model's epoch must be 0 or more: {epoch}")
    name = archive_name(epoch)
    try:
        files = sorted(path for path in exported.iterdir() if path.is_file())
        folder.mkdir(parents=True, exist_ok=True)
        remove_temporaries(folder, _TEMP_PREFIX)
        previous = previously_published(folder, INDEX_NAME, FILE_NAME)
        target = folder / name
        write_atomically(
            target,
            lambda writer: _pack(files, name.removesuffix(".zip"), writer),
            prefix=_TEMP_PREFIX,
            mode=0o644,  # the web server serving the folder must read it
        )
        size, sha256 = size_and_sha256(target)
        index = sign_model_index(
            project_key,
            project=project,
            epoch=epoch,
            architecture=architecture,
            held_out=held_out,
            file=name,
            size=size,
            sha256=sha256,
            published_at=time.time(),
        )
        text = json.dumps(index.to_json(), indent=1, allow_nan=False) + "\n"
        write_atomically(
            folder / INDEX_NAME,
            lambda writer: writer.write(text.encode("utf-8")),
            prefix=_TEMP_PREFIX,
            mode=0o644,
        )
    except OSError as exc:
        raise PublishedModelError(
            f"could not publish the model of epoch {epoch} into {folder}: {exc}"
        ) from exc
    prune(folder, {name, previous}, FILE_NAME, "published model", log)
    log.info("published the model of epoch %d in %s (%s)", epoch, folder, name)
    return index


def _pack(files: list[Path], inside: str, writer: BinaryIO) -> None:
    with zipfile.ZipFile(writer, "w", allowZip64=True) as archive:
        for path in files:
            stored = path.suffix in _STORED_SUFFIXES
            archive.write(
                path,
                f"{inside}/{path.name}",
                compress_type=zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED,
            )
