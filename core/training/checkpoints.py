"""Checkpoints on disk: written atomically, never with NaN weights, the newest few kept, and
milestones further back for rollbacks.

Any peer can join or restart from a checkpoint, so a bad one spreads: a checkpoint whose loss or
weights are not finite is refused, and a crash mid-write never leaves a half-written file under a
checkpoint's name (the file is written aside, synced, then renamed into place).

Files are read with ``torch.load(weights_only=True)``, which unpickles only tensors and plain
values, so that opening a checkpoint from elsewhere cannot run code. ``metadata`` must therefore
hold only ``None``, bool, int, float, str, and lists, tuples and str-keyed dicts of these;
``save`` checks this up front rather than writing a file that ``load`` would refuse.

Rolling back (``core.training.moderation.rollback``) needs the checkpoint the moderators name, usually from
before the trouble began, so older than the last few. With ``milestone_every`` E the store also keeps
the newest ``milestones`` checkpoints whose epoch is a multiple of E: a backbone that checkpoints
every 10 epochs with ``keep=3``, E=100 and 10 milestones holds at most 13 files and can roll back to
any multiple of 100 over the last 1000 epochs. Retention only ever removes files; a rollback to an
epoch the store no longer has fails with a message naming the folder.

One store per directory: a store removes the temporary files that an interrupted save left in
its directory, which would break a second writer saving there at the same time.
"""

from __future__ import annotations

import builtins
import logging
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from core.training.errors import CheckpointError
from core.util.files.atomic import remove_old, remove_temporaries, write_atomically

log = logging.getLogger(__name__)

FORMAT = 1
_NAME = re.compile(r"checkpoint-(\d{8,})\.pt")
_TEMP_PREFIX = ".checkpoint-"
_FIELDS = ("format", "epoch", "model", "optimizer", "metadata", "loss", "saved_at")


@dataclass(frozen=True)
class Checkpoint:
    """What a checkpoint file holds. ``saved_at`` is a Unix time in seconds."""

    epoch: int
    model: dict[str, Any]
    optimizer: dict[str, Any]
    metadata: dict[str, Any]
    loss: float | None
    saved_at: float


def _first_non_finite(value: object, where: str) -> str | None:
    """The place of the first floating tensor in ``value`` with a NaN or inf, if any."""
    if isinstance(value, torch.Tensor):
        if (value.is_floating_point() or value.is_complex()) and not bool(
            torch.isfinite(value).all()
        ):
            return where
        return None
    if isinstance(value, Mapping):
        for key, item in value.items():
            found = _first_non_finite(item, f"{where}[{key!r}]")
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = _first_non_finite(item, f"{where}[{index}]")
            if found is not None:
                return found
    return None


def _check_plain(value: object, where: str) -> None:
    """Raise unless ``value`` is made only of types that a weights-only load accepts."""
    if value is None or isinstance(value, bool | int | float | str):
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_plain(item, f"{where}[{index}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise CheckpointError(f"checkpoint {where} has a key that is not a str: {key!r}")
            _check_plain(item, f"{where}[{key!r}]")
        return
    raise CheckpointError(
        f"checkpoint {where} is a {type(value).__name__}; metadata may hold only None, bool, "
        "int, float, str, and lists, tuples and dicts of these"
    )


class CheckpointStore:
    """The checkpoints in ``directory``, named ``checkpoint-{epoch:08d}.pt``, keeping the newest
    ``keep`` of them, and the newest ``milestones`` whose epoch is a multiple of
    ``milestone_every`` (0: no milestones)."""

    def __init__(
        self, directory: Path, keep: int = 3, *, milestone_every: int = 0, milestones: int = 10
    ) -> None:
        if keep < 1:
            raise CheckpointError(f"a checkpoint store must keep at least 1 checkpoint, not {keep}")
        if milestone_every < 0 or milestones < 0:
            raise CheckpointError(
                f"milestone_every ({milestone_every}) and milestones ({milestones}) must be "
                "0 or more"
            )
        self.directory = Path(directory)
        self.keep = keep
        self.milestone_every = milestone_every
        self.milestones = milestones

    def path_for(self, epoch: int) -> Path:
        """Where the checkpoint of ``epoch`` is (or would be) stored."""
        return self.directory / f"checkpoint-{epoch:08d}.pt"

    def save(
        self,
        epoch: int,
        model_state: dict[str, Any],
        optimizer_state: dict[str, Any],
        metadata: dict[str, Any],
        loss: float | None,
    ) -> Path | None:
        """Write the checkpoint of ``epoch`` and prune older ones; return its path.

        Pruning keeps the ``keep`` highest epochs, the milestones, and always the checkpoint just
        written.

        Returns None, writing nothing, when ``loss`` or a floating tensor in the model or optimizer
        state is NaN or infinite. Raises ``CheckpointError`` for a negative epoch, metadata that is
        not plain data, or a failed write (the message names the file).
        """
        if epoch < 0:
            raise CheckpointError(f"a checkpoint's epoch must be 0 or more, not {epoch}")
        _check_plain(metadata, "metadata")
        if loss is not None and not math.isfinite(loss):
            log.warning("not saving the checkpoint of epoch %d: its loss is %s", epoch, loss)
            return None
        for name, state in (("model", model_state), ("optimizer", optimizer_state)):
            bad = _first_non_finite(state, name)
            if bad is not None:
                log.warning(
                    "not saving the checkpoint of epoch %d: %s holds NaN or infinite values",
                    epoch,
                    bad,
                )
                return None

        payload = {
            "format": FORMAT,
            "epoch": epoch,
            "model": model_state,
            "optimizer": optimizer_state,
            "metadata": metadata,
            "loss": None if loss is None else float(loss),
            "saved_at": time.time(),
        }
        path = self.path_for(epoch)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            # a crash mid-save leaves a temporary as large as a checkpoint: never let them pile up
            remove_temporaries(self.directory, _TEMP_PREFIX)
            self._write_atomically(path, payload)
        except OSError as e:
            raise CheckpointError(f"could not write checkpoint {path}: {e}") from e
        self._prune(path)
        return path

    def latest(self) -> Path | None:
        """The checkpoint with the highest epoch, or None when there is none."""
        paths = self.list()
        return paths[-1] if paths else None

    def list(self) -> builtins.list[Path]:
        """The checkpoints in the directory, oldest epoch first."""
        return [path for _, path in self._epochs()]

    def _epochs(self) -> builtins.list[tuple[int, Path]]:
        if not self.directory.is_dir():
            return []
        found: builtins.list[tuple[int, Path]] = []
        for path in self.directory.iterdir():
            match = _NAME.fullmatch(path.name)
            if match is not None and path.is_file():
                found.append((int(match.group(1)), path))
        return sorted(found)

    @staticmethod
    def load(path: Path) -> Checkpoint:
        """Read the checkpoint at ``path``, with tensors on the CPU.

        Raises ``CheckpointError`` naming ``path`` when the file is missing, unreadable,
        truncated, or not a checkpoint of a format this version knows.
        """
        path = Path(path)
        if not path.is_file():
            raise CheckpointError(f"no checkpoint at {path}")
        try:
            data = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:
            # torch.load reports damage through many exception types (zip, pickle, EOF, OS,
            # runtime errors), none of which is a bug of ours, so all of them mean "unreadable".
            raise CheckpointError(
                f"checkpoint {path} cannot be read (truncated, damaged or not a checkpoint): {e}"
            ) from e
        return _decode(data, path)

    def _write_atomically(self, path: Path, payload: dict[str, Any]) -> None:
        write_atomically(path, lambda file: torch.save(payload, file), prefix=_TEMP_PREFIX)

    def _prune(self, just_saved: Path) -> None:
        found = self._epochs()
        # an epoch older than those kept is kept anyway, so that the path returned exists
        kept = {just_saved, *(path for _, path in found[-self.keep :])}
        every = self.milestone_every
        if every and self.milestones:
            milestones = [path for epoch, path in found if epoch % every == 0]
            kept.update(milestones[-self.milestones :])
        for _, path in found:
            if path not in kept:
                remove_old(path, log, "checkpoint")


def _decode(data: object, path: Path) -> Checkpoint:
    if not isinstance(data, dict) or "format" not in data:
        raise CheckpointError(f"{path} is not a Barnraise checkpoint")
    if data["format"] != FORMAT:
        raise CheckpointError(
            f"checkpoint {path} has format {data['format']!r}; this version reads format {FORMAT}"
        )
    missing = [field for field in _FIELDS if field not in data]
    if missing:
        raise CheckpointError(f"checkpoint {path} lacks {', '.join(missing)}")
    epoch, loss, saved_at = data["epoch"], data["loss"], data["saved_at"]
    well_formed = (
        isinstance(epoch, int)
        and not isinstance(epoch, bool)
        and all(isinstance(data[key], dict) for key in ("model", "optimizer", "metadata"))
        and (loss is None or isinstance(loss, float))
        and isinstance(saved_at, float)
    )
    if not well_formed:
        raise CheckpointError(f"checkpoint {path} has fields of the wrong type")
    return Checkpoint(
        epoch=epoch,
        model=data["model"],
        optimizer=data["optimizer"],
        metadata=data["metadata"],
        loss=loss,
        saved_at=saved_at,
    )
