"""The collaboration's figures per epoch, as the backbone reports them: the project page's
live numbers and its loss curve.

An epoch report may carry ``loss``, ``samples_per_second`` and ``alive_peers``, each within its
bound (``core.trust.reports.EpochFigures``). Backbones of older versions send none of them:
such a report stores no figures and is otherwise accepted as before.

One row per epoch (``figures``, schema 5). A report sent again (a retry) changes nothing; the same
epoch reported with a later ``time`` (trained again after a rollback) replaces the row, so the curve
shows the run that is going on. ``received`` is the coordinator's own clock: "volunteers online"
reads the newest report by when it arrived, whatever the reporting peer's clock says.
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass

from core.coordinator.schema import transaction
from core.trust.reports import EpochFigures


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
