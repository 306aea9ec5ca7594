"""The backbone's held-out evaluations: its replica measured on text kept out of training.

Each comes in a report of its own (``POST /evaluations``), not as a field of an epoch report: an
evaluation finishes when it finishes, often after its epoch was reported, and a bad one must not
cost an epoch's contributions (nor a bad contribution an evaluation). So the whole body is checked
(``core.trust.reports.Evaluation``: its fields and their bounds) and anything wrong refuses it with
a 400 that names the field; nothing is stored then. An epoch the coordinator has not seen reported
yet is stored all the same.

One row per epoch (``evaluations``, schema 7): a report sent again changes nothing, and the same
epoch measured again later (after a rollback) replaces it, as the figures do. Each keeps the unigram
floor its report named (schema 9), or null.
"""

from __future__ import annotations

import dataclasses
import math
import sqlite3

from core.coordinator.schema import transaction
from core.trust.reports import Evaluation

_COLUMNS = "epoch, time, loss, accuracy, samples, tokens, seconds, floor"
"""``Evaluation``'s fields, in its order (rows are written and read as its tuple)."""


class Evaluations:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def record(self, evaluation: Evaluation, received: float) -> bool:
        """Store one evaluation; False if the same (or a newer one of its epoch) is stored."""
        with transaction(self._conn):
            changed = self._conn.execute(
                f"INSERT INTO evaluations ({_COLUMNS}, received) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (epoch) DO UPDATE SET "
                "time = excluded.time, loss = excluded.loss, accuracy = excluded.accuracy, "
                "samples = excluded.samples, tokens = excluded.tokens, "
                "seconds = excluded.seconds, floor = excluded.floor, "
                "received = excluded.received "
                "WHERE excluded.time > evaluations.time",
                (*dataclasses.astuple(evaluation), received),
            ).rowcount
        return bool(changed)

    def latest(self) -> Evaluation | None:
        """The evaluation of the newest epoch (epochs only grow, across rollbacks too)."""
        row = self._conn.execute(
            f"SELECT {_COLUMNS} FROM evaluations ORDER BY epoch DESC LIMIT 1"
        ).fetchone()
        return None if row is None else Evaluation(*row)

    def get(self, epoch: int) -> Evaluation | None:
        row = self._conn.execute(
            f"SELECT {_COLUMNS} FROM evaluations WHERE epoch = ?",
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
