"""Opening one of Barnraise's own SQLite files without harming it, and migrating its schema.

Shared by the contribution ledger and the coordinator's database. Everything that could tell us a
file is not ours is checked by reading only, before anything is written: a file that does not start
with SQLite's header is never handed to SQLite, and a database of another program (tables at
version 0, or another ``application_id``), one written by a newer Barnraise, or a damaged one is
refused with an error naming the path. The user's file is never deleted, truncated or replaced.

The schema version is ``PRAGMA user_version``; each migration runs in one transaction with the
version bump, so a killed process leaves the old schema or the new one. The journal is WAL with
``synchronous=NORMAL``: a committed transaction survives the process being killed at any moment.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from core.util.errors import BarnraiseError

_SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass(frozen=True)
class SqliteFile:
    """How to open one kind of file: its name in messages, mark, migrations and error type."""

    what: str
    """How messages name it: "contribution ledger", "coordinator database"."""
    application_id: int
    migrations: tuple[tuple[str, ...], ...]
    """``migrations[n]`` brings a file from version n to n + 1."""
    error: type[BarnraiseError]
    busy_timeout: float = 5.0
    """Seconds to wait for another process's write lock before giving up."""
    foreign_keys: bool = False

    @property
    def version(self) -> int:
        return len(self.migrations)

    def open(self, path: Path) -> sqlite3.Connection:
        """Open (creating if absent) the file at ``path``, in WAL mode and at the current schema."""
        self._refuse_foreign_file(path)
        self._create_private(path)
        try:
            conn = sqlite3.connect(str(path), timeout=self.busy_timeout, isolation_level=None)
        except sqlite3.Error as error:
            raise self.error(f"cannot open the {self.what} {path}: {error}") from None
        try:
            self._check_ours(conn, path)
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise self.error(
                    f"the {self.what} {path} cannot use write-ahead logging "
                    f"(journal mode stayed {mode!r}); is it on a network drive?"
                )
            conn.execute("PRAGMA synchronous=NORMAL")
            if self.foreign_keys:
                conn.execute("PRAGMA foreign_keys=ON")
            self.migrate(conn, str(path))
        except sqlite3.Error as error:
            conn.close()
            raise self.error(f"the {self.what} {path} is damaged or unreadable: {error}") from None
        except BaseException:
            conn.close()
            raise
        return conn

    def open_memory(self) -> sqlite3.Connection:
        """A fresh in-memory database at the current schema (for tests of callers)."""
        conn = sqlite3.connect(":memory:", isolation_level=None)
        if self.foreign_keys:
            conn.execute("PRAGMA foreign_keys=ON")
        self.migrate(conn, ":memory:")
        return conn

    def migrate(self, conn: sqlite3.Connection, label: str) -> None:
        """Bring the schema up to date in one transaction; refuse newer files."""
        with transaction(conn):
            version = _user_version(conn)  # again, under the write lock: another process may
            self._refuse_newer(version, label)  # have migrated meanwhile
            for step in self.migrations[version:]:
                for statement in step:
                    conn.execute(statement)
            if version < self.version:
                # PRAGMA takes no parameters; both values are our own integer constants.
                conn.execute(f"PRAGMA user_version = {int(self.version)}")
                conn.execute(f"PRAGMA application_id = {int(self.application_id)}")

    def _refuse_foreign_file(self, path: Path) -> None:
        try:
            with path.open("rb") as file:
                head = file.read(len(_SQLITE_MAGIC))
        except FileNotFoundError:
            return
        except OSError as error:
            raise self.error(f"cannot read the {self.what} {path}: {error}") from None
        # An empty file is what an interrupted first start leaves; SQLite treats it as new.
        if head and head != _SQLITE_MAGIC:
            raise self.error(
                f"{path} is not a {self.what} (not a SQLite database); it was left untouched. "
                "Move it elsewhere to start a new one."
            )

    def _create_private(self, path: Path) -> None:
        """The parent folder (0o700) and an empty file (0o600), if they are missing."""
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # SQLite gives its -wal and -shm files the main file's mode, so they stay private.
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return
        except OSError as error:
            raise self.error(f"cannot create the {self.what} {path}: {error}") from None
        os.close(fd)

    def _check_ours(self, conn: sqlite3.Connection, path: Path) -> None:
        version = _user_version(conn)
        self._refuse_newer(version, str(path))
        not_ours = self.error(
            f"{path} is a SQLite database of another program, not a {self.what}; it was left "
            "untouched. Move it elsewhere to start a new one."
        )
        if version < 0:
            raise not_ours
        if version == 0:
            # we create files with their version in the same transaction: tables at version 0
            # mean someone else's database
            if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                raise not_ours
            return
        if conn.execute("PRAGMA application_id").fetchone()[0] != self.application_id:
            raise not_ours
        problems = [str(row[0]) for row in conn.execute("PRAGMA quick_check").fetchall()]
        if problems != ["ok"]:
            raise self.error(
                f"the {self.what} {path} is damaged ({problems[0]}); it was left untouched."
            )

    def _refuse_newer(self, version: int, label: str) -> None:
        if version > self.version:
            raise self.error(
                f"the {self.what} {label} was written by a newer Barnraise (schema version "
                f"{version}; this one reads up to {self.version}). Update Barnraise to use it."
            )


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


def _user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])
