"""The backbone's held-out evaluations: its replica measured on text kept out of training.

Each comes in a report of its own (``POST /evaluations``), not as a field of an epoch report: an
evaluation finishes when it finishes, often after its epoch was reported, and a bad one must not
cost an epoch's contributions (nor a bad contribution an evaluation). So the whole body is checked
and anything wrong refuses it with a 400 that names the field; nothing is stored then.

The bounds are those of the epoch figures (``figures``): a finite ``loss`` from 0 to ``MAX_LOSS``,
an ``accuracy`` from 0 to 1, whole ``samples`` (sequences) and ``tokens`` counts, a whole ``epoch``,
the measurement's ``time`` (not in the future) and ``seconds`` it took. An epoch the coordinator
has not seen reported yet is stored all the same.

One row per epoch (``evaluations``, schema 7): a report sent again changes nothing, and the same
epoch measured again later (after a rollback) replaces it, as the figures do.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.coordinator.errors import BadRequest
from core.coordinator.reports.epoch_report import FUTURE_SLACK, MAX_COUNT
from core.coordinator.reports.figures import MAX_LOSS
from core.coordinator.schema import transaction

MAX_SECONDS = 30 * 86400.0
"""An evaluation takes minutes; a month is not one."""


@dataclass(frozen=True, slots=True)
class Evaluation:
    epoch: int
    """The replica's epoch when it was measured."""
    time: float
    """When it was measured, by the reporting peer's clock."""
    loss: float
    accuracy: float
    """Share of predicted tokens guessed right, 0 to 1."""
    samples: int
    """Held-out sequences measured."""
    tokens: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "time": self.time,
            "loss": self.loss,
            "accuracy": self.accuracy,
            "samples": self.samples,
            "tokens": self.tokens,
            "seconds": self.seconds,
        }


def parse_evaluation(body: Mapping[str, Any], now: float) -> Evaluation:
    """The evaluation ``body`` reports; ``BadRequest`` naming the first field that is wrong."""
    epoch = _whole(body.get("epoch"), "epoch")
    loss = _within(body.get("loss"), "loss", 0.0, MAX_LOSS)
    accuracy = _within(body.get("accuracy"), "accuracy", 0.0, 1.0)
    samples = _whole(body.get("samples"), "samples")
    tokens = _whole(body.get("tokens"), "tokens")
    seconds = _within(body.get("seconds"), "seconds", 0.0, MAX_SECONDS)
    when = _within(body.get("time"), "time", 0.0, now + FUTURE_SLACK)
    if when <= 0:
        raise BadRequest("time must be the Unix time of the evaluation")
    return Evaluation(epoch, when, loss, accuracy, samples, tokens, seconds)


def _whole(value: object, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < MAX_COUNT:
        raise BadRequest(f"{name} must be a whole number, 0 or more")
    return value


def _within(value: object, name: str, least: float, most: float) -> float:
    # NaN and Infinity (which json.loads reads) fail the comparisons; the range comes before
    # math.isfinite, which raises for an int too large for a float
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (least <= value <= most and math.isfinite(value))
    ):
        if name == "time":
            raise BadRequest(
                "time must be the Unix time of the evaluation, not in the future; check the "
                "reporting peer's clock"
            )
        raise BadRequest(f"{name} must be a finite number from {least:g} to {most:,.6g}")
    return float(value)


class Evaluations:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def record(self, evaluation: Evaluation, received: float) -> bool:
        """Store one evaluation; False if the same (or a newer one of its epoch) is stored."""
        e = evaluation
        with transaction(self._conn):
            changed = self._conn.execute(
                "INSERT INTO evaluations "
                "(epoch, time, loss, accuracy, samples, tokens, seconds, received) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (epoch) DO UPDATE SET "
                "time = excluded.time, loss = excluded.loss, accuracy = excluded.accuracy, "
                "samples = excluded.samples, tokens = excluded.tokens, "
                "seconds = excluded.seconds, received = excluded.received "
                "WHERE excluded.time > evaluations.time",
                (e.epoch, e.time, e.loss, e.accuracy, e.samples, e.tokens, e.seconds, received),
            ).rowcount
        return bool(changed)

    def latest(self) -> Evaluation | None:
        """The evaluation of the newest epoch (epochs only grow, across rollbacks too)."""
        row = self._conn.execute(
            "SELECT epoch, time, loss, accuracy, samples, tokens, seconds FROM evaluations "
            "ORDER BY epoch DESC LIMIT 1"
        ).fetchone()
        return None if row is None else Evaluation(*row)

    def get(self, epoch: int) -> Evaluation | None:
        row = self._conn.execute(
            "SELECT epoch, time, loss, accuracy, samples, tokens, seconds FROM evaluations "
            "WHERE epoch = ?",
            (epoch,),
        ).fetchone()
        return None if row is None else Evaluation(*row)

    def losses(self, most: int) -> list[tuple[float, float]]:
        """(epoch, held-out loss), oldest first; beyond ``most`` evaluations, the means over
        ``most`` or fewer equal spans of epochs (as ``Figures.losses``)."""
        first, last, count = self._conn.execute(
            "SELECT min(epoch), max(epoch), count(*) FROM evaluations"
        ).fetchone()
        if not count:
            return []
        if count <= most:
            rows = self._conn.execute(
                "SELECT epoch, loss FROM evaluations ORDER BY epoch"
            ).fetchall()
        else:
            span = math.ceil((last - first + 1) / most)
            rows = self._conn.execute(
                "SELECT avg(epoch), avg(loss) FROM evaluations GROUP BY (epoch - ?) / ? ORDER BY 1",
                (first, span),
            ).fetchall()
        return [(float(epoch), float(loss)) for epoch, loss in rows]
