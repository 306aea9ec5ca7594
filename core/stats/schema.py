"""Opening the ledger's SQLite file without harming it, and bringing its schema up to date.

Everything that could tell us the file is not ours is checked by reading only, before anything is
written: a file that does not start with SQLite's header is never handed to SQLite at all, and a
database that is damaged, belongs to another program or was written by a newer Barnraise is
refused with a ``LedgerError`` naming the path. The user's file is never deleted, truncated or
replaced; moving it aside is theirs to decide.

The schema version is ``PRAGMA user_version``; ``PRAGMA application_id`` marks the file as a
Barnraise ledger. Each migration runs in one transaction together with the version bump, so a
killed process leaves either the old schema or the new one.

The journal is WAL with ``synchronous=NORMAL``: a transaction that has committed survives the
process being killed at any moment (its pages are in the WAL, which the OS writes out on its own).
After a power cut or an OS crash the last few commits may be lost, though the file stays
consistent; that is the promise we make, and it lets a commit avoid an fsync.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from core.stats.errors import LedgerError

SCHEMA_VERSION = 1
APPLICATION_ID = 0x42524E52  # "BRNR" in ASCII
_SQLITE_MAGIC = b"SQLite format 3\x00"

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
)
assert len(_MIGRATIONS) == SCHEMA_VERSION


def open_file(path: Path) -> sqlite3.Connection:
    """Open (creating if absent) the ledger at ``path``, in WAL mode and at the current schema."""
    _refuse_foreign_file(path)
    _create_private(path)
    try:
        conn = sqlite3.connect(str(path), timeout=_BUSY_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error as error:
        raise LedgerError(f"cannot open the contribution ledger {path}: {error}") from error
    try:
        _check_readable(conn, path)
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise LedgerError(
                f"the contribution ledger {path} cannot use write-ahead logging "
                f"(journal mode stayed {mode!r}); is it on a network drive?"
            )
        conn.execute("PRAGMA synchronous=NORMAL")
        migrate(conn, str(path))
    except sqlite3.Error as error:
        conn.close()
        raise LedgerError(
            f"the contribution ledger {path} is damaged or unreadable: {error}"
        ) from error
    except BaseException:
        conn.close()
        raise
    return conn


def open_memory() -> sqlite3.Connection:
    """A fresh in-memory ledger database at the current schema (for tests of callers)."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn, ":memory:")
    return conn


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction: committed on success, rolled back on any exception."""
    # IMMEDIATE takes the write lock up front, so a busy database fails before any work is done.
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.rollback()
        raise
    conn.execute("COMMIT")


def migrate(conn: sqlite3.Connection, label: str) -> None:
    """Bring the schema to ``SCHEMA_VERSION`` in one transaction; refuse newer files."""
    with transaction(conn):
        # Read again under the write lock: another process may have migrated meanwhile.
        version = _user_version(conn)
        _refuse_newer(version, label)
        for step in _MIGRATIONS[version:]:
            for statement in step:
                conn.execute(statement)
        if version < SCHEMA_VERSION:
            # PRAGMA takes no parameters; both values are our own integer constants.
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")


def _refuse_foreign_file(path: Path) -> None:
    """Refuse, without handing it to SQLite, a file that is not a SQLite database."""
    try:
        with path.open("rb") as file:
            head = file.read(len(_SQLITE_MAGIC))
    except FileNotFoundError:
        return
    except OSError as error:
        raise LedgerError(f"cannot read the contribution ledger {path}: {error}") from error
    # An empty file is what an interrupted first start leaves; SQLite treats it as a new database.
    if head and head != _SQLITE_MAGIC:
        raise LedgerError(
            f"{path} is not a contribution ledger (not a SQLite database); it was left untouched. "
            "Move it elsewhere to start a new ledger."
        )


def _create_private(path: Path) -> None:
    """Create the parent folder (0o700) and an empty ledger file (0o600) if they are missing."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # SQLite gives its -wal and -shm files the main file's permissions, so they stay private.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError as error:
        raise LedgerError(f"cannot create the contribution ledger {path}: {error}") from error
    os.close(fd)


def _check_readable(conn: sqlite3.Connection, path: Path) -> None:
    """Read-only checks that the database is ours, not from the future, and not damaged."""
    version = _user_version(conn)
    _refuse_newer(version, str(path))
    not_ours = LedgerError(
        f"{path} is a SQLite database of another program, not a contribution ledger; "
        "it was left untouched. Move it elsewhere to start a new ledger."
    )
    if version < 0:
        raise not_ours
    if version == 0:
        # A ledger is created with its version in the same transaction, so tables at version 0
        # mean someone else's database.
        if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            raise not_ours
        return
    if conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
        raise not_ours
    problems = [str(row[0]) for row in conn.execute("PRAGMA quick_check").fetchall()]
    if problems != ["ok"]:
        raise LedgerError(
            f"the contribution ledger {path} is damaged ({problems[0]}); it was left untouched."
        )


def _user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _refuse_newer(version: int, label: str) -> None:
    if version > SCHEMA_VERSION:
        raise LedgerError(
            f"the contribution ledger {label} was written by a newer Barnraise (schema version "
            f"{version}; this one reads up to {SCHEMA_VERSION}). Update Barnraise to use it."
        )
