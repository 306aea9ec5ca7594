"""The ledger's SQLite schema and how its file is opened (``core.util.files.sqlite_file`` does the
careful part: refusing files that are not ours, WAL, migrations in one transaction each).

``PRAGMA application_id`` marks the file as a Barnraise ledger. Schema versions: 1, the hourly
``hours`` table; 2 adds ``epochs`` (the loss curve); 3 adds ``held_out`` (the backbone's held-out
evaluations); 4 adds ``landed`` (this computer's own epochs, to compare with the coordinator's
credit); 5 adds ``held_out.floor`` (the unigram floor beside each evaluation, null for rows before
it and where the backbone reported none). An older file is upgraded in place when it is opened, its rows kept.

The journal is WAL with ``synchronous=NORMAL``: a transaction that has committed survives the
process being killed at any moment (its pages are in the WAL, which the OS writes out on its own).
After a power cut or an OS crash the last few commits may be lost, though the file stays
consistent; that is the promise we make, and it lets a commit avoid an fsync.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from core.stats.errors import LedgerError
from core.util.files.sqlite_file import SqliteFile, transaction

SCHEMA_VERSION = 5
APPLICATION_ID = 0x42524E52  # "BRNR" in ASCII

# Only one engine should use a ledger; if a second process holds the write lock, give up soon
# rather than stall the event loop for SQLite's default five seconds.
_BUSY_TIMEOUT_S = 2.0

# _MIGRATIONS[n] brings a file from version n to version n + 1.
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """
        CREATE TABLE hours (
            project TEXT NOT NULL,
            hour_start INTEGER NOT NULL,
            samples INTEGER NOT NULL DEFAULT 0,
            compute_seconds REAL NOT NULL DEFAULT 0.0,
            epochs INTEGER NOT NULL DEFAULT 0,
            rounds INTEGER NOT NULL DEFAULT 0,
            bytes_sent INTEGER NOT NULL DEFAULT 0,
            bytes_received INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (project, hour_start)
        ) WITHOUT ROWID
        """,
        # Totals over all projects select by time alone.
        "CREATE INDEX hours_by_time ON hours (hour_start)",
    ),
    (
        # Version 2: the collaboration's completed epochs (the loss curve), per project. Rows are
        # kept in arrival order (the rowid), not keyed by epoch: a demo swarm that is started
        # again counts its epochs from 0 once more, and both runs belong on the curve.
        """
        CREATE TABLE epochs (
            id INTEGER PRIMARY KEY,
            project TEXT NOT NULL,
            epoch INTEGER NOT NULL,
            time REAL NOT NULL,
            loss REAL,
            samples INTEGER NOT NULL,
            samples_per_second REAL NOT NULL,
            peers INTEGER NOT NULL
        )
        """,
        "CREATE INDEX epochs_by_project ON epochs (project, id)",
    ),
    (
        # Version 3: the backbone's held-out evaluations, per project, in arrival order like the
        # epochs. A table of their own: an evaluation is seen before or after its epoch completes.
        """
        CREATE TABLE held_out (
            id INTEGER PRIMARY KEY,
            project TEXT NOT NULL,
            epoch INTEGER NOT NULL,
            time REAL NOT NULL,
            loss REAL,
            accuracy REAL NOT NULL,
            samples INTEGER NOT NULL
        )
        """,
        "CREATE INDEX held_out_by_project ON held_out (project, id)",
    ),
    (
        # Version 4: the epochs whose update this computer's peer applied, per project and peer
        # key, in arrival order like the epochs; one row per (project, peer, epoch), the first,
        # as the coordinator credits each (epoch, peer) once.
        """
        CREATE TABLE landed (
            id INTEGER PRIMARY KEY,
            project TEXT NOT NULL,
            peer TEXT NOT NULL,
            epoch INTEGER NOT NULL,
            samples INTEGER NOT NULL,
            time REAL NOT NULL,
            UNIQUE (project, peer, epoch)
        )
        """,
        "CREATE INDEX landed_by_project ON landed (project, id)",
    ),
    ("ALTER TABLE held_out ADD COLUMN floor REAL",),
)
assert len(_MIGRATIONS) == SCHEMA_VERSION

_FILE = SqliteFile(
    "contribution ledger", APPLICATION_ID, _MIGRATIONS, LedgerError, busy_timeout=_BUSY_TIMEOUT_S
)

__all__ = ["SCHEMA_VERSION", "open_file", "open_memory", "transaction"]


def open_file(path: Path) -> sqlite3.Connection:
    """Open (creating if absent) the ledger at ``path``, in WAL mode and at the current schema."""
    return _FILE.open(path)


def open_memory() -> sqlite3.Connection:
    """A fresh in-memory ledger database at the current schema (for tests of callers)."""
    return _FILE.open_memory()
