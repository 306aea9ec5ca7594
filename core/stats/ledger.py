"""The contribution ledger: per project and per UTC hour, what this computer gave.

One SQLite row per (project, hour_start) holds samples processed, compute seconds, epochs finished,
averaging rounds joined and bytes sent and received; ``add`` increments the row of the hour in one
short transaction, so a process killed at any moment loses no committed amount (see ``schema`` for
the WAL durability promise and for how a file that is not ours is refused and left untouched).
The same file keeps the collaboration's recent epochs, its loss curve (``add_epoch``, ``epochs``;
see ``epochs``), the backbone's held-out evaluations (``add_held_out``, ``held_out``), and this
computer's landed epochs, its own count to compare with the coordinator's credit (``add_landed``,
``landed``; see ``landed``).

A ``Ledger`` is single-threaded: the engine uses it from its event-loop thread only, and SQLite's
default same-thread check is kept to catch any other use.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from core.stats.buckets import (
    day_label,
    day_start,
    hour_start,
    local_day,
    month_start,
    require_finite,
    require_offset,
)
from core.stats.epochs import EPOCHS_KEPT, EpochRow, add_epoch, read_epochs, validate_epoch
from core.stats.errors import LedgerError
from core.stats.held_out import HeldOutRow, add_held_out, read_held_out, validate_held_out
from core.stats.landed import LANDED_KEPT, LandedRow, add_landed, read_landed, validate_landed
from core.stats.schema import open_file, open_memory, transaction
from core.stats.work_done import HourRow, WorkDone, validate_amounts

__all__ = ["EpochRow", "HeldOutRow", "HourRow", "LandedRow", "Ledger", "WorkDone"]

_AMOUNT_COLUMNS = ("samples", "compute_seconds", "epochs", "rounds", "bytes_sent", "bytes_received")
_SUMS = ", ".join(f"COALESCE(SUM({column}), 0)" for column in _AMOUNT_COLUMNS)
_UPSERT = (
    f"INSERT INTO hours (project, hour_start, {', '.join(_AMOUNT_COLUMNS)}) "
    f"VALUES (?, ?, {', '.join('?' for _ in _AMOUNT_COLUMNS)}) "
    "ON CONFLICT (project, hour_start) DO UPDATE SET "
    + ", ".join(f"{column} = {column} + excluded.{column}" for column in _AMOUNT_COLUMNS)
)


class Ledger:
    """Hourly contribution totals in a SQLite file; see the module docstring."""

    def __init__(self, path: Path) -> None:
        """Open the ledger at ``path``, creating its folder (0o700) and file if needed."""
        self._label = str(path)
        self._conn: sqlite3.Connection | None = open_file(path)

    @classmethod
    def in_memory(cls) -> Ledger:
        """A ledger kept in memory only, for tests of callers."""
        ledger = cls.__new__(cls)
        ledger._label = ":memory:"
        ledger._conn = open_memory()
        return ledger

    # -- writing -------------------------------------------------------------------------------

    def add(self, project: str, amounts: WorkDone, *, when: float) -> None:
        """Add ``amounts`` to ``project``'s row for the UTC hour containing ``when``.

        Committed before returning. Empty amounts write nothing; invalid ones raise ``LedgerError``
        and write nothing.
        """
        self.add_many([(project, amounts, when)])

    def add_many(self, entries: Iterable[tuple[str, WorkDone, float]]) -> None:
        """Add several entries in one transaction: all of them are committed, or none."""
        rows: list[tuple[Any, ...]] = []
        # Validate everything before the transaction starts, so a bad entry writes nothing.
        for project, amounts, when in entries:
            _require_project(project)
            validate_amounts(amounts)
            require_finite(when, "the time of a contribution")
            if amounts.is_empty():
                continue
            rows.append((project, hour_start(when), *_amount_values(amounts)))
        if not rows:
            return
        self._write(lambda conn: conn.executemany(_UPSERT, rows))

    def add_epoch(self, project: str, row: EpochRow, *, keep: int = EPOCHS_KEPT) -> None:
        """Record one completed epoch of ``project``'s collaboration, keeping its newest ``keep``.

        One transaction: the row and the pruning are committed together, or neither.
        """
        _require_keep(keep)
        validate_epoch(project, row)
        self._write(lambda conn: add_epoch(conn, project, row, keep))

    def add_held_out(self, project: str, row: HeldOutRow, *, keep: int = EPOCHS_KEPT) -> None:
        """Record one held-out evaluation of ``project``'s model, keeping its newest ``keep``
        (one transaction, as ``add_epoch``)."""
        _require_keep(keep)
        validate_held_out(project, row)
        self._write(lambda conn: add_held_out(conn, project, row, keep))

    def add_landed(self, project: str, row: LandedRow, *, keep: int = LANDED_KEPT) -> None:
        """Record one epoch whose update this computer's peer applied, unless that (project, peer,
        epoch) is recorded already, keeping the project's newest ``keep`` (one transaction)."""
        _require_keep(keep)
        validate_landed(project, row)
        self._write(lambda conn: add_landed(conn, project, row, keep))

    def _write(self, work: Callable[[sqlite3.Connection], object]) -> None:
        """``work`` in one transaction: all of it is committed, or none."""
        conn = self._connection()
        try:
            with transaction(conn):
                work(conn)
        except sqlite3.Error as error:
            raise LedgerError(
                f"could not write to the contribution ledger {self._label}: {error}"
            ) from error

    # -- reading -------------------------------------------------------------------------------

    def held_out(self, project: str, limit: int = EPOCHS_KEPT) -> list[HeldOutRow]:
        """The newest ``limit`` held-out evaluations recorded for ``project``, oldest first."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise LedgerError(
                f"the number of evaluations must be a whole number >= 0, not {limit!r}"
            )
        conn = self._connection()
        try:
            return read_held_out(conn, project, limit)
        except sqlite3.Error as error:
            raise LedgerError(
                f"could not read the contribution ledger {self._label}: {error}"
            ) from error

    def landed(self, project: str, peer: str, limit: int = LANDED_KEPT) -> list[LandedRow]:
        """The newest ``limit`` landed epochs of ``peer`` in ``project``, oldest first."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise LedgerError(f"the number of epochs must be a whole number >= 0, not {limit!r}")
        conn = self._connection()
        try:
            return read_landed(conn, project, peer, limit)
        except sqlite3.Error as error:
            raise LedgerError(
                f"could not read the contribution ledger {self._label}: {error}"
            ) from error

    def epochs(self, project: str, limit: int = EPOCHS_KEPT) -> list[EpochRow]:
        """The newest ``limit`` epochs recorded for ``project``, oldest first."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise LedgerError(f"the number of epochs must be a whole number >= 0, not {limit!r}")
        conn = self._connection()
        try:
            return read_epochs(conn, project, limit)
        except sqlite3.Error as error:
            raise LedgerError(
                f"could not read the contribution ledger {self._label}: {error}"
            ) from error

    def totals(self, project: str | None = None) -> WorkDone:
        """Everything ever recorded, for one project or (``None``) all of them."""
        where, params = _filter(project, [])
        return _work_done(self._query_one(f"SELECT {_SUMS} FROM hours {where}", params))

    def since(self, start: float, project: str | None = None) -> WorkDone:
        """The sum of the hours from the one containing ``start`` onwards."""
        require_finite(start, "the start")
        where, params = _filter(project, ["hour_start >= ?"], hour_start(start))
        return _work_done(self._query_one(f"SELECT {_SUMS} FROM hours {where}", params))

    def hours(self, project: str | None, start: float, end: float) -> list[HourRow]:
        """Stored rows from the hour containing ``start`` up to (not including) ``end``.

        Ordered by hour, then project; hours with nothing recorded are absent.
        """
        require_finite(start, "the start")
        require_finite(end, "the end")
        where, params = _filter(
            project, ["hour_start >= ?", "hour_start < ?"], hour_start(start), end
        )
        columns = ", ".join(_AMOUNT_COLUMNS)
        rows = self._query(
            f"SELECT project, hour_start, {columns} FROM hours {where} "
            "ORDER BY hour_start, project",
            params,
        )
        return [HourRow(str(row[0]), int(row[1]), _work_done(row[2:])) for row in rows]

    def daily(
        self, project: str | None, days: int, *, now: float, utc_offset_seconds: int = 0
    ) -> list[tuple[str, WorkDone]]:
        """The last ``days`` local days up to today, oldest first, as ("YYYY-MM-DD", amounts).

        Days with nothing recorded are included with empty amounts. An hour counts for the local
        day in which it starts; ``utc_offset_seconds`` is added to UTC to get local time.
        """
        if isinstance(days, bool) or not isinstance(days, int) or days < 0:
            raise LedgerError(f"the number of days must be a whole number >= 0, not {days!r}")
        require_finite(now, "now")
        require_offset(utc_offset_seconds)
        today = local_day(now, utc_offset_seconds)
        first = today - days + 1
        where, params = _filter(
            project,
            ["hour_start >= ?", "hour_start < ?"],
            day_start(first, utc_offset_seconds),
            day_start(today + 1, utc_offset_seconds),
        )
        per_day = {day: WorkDone() for day in range(first, today + 1)}
        rows = self._query(
            f"SELECT hour_start, {_SUMS} FROM hours {where} GROUP BY hour_start", params
        )
        for row in rows:
            # Bucketing in Python: SQLite's integer division truncates toward zero, not down.
            day = local_day(int(row[0]), utc_offset_seconds)
            per_day[day] = per_day[day] + _work_done(row[1:])
        return [(day_label(day), amounts) for day, amounts in per_day.items()]

    def month_bytes(self, *, now: float, utc_offset_seconds: int = 0) -> int:
        """Bytes sent plus received, all projects, since the current local month began."""
        require_finite(now, "now")
        require_offset(utc_offset_seconds)
        row = self._query_one(
            "SELECT COALESCE(SUM(bytes_sent + bytes_received), 0) FROM hours WHERE hour_start >= ?",
            [month_start(now, utc_offset_seconds)],
        )
        return int(row[0])

    def projects(self) -> list[str]:
        """Every project with something recorded, in sorted order."""
        rows = self._query("SELECT DISTINCT project FROM hours ORDER BY project", [])
        return [str(row[0]) for row in rows]

    # -- lifetime ------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the database; later calls do nothing, and other methods raise ``LedgerError``."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- helpers -------------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise LedgerError(f"the contribution ledger {self._label} is closed")
        return self._conn

    def _query(self, sql: str, params: Sequence[Any]) -> list[Any]:
        conn = self._connection()
        try:
            return conn.execute(sql, params).fetchall()
        except sqlite3.Error as error:
            raise LedgerError(
                f"could not read the contribution ledger {self._label}: {error}"
            ) from error

    def _query_one(self, sql: str, params: Sequence[Any]) -> Any:
        return self._query(sql, params)[0]


def _require_keep(keep: int) -> None:
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise LedgerError(f"the number of rows to keep must be at least 1, not {keep!r}")


def _require_project(project: str) -> None:
    if not isinstance(project, str) or not project.strip():
        raise LedgerError(f"a contribution needs a project name, not {project!r}")


def _amount_values(amounts: WorkDone) -> Iterator[Any]:
    return (getattr(amounts, column) for column in _AMOUNT_COLUMNS)


def _work_done(values: Sequence[Any]) -> WorkDone:
    # int()/float(): callers always get the declared types, whatever SQLite's affinity returned.
    samples, seconds, epochs, rounds, sent, received = values
    return WorkDone(
        samples=int(samples),
        compute_seconds=float(seconds),
        epochs=int(epochs),
        rounds=int(rounds),
        bytes_sent=int(sent),
        bytes_received=int(received),
    )


def _filter(project: str | None, conditions: list[str], *params: Any) -> tuple[str, list[Any]]:
    """A WHERE clause from fixed ``conditions``, plus the project's when one is given."""
    values = list(params)
    if project is not None:
        conditions = [*conditions, "project = ?"]
        values.append(project)
    if not conditions:
        return "", values
    return "WHERE " + " AND ".join(conditions), values
