"""A contribution ledger exactly as an earlier release wrote it, for the upgrade tests: the first
``versions`` migrations, one hour's contribution and one epoch."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from core.stats import LedgerError
from core.stats.schema import _MIGRATIONS, APPLICATION_ID
from core.util.files.sqlite_file import SqliteFile

WHEN = 1_700_000_000.0
"""The epoch's time."""


def old_ledger(path: Path, versions: int) -> sqlite3.Connection:
    """The ledger at ``path`` after the first ``versions`` migrations, with 96 samples in one hour
    (2.5 s of compute) and epoch 4 of project ``p``; open, for the test to add to and close."""
    old = SqliteFile("contribution ledger", APPLICATION_ID, _MIGRATIONS[:versions], LedgerError)
    conn = old.open(path)
    conn.execute(
        "INSERT INTO hours (project, hour_start, samples, compute_seconds) VALUES (?, ?, ?, ?)",
        ("p", 1_699_999_200, 96, 2.5),
    )
    conn.execute(
        "INSERT INTO epochs (project, epoch, time, loss, samples, samples_per_second, peers) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        ("p", 4, WHEN, 6.5, 512, 80.0, 3),
    )
    return conn
