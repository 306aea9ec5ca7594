"""What the backbone's work folder says about a checkpoint, for its model card.

The backbone keeps two logs beside its ``checkpoints`` folder (``core.training.peer.roles``):
``evaluation.jsonl``, one line per held-out evaluation (``PeerEvaluation``'s fields, the unigram
floor among them), and ``metrics.jsonl``, one line per epoch with each contributor's samples. The
card of a checkpoint of epoch E shows the newest evaluation at or before E (``held_out_at``) and how
many contributed before E (``contributors_before``).

Both logs are rotated (``.1``, ``.2``) and read whole. A line that is not a well-formed record (a
crash mid-write, an edit) is skipped and counted, never fatal: the export goes on with what the
rest says.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.training.credit.metrics import METRICS_BACKUPS
from core.util.process.logfiles import rotated_files


@dataclass(frozen=True)
class HeldOutFigures:
    """A held-out evaluation of the model, as the card shows it."""

    epoch: int
    """The epoch of the weights measured."""
    loss: float
    """Mean cross-entropy per predicted token, in nats."""
    accuracy: float
    """Share of predicted tokens guessed right, 0 to 1."""
    sequences: int
    """Held-out sequences measured."""
    floor: float | None = None
    """The unigram floor on the same tokens (``core.training.evaluation.floor``), when known."""


@dataclass(frozen=True)
class NotEvaluated:
    """Why the card has no held-out figures."""

    reason: str
    """In the card's words, naming no local path."""
    log: Path | None = None
    """The log that was read or looked for, for the person exporting."""
    detail: str = ""
    """What went wrong reading it, for the person exporting."""


@dataclass(frozen=True)
class Evaluated:
    figures: HeldOutFigures
    log: Path | None
    """The log they were read from; None: the caller gave them."""
    skipped: int = 0
    """Lines of the log that were not a well-formed evaluation."""


@dataclass(frozen=True)
class Contributors:
    count: int
    accounts: bool
    """Counted by user name (a moderated project), rather than by peer."""
    complete: bool
    """The log reaches back to the first epoch; otherwise ``count`` is a lower bound."""
    log: Path
    skipped: int
    """Lines of the log that were not a well-formed epoch."""


NO_FIGURES = NotEvaluated("no held-out figures were given for this export")


def held_out_at(log: Path, epoch: int) -> Evaluated | NotEvaluated:
    """The newest evaluation in the backbone's ``evaluation.jsonl`` at ``log`` of an epoch at or
    before ``epoch`` (of two of the same epoch, the later line); why there is none otherwise.
    An evaluation whose loss was not finite says nothing to show and is passed over."""
    if not rotated_files(log, METRICS_BACKUPS):
        return NotEvaluated("the collaboration's backbone logged no held-out evaluation", log)
    best: HeldOutFigures | None = None
    skipped = 0
    try:
        for record in _records(log):
            if record is None:
                skipped += 1
                continue
            figures = _figures(record)
            if figures is None:
                if record.get("loss", 0) is not None:  # a null loss is a record, not damage
                    skipped += 1
                continue
            if figures.epoch <= epoch and (best is None or figures.epoch >= best.epoch):
                best = figures
    except OSError as exc:
        return NotEvaluated("the backbone's held-out evaluations could not be read", log, str(exc))
    if best is None:
        return NotEvaluated(f"no held-out evaluation was logged at or before epoch {epoch:,}", log)
    return Evaluated(best, log, skipped)


def contributors_before(log: Path, epoch: int, *, accounts: bool) -> Contributors | None:
    """How many peers (users with ``accounts``) the backbone's ``metrics.jsonl`` at ``log``
    credits with samples of the epochs before ``epoch``, withdrawn credit taken back; None when
    the log holds no such epoch or cannot be read."""
    samples: dict[str, int] = {}
    first: int | None = None
    skipped = 0
    try:
        for record in _records(log):
            parts = None if record is None else _contributions(record)
            if record is None or parts is None:
                skipped += 1
                continue
            at = int(record["epoch"])
            if at >= epoch:
                continue
            first = at if first is None else min(first, at)
            sign = -1 if record.get("withdrawn") is True else 1
            for name, count in parts.items():
                samples[name] = samples.get(name, 0) + sign * count
    except OSError:
        return None
    if first is None:
        return None
    count = sum(1 for total in samples.values() if total > 0)
    return Contributors(count, accounts, first == 0, log, skipped)


def _records(log: Path) -> Iterator[dict[str, Any] | None]:
    """Each line of ``log`` and its rotated copies, oldest first: an object, or None for a line
    that is not one."""
    for part in rotated_files(log, METRICS_BACKUPS):
        with part.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    yield None
                    continue
                yield record if isinstance(record, dict) else None


def _figures(record: Mapping[str, Any]) -> HeldOutFigures | None:
    epoch, sequences = _count(record.get("epoch")), _count(record.get("samples"))
    loss, accuracy = _number(record.get("loss")), _number(record.get("accuracy"))
    if epoch is None or sequences is None or loss is None or accuracy is None:
        return None
    if not (loss >= 0 and 0 <= accuracy <= 1):
        return None
    floor = _number(record.get("floor"))
    return HeldOutFigures(epoch, loss, accuracy, sequences, floor if floor and floor > 0 else None)


def _contributions(record: Mapping[str, Any]) -> dict[str, int] | None:
    parts = record.get("contributions")
    if _count(record.get("epoch")) is None or not isinstance(parts, dict):
        return None
    if not all(
        isinstance(name, str) and _count(count) is not None for name, count in parts.items()
    ):
        return None
    return parts


def _count(value: object) -> int | None:
    """``value`` when it is a whole number of at least 0."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _number(value: object) -> float | None:
    """``value`` as a float when it is a finite number."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None
