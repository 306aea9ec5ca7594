"""The coordinator's SQLite file: opening it safely, its tables, and one-transaction migrations.

Like the contribution ledger, the file is checked by reading before anything is written: a file
that is not SQLite, or another program's database, or one from a newer Barnraise is refused with a
``StoreError`` naming it and is left untouched. ``PRAGMA application_id`` marks it as ours and
``PRAGMA user_version`` is the schema version; each migration commits together with its version.

WAL journal with ``synchronous=NORMAL``: readers (the management commands, a backup) never block the
service, and a commit survives the process being killed.

Usernames appear only as bound parameters, never in SQL text. ``user_key`` columns hold the
case-folded name (``names.Username.key``).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from core.coordinator.errors import StoreError

SCHEMA_VERSION = 1
APPLICATION_ID = 0x42524E43  # "BRNC": a Barnraise coordinator
_SQLITE_MAGIC = b"SQLite format 3\x00"
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


def open_database(path: Path) -> sqlite3.Connection:
    """Open (creating if absent) the coordinator database at ``path``, at the current schema."""
    _refuse_foreign_file(path)
    _create_private(path)
    try:
        conn = sqlite3.connect(str(path), timeout=_BUSY_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error as error:
        raise StoreError(f"cannot open the coordinator database {path}: {error}") from None
    try:
        _check_ours(conn, path)
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreError(f"the coordinator database {path} cannot use write-ahead logging")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        _migrate(conn, str(path))
    except sqlite3.Error as error:
        conn.close()
        raise StoreError(f"the coordinator database {path} is unreadable: {error}") from None
    except BaseException:
        conn.close()
        raise
    return conn


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction: committed on success, rolled back on any exception."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.rollback()
        raise
    conn.execute("COMMIT")


def _migrate(conn: sqlite3.Connection, label: str) -> None:
    with transaction(conn):
        version = _user_version(conn)  # again, under the write lock
        _refuse_newer(version, label)
        for step in _MIGRATIONS[version:]:
            for statement in step:
                conn.execute(statement)
        if version < SCHEMA_VERSION:
            # PRAGMA takes no parameters; both values are our own integer constants.
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")


def _refuse_foreign_file(path: Path) -> None:
    try:
        with path.open("rb") as file:
            head = file.read(len(_SQLITE_MAGIC))
    except FileNotFoundError:
        return
    except OSError as error:
        raise StoreError(f"cannot read the coordinator database {path}: {error}") from None
    if head and head != _SQLITE_MAGIC:
        raise StoreError(
            f"{path} is not a coordinator database (not SQLite); it was left untouched"
        )


def _create_private(path: Path) -> None:
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # SQLite gives its -wal and -shm files the main file's mode, so they stay private too.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError as error:
        raise StoreError(f"cannot create the coordinator database {path}: {error}") from None
    os.close(fd)


def _check_ours(conn: sqlite3.Connection, path: Path) -> None:
    version = _user_version(conn)
    _refuse_newer(version, str(path))
    not_ours = StoreError(
        f"{path} is another program's SQLite database, not a coordinator's; it was left untouched"
    )
    if version == 0:
        if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            raise not_ours
    elif conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
        raise not_ours


def _user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _refuse_newer(version: int, label: str) -> None:
    if version > SCHEMA_VERSION or version < 0:
        raise StoreError(
            f"the coordinator database {label} was written by a newer Barnraise (schema version "
            f"{version}; this one reads up to {SCHEMA_VERSION})"
        )
