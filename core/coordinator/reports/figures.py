"""The collaboration's figures per epoch, as the auxiliary peer reports them: the project page's
live numbers and its loss curve.

An epoch report may carry ``loss`` (a number, or null when no peer had a finite one),
``samples_per_second`` (the trainers' summed speed) and ``alive_peers`` (trainers with fresh
progress records). Auxiliary peers of older versions send none of them: such a report stores no
figures and is otherwise accepted as before. A value that is present must be a finite number within
its bound (``MAX_LOSS``, ``MAX_SPEED``, ``MAX_PEERS``), else the report is a 400.

One row per epoch (``figures``, schema 5). A report sent again (a retry) changes nothing; the same
epoch reported with a later ``time`` (trained again after a rollback) replaces the row, so the curve
shows the run that is going on. ``received`` is the coordinator's own clock: "volunteers online"
reads the newest report by when it arrived, whatever the reporting peer's clock says.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.coordinator.errors import BadRequest
from core.coordinator.schema import transaction

MAX_LOSS = 1e6
"""Far above the loss of any model that learns (a uniform guess over 2**20 tokens is about 14)."""
MAX_SPEED = 1e9
"""Samples per second of the whole collaboration."""
MAX_PEERS = 1_000_000
FIELDS = ("loss", "samples_per_second", "alive_peers")


@dataclass(frozen=True, slots=True)
class EpochFigures:
    epoch: int
    time: float
    """When the epoch ended, by the reporting peer's clock."""
    loss: float | None
    samples_per_second: float | None
    alive_peers: int | None


def parse_figures(body: Mapping[str, Any], epoch: int, time: float) -> EpochFigures | None:
    """The figures a report carries, or None if it carries none (an older auxiliary peer);
    ``BadRequest`` for a value that is not a finite number within its bound."""
    if not any(name in body for name in FIELDS):
        return None
    loss = _bounded(body.get("loss"), "loss", MAX_LOSS)
    speed = _bounded(body.get("samples_per_second"), "samples_per_second", MAX_SPEED)
    alive = body.get("alive_peers")
    if alive is not None and (
        not isinstance(alive, int) or isinstance(alive, bool) or not 0 <= alive <= MAX_PEERS
    ):
        raise BadRequest(f"alive_peers must be a whole number from 0 to {MAX_PEERS}, or null")
    return EpochFigures(epoch, time, loss, speed, alive)


def _bounded(value: object, name: str, most: float) -> float | None:
    if value is None:
        return None
    # json.loads reads NaN and Infinity, which fail the comparisons; the range comes first, as
    # math.isfinite of an int too large for a float raises
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (0 <= value <= most and math.isfinite(value))
    ):
        raise BadRequest(f"{name} must be a finite number from 0 to {most:,.0f}, or null")
    return float(value)


@dataclass(frozen=True, slots=True)
class Latest:
    """The newest report's figures and when it arrived."""

    figures: EpochFigures
    received: float


class Figures:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def record(self, figures: EpochFigures, received: float) -> bool:
        """Store one epoch's figures; False if the same report was stored before."""
        with transaction(self._conn):
            changed = self._conn.execute(
                "INSERT INTO figures "
                "(epoch, time, loss, samples_per_second, alive_peers, received) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (epoch) DO UPDATE SET "
                "time = excluded.time, loss = excluded.loss, "
                "samples_per_second = excluded.samples_per_second, "
                "alive_peers = excluded.alive_peers, received = excluded.received "
                "WHERE excluded.time > figures.time",
                (
                    figures.epoch,
                    figures.time,
                    figures.loss,
                    figures.samples_per_second,
                    figures.alive_peers,
                    received,
                ),
            ).rowcount
        return bool(changed)

    def latest(self) -> Latest | None:
        row = self._conn.execute(
            "SELECT epoch, time, loss, samples_per_second, alive_peers, received FROM figures "
            "ORDER BY received DESC, epoch DESC LIMIT 1"
        ).fetchone()
        if row is None:
            return None
        return Latest(EpochFigures(*row[:5]), float(row[5]))

    def losses(self, most: int) -> list[tuple[float, float]]:
        """(epoch, loss) of every epoch with a loss, oldest first; beyond ``most`` epochs, the
        means over ``most`` or fewer equal spans of epochs (a curve needs no more points)."""
        first, last, count = self._conn.execute(
            "SELECT min(epoch), max(epoch), count(*) FROM figures WHERE loss IS NOT NULL"
        ).fetchone()
        if not count:
            return []
        if count <= most:
            rows = self._conn.execute(
                "SELECT epoch, loss FROM figures WHERE loss IS NOT NULL ORDER BY epoch"
            ).fetchall()
        else:
            span = math.ceil((last - first + 1) / most)
            rows = self._conn.execute(
                "SELECT avg(epoch), avg(loss) FROM figures WHERE loss IS NOT NULL "
                "GROUP BY (epoch - ?) / ? ORDER BY 1",
                (first, span),
            ).fetchall()
        return [(float(epoch), float(loss)) for epoch, loss in rows]

    def newest_epoch(self) -> int | None:
        """The highest epoch reported with or without figures (``epochs`` counts them all)."""
        row = self._conn.execute(
            "SELECT max(epoch) FROM (SELECT epoch FROM epochs UNION ALL SELECT epoch FROM figures)"
        ).fetchone()
        return None if row[0] is None else int(row[0])
