"""The two queries of a per-project table that keeps only its newest rows (the epochs, the held-out
evaluations, the landed epochs): prune past the newest few in the insert's transaction, and read
the newest few back oldest first. Rows are ordered by their ``id``, that is by arrival."""

from __future__ import annotations

import sqlite3
from typing import Any


def keep_newest(conn: sqlite3.Connection, table: str, project: str, keep: int) -> None:
    """Delete the project's rows of ``table`` before its newest ``keep`` (``table``: one of ours,
    never a caller's text)."""
    # the id of the oldest row to keep; everything of this project before it goes
    conn.execute(
        f"DELETE FROM {table} WHERE project = ? AND id < ("
        f"  SELECT id FROM {table} WHERE project = ? ORDER BY id DESC LIMIT 1 OFFSET ?"
        ")",
        (project, project, keep - 1),
    )


def newest_rows(
    conn: sqlite3.Connection, table: str, columns: str, project: str, limit: int
) -> list[Any]:
    """The ``columns`` of the project's newest ``limit`` rows of ``table``, oldest first."""
    return conn.execute(
        f"SELECT {columns} FROM ("
        f"  SELECT id, {columns} FROM {table} WHERE project = ? ORDER BY id DESC LIMIT ?"
        ") ORDER BY id",
        (project, limit),
    ).fetchall()
