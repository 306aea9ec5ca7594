"""The backbone's held-out evaluations of the collaboration's model, as the ledger stores them.

``HeldOutRow`` is one evaluation as this computer's peer saw it in the backbone's progress record:
the epoch of the model measured, the mean loss per predicted token (``None`` when not finite), the
share of tokens guessed right, the sequences measured and the unigram floor (``None`` where the
backbone reported none; schema 5). ``validate_held_out`` is the check made
before anything is written; ``add_held_out`` and ``read_held_out`` are the SQL, run by ``Ledger``.

Like the epochs, the rows are kept in arrival order and only the newest ``EPOCHS_KEPT`` of each
project are kept, pruned in the insert's transaction.
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass

from core.stats.errors import LedgerError
from core.stats.newest import keep_newest, newest_rows

_MAX_INT = 2**63 - 1
_COLUMNS = "epoch, time, loss, accuracy, samples, floor"


@dataclass(frozen=True)
class HeldOutRow:
    epoch: int
    time: float
    """Unix time the evaluation was seen."""
    loss: float | None
    accuracy: float
    """0 to 1."""
    samples: int
    floor: float | None = None


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def validate_held_out(project: str, row: HeldOutRow) -> None:
    """Refuse what cannot be stored faithfully, naming the field."""
    if not isinstance(project, str) or not project.strip():
        raise LedgerError(f"an evaluation needs a project name, not {project!r}")
    for name in ("epoch", "samples"):
        value = getattr(row, name)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_INT:
            raise LedgerError(f"an evaluation's {name} must be a whole number >= 0, not {value!r}")
    if not _finite(row.time):
        raise LedgerError(f"an evaluation's time must be a finite number, not {row.time!r}")
    if not _finite(row.accuracy) or not 0 <= row.accuracy <= 1:
        raise LedgerError(f"an evaluation's accuracy must be 0 to 1, not {row.accuracy!r}")
    if row.loss is not None and not _finite(row.loss):
        raise LedgerError(f"an evaluation's loss must be a finite number or None, not {row.loss!r}")
    if row.floor is not None and not _finite(row.floor):
        raise LedgerError(
            f"an evaluation's floor must be a finite number or None, not {row.floor!r}"
        )


def add_held_out(conn: sqlite3.Connection, project: str, row: HeldOutRow, keep: int) -> None:
    """Insert ``row`` and drop the project's rows beyond the newest ``keep`` (inside the caller's
    transaction)."""
    conn.execute(
        f"INSERT INTO held_out (project, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            project,
            row.epoch,
            float(row.time),
            None if row.loss is None else float(row.loss),
            float(row.accuracy),
            row.samples,
            None if row.floor is None else float(row.floor),
        ),
    )
    keep_newest(conn, "held_out", project, keep)


def read_held_out(conn: sqlite3.Connection, project: str, limit: int) -> list[HeldOutRow]:
    """The project's newest ``limit`` rows, oldest first."""
    rows = newest_rows(conn, "held_out", _COLUMNS, project, limit)
    return [
        HeldOutRow(
            epoch=int(epoch),
            time=float(when),
            loss=None if loss is None else float(loss),
            accuracy=float(accuracy),
            samples=int(samples),
            floor=None if floor is None else float(floor),
        )
        for epoch, when, loss, accuracy, samples, floor in rows
    ]
