"""This computer's landed epochs, as the ledger stores them: the engine's own count of its work,
epoch by epoch, to compare with what the project's coordinator credited.

``LandedRow`` is one epoch whose update this computer's peer applied: the peer key it trained
under (a PeerID's text), the epoch, its own samples in it, and when the engine heard of it.
``validate_landed`` is the check made before anything is written; ``add_landed`` and
``read_landed`` are the SQL, run by ``Ledger``.

The coordinator credits each (epoch, peer) once, the first report of it (an epoch trained again
after a rollback is not credited twice), so this table keeps the first record of each (project,
peer, epoch) too, and a second one writes nothing. Like the epochs, the rows are kept in arrival
order and only the newest ``LANDED_KEPT`` of each project are kept, pruned in the insert's
transaction.
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass

from core.stats.errors import LedgerError
from core.stats.newest import keep_newest

LANDED_KEPT = 1000
"""Rows kept per project (the newest): the most epochs the coordinator lists in one answer."""

_MAX_INT = 2**63 - 1
_PEER_CHARS = 200


@dataclass(frozen=True)
class LandedRow:
    peer: str
    """The peer key (PeerID text) this computer trained under."""
    epoch: int
    samples: int
    """This computer's samples in the epoch."""
    time: float
    """Unix time the engine heard of it."""


def validate_landed(project: str, row: LandedRow) -> None:
    """Refuse what cannot be stored faithfully, naming the field."""
    if not isinstance(project, str) or not project.strip():
        raise LedgerError(f"a landed epoch needs a project name, not {project!r}")
    if not isinstance(row.peer, str) or not row.peer.strip() or len(row.peer) > _PEER_CHARS:
        raise LedgerError(f"a landed epoch needs the peer's key, not {row.peer!r}")
    for name in ("epoch", "samples"):
        value = getattr(row, name)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_INT:
            raise LedgerError(f"a landed epoch's {name} must be a whole number >= 0, not {value!r}")
    time = row.time
    if isinstance(time, bool) or not isinstance(time, int | float) or not math.isfinite(time):
        raise LedgerError(f"a landed epoch's time must be a finite number, not {time!r}")


def add_landed(conn: sqlite3.Connection, project: str, row: LandedRow, keep: int) -> bool:
    """Insert ``row`` unless its (project, peer, epoch) is there already, and drop the project's
    rows beyond the newest ``keep`` (inside the caller's transaction); whether it was new."""
    added = conn.execute(
        "INSERT INTO landed (project, peer, epoch, samples, time) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT (project, peer, epoch) DO NOTHING",
        (project, row.peer, row.epoch, row.samples, float(row.time)),
    ).rowcount
    if added:
        keep_newest(conn, "landed", project, keep)
    return bool(added)


def read_landed(conn: sqlite3.Connection, project: str, peer: str, limit: int) -> list[LandedRow]:
    """The newest ``limit`` rows of ``peer`` in ``project``, oldest first."""
    rows = conn.execute(
        "SELECT epoch, samples, time FROM ("
        "  SELECT id, epoch, samples, time FROM landed WHERE project = ? AND peer = ? "
        "  ORDER BY id DESC LIMIT ?"
        ") ORDER BY id",
        (project, peer, limit),
    ).fetchall()
    return [
        LandedRow(peer=peer, epoch=int(epoch), samples=int(samples), time=float(when))
        for epoch, samples, when in rows
    ]
