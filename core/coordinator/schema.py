"""The coordinator's SQLite tables and how its file is opened (``core.util.sqlite_file``, shared
with the contribution ledger, refuses files that are not ours and runs each migration in one
transaction). ``PRAGMA application_id`` marks the file as a coordinator's.

WAL journal with ``synchronous=NORMAL``: readers (the management commands, a backup) never block the
service, and a commit survives the process being killed.

Usernames appear only as bound parameters, never in SQL text. ``user_key`` columns hold the
case-folded name (``names.Username.key``).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from core.coordinator.errors import StoreError
from core.util.sqlite_file import SqliteFile, transaction

SCHEMA_VERSION = 1
APPLICATION_ID = 0x42524E43  # "BRNC": a Barnraise coordinator
# A management command writing while the service commits waits this long for the lock.
_BUSY_TIMEOUT_S = 5.0

_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """
        CREATE TABLE users (
            key TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            password TEXT,
            role TEXT NOT NULL DEFAULT 'volunteer' CHECK (role IN ('volunteer', 'moderator')),
            allowlisted INTEGER NOT NULL DEFAULT 0,
            banned INTEGER NOT NULL DEFAULT 0,
            ban_reason TEXT NOT NULL DEFAULT '',
            banned_at REAL,
            created REAL NOT NULL
        ) WITHOUT ROWID
        """,
        # Only hashes of tokens: a copy of the database does not let anyone in.
        """
        CREATE TABLE sessions (
            session_hash BLOB PRIMARY KEY,
            refresh_hash BLOB NOT NULL UNIQUE,
            user_key TEXT NOT NULL REFERENCES users (key),
            session_expires REAL NOT NULL,
            refresh_expires REAL NOT NULL,
            created REAL NOT NULL
        )
        """,
        "CREATE INDEX sessions_by_expiry ON sessions (refresh_expires)",
        # One row per (user, peer key): when it first got a pass and when its latest one expires.
        """
        CREATE TABLE passes (
            user_key TEXT NOT NULL REFERENCES users (key),
            peer TEXT NOT NULL,
            first_issued REAL NOT NULL,
            expires REAL NOT NULL,
            PRIMARY KEY (user_key, peer)
        ) WITHOUT ROWID
        """,
        "CREATE INDEX passes_by_expiry ON passes (expires)",
        """
        CREATE TABLE epochs (
            epoch INTEGER PRIMARY KEY,
            samples INTEGER NOT NULL,
            time REAL NOT NULL
        )
        """,
        """
        CREATE TABLE contributions (
            epoch INTEGER NOT NULL,
            peer TEXT NOT NULL,
            user_key TEXT NOT NULL REFERENCES users (key),
            samples INTEGER NOT NULL,
            compute_seconds REAL NOT NULL,
            time REAL NOT NULL,
            PRIMARY KEY (epoch, peer)
        ) WITHOUT ROWID
        """,
        "CREATE INDEX contributions_by_time ON contributions (time, user_key, peer)",
        # Per-user totals and UTC days, kept with each contribution so that the leaderboard never
        # scans every contribution ever made.
        """
        CREATE TABLE totals (
            user_key TEXT PRIMARY KEY REFERENCES users (key),
            samples INTEGER NOT NULL,
            compute_seconds REAL NOT NULL,
            last_seen REAL NOT NULL
        ) WITHOUT ROWID
        """,
        "CREATE INDEX totals_by_rank ON totals (samples DESC, user_key)",
        """
        CREATE TABLE days (
            user_key TEXT NOT NULL REFERENCES users (key),
            day INTEGER NOT NULL,
            samples INTEGER NOT NULL,
            compute_seconds REAL NOT NULL,
            PRIMARY KEY (user_key, day)
        ) WITHOUT ROWID
        """,
    ),
)
assert len(_MIGRATIONS) == SCHEMA_VERSION

_FILE = SqliteFile(
    "coordinator database",
    APPLICATION_ID,
    _MIGRATIONS,
    StoreError,
    busy_timeout=_BUSY_TIMEOUT_S,
    foreign_keys=True,
)

__all__ = ["SCHEMA_VERSION", "open_database", "transaction"]


def open_database(path: Path) -> sqlite3.Connection:
    """Open (creating if absent) the coordinator database at ``path``, at the current schema."""
    return _FILE.open(path)
