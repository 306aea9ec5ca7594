"""The collaboration's completed epochs (its loss curve), as the ledger stores them.

``EpochRow`` is one epoch of the whole collaboration as this computer's peer saw it complete: the
mean loss over every peer's mini-steps (``None`` when no finite loss was reported), the samples and
speed of all peers together and how many trainers were alive. ``validate_epoch`` is the check made
before anything is written; ``add_epoch`` and ``read_epochs`` are the SQL, run by ``Ledger``.

Only the newest ``EPOCHS_KEPT`` rows of each project are kept: the curve is for looking at, and an
engine that contributes for years must not grow its file without bound. The pruning runs in the
same transaction as the insert, so the table never holds more than that after a commit.
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass

from core.stats.errors import LedgerError
from core.stats.newest import keep_newest, newest_rows

EPOCHS_KEPT = 2000
"""Rows kept per project (the newest)."""

_MAX_INT = 2**63 - 1
_COLUMNS = "epoch, time, loss, samples, samples_per_second, peers"


@dataclass(frozen=True)
class EpochRow:
    epoch: int
    time: float
    """Unix time the epoch was seen complete."""
    loss: float | None
    samples: int
    samples_per_second: float
    peers: int


def validate_epoch(project: str, row: EpochRow) -> None:
    """Refuse what cannot be stored faithfully, naming the field."""
    if not isinstance(project, str) or not project.strip():
        raise LedgerError(f"an epoch needs a project name, not {project!r}")
    for name in ("epoch", "samples", "peers"):
        value = getattr(row, name)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_INT:
            raise LedgerError(f"an epoch's {name} must be a whole number >= 0, not {value!r}")
    for name in ("time", "samples_per_second"):
        value = getattr(row, name)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise LedgerError(f"an epoch's {name} must be a finite number, not {value!r}")
    if row.samples_per_second < 0:
        raise LedgerError(
            f"an epoch's samples_per_second must be >= 0, not {row.samples_per_second}"
        )
    loss = row.loss
    if loss is not None and (
        isinstance(loss, bool) or not isinstance(loss, int | float) or not math.isfinite(loss)
    ):
        raise LedgerError(f"an epoch's loss must be a finite number or None, not {loss!r}")


def add_epoch(conn: sqlite3.Connection, project: str, row: EpochRow, keep: int) -> None:
    """Insert ``row`` and drop the project's rows beyond the newest ``keep`` (inside the caller's
    transaction)."""
    conn.execute(
        f"INSERT INTO epochs (project, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            project,
            row.epoch,
            float(row.time),
            None if row.loss is None else float(row.loss),
            row.samples,
            float(row.samples_per_second),
            row.peers,
        ),
    )
    keep_newest(conn, "epochs", project, keep)


def read_epochs(conn: sqlite3.Connection, project: str, limit: int) -> list[EpochRow]:
    """The project's newest ``limit`` rows, oldest first."""
    rows = newest_rows(conn, "epochs", _COLUMNS, project, limit)
    return [
        EpochRow(
            epoch=int(epoch),
            time=float(when),
            loss=None if loss is None else float(loss),
            samples=int(samples),
            samples_per_second=float(speed),
            peers=int(peers),
        )
        for epoch, when, loss, samples, speed, peers in rows
    ]
