"""Invalid input and unusable files: a clear LedgerError, and nothing written or overwritten."""

from __future__ import annotations

import math
import os
import sqlite3
import sys
from pathlib import Path

import pytest

from core.stats import Ledger, LedgerError, WorkDone
from core.stats.schema import SCHEMA_VERSION
from core.util.errors import BarnraiseError

WHEN = 1_710_000_000.0


def snapshot(path: Path) -> dict[str, bytes]:
    """The bytes of the file and of any SQLite side files next to it."""
    return {p.name: p.read_bytes() for p in path.parent.iterdir() if p.name.startswith(path.name)}


def test_ledger_error_is_a_barnraise_error() -> None:
    assert issubclass(LedgerError, BarnraiseError)


@pytest.mark.parametrize(
    "amounts",
    [
        WorkDone(samples=-1),
        WorkDone(compute_seconds=-0.5),
        WorkDone(compute_seconds=math.nan),
        WorkDone(compute_seconds=math.inf),
        WorkDone(epochs=-1),
        WorkDone(rounds=-3),
        WorkDone(bytes_sent=-1),
        WorkDone(bytes_received=-1),
        WorkDone(samples=2**63),
    ],
)
def test_bad_amounts_are_refused_and_nothing_is_written(amounts: WorkDone) -> None:
    ledger = Ledger.in_memory()
    with pytest.raises(LedgerError):
        ledger.add("p", amounts, when=WHEN)
    assert ledger.totals() == WorkDone()
    assert ledger.projects() == []


@pytest.mark.parametrize("project", ["", "   "])
def test_an_empty_project_name_is_refused(project: str) -> None:
    ledger = Ledger.in_memory()
    with pytest.raises(LedgerError, match="project"):
        ledger.add(project, WorkDone(samples=1), when=WHEN)
    assert ledger.projects() == []


@pytest.mark.parametrize("when", [math.nan, math.inf, -math.inf])
def test_a_non_finite_time_is_refused(when: float) -> None:
    ledger = Ledger.in_memory()
    with pytest.raises(LedgerError):
        ledger.add("p", WorkDone(samples=1), when=when)
    assert ledger.totals() == WorkDone()


def test_add_many_is_all_or_nothing() -> None:
    ledger = Ledger.in_memory()
    with pytest.raises(LedgerError):
        ledger.add_many(
            [
                ("p", WorkDone(samples=1), WHEN),
                ("q", WorkDone(samples=-1), WHEN),
            ]
        )
    assert ledger.totals() == WorkDone()


def test_a_transaction_failing_part_way_is_rolled_back(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as ledger:
        ledger.add("p", WorkDone(samples=1), when=WHEN)
        # A trigger makes the second row of the transaction fail after the first was written.
        other = sqlite3.connect(path)
        other.execute(
            "CREATE TRIGGER refuse_q BEFORE INSERT ON hours WHEN NEW.project = 'q' "
            "BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
        other.commit()
        other.close()
        with pytest.raises(LedgerError, match=str(path)):
            ledger.add_many([("p", WorkDone(samples=1), WHEN), ("q", WorkDone(samples=1), WHEN)])
        assert ledger.totals() == WorkDone(samples=1)
        ledger.add("p", WorkDone(samples=1), when=WHEN)  # still usable
        assert ledger.totals() == WorkDone(samples=2)


def test_bad_query_arguments_are_refused() -> None:
    ledger = Ledger.in_memory()
    with pytest.raises(LedgerError):
        ledger.daily(None, -1, now=WHEN)
    with pytest.raises(LedgerError):
        ledger.daily(None, 3, now=WHEN, utc_offset_seconds=90_000)
    with pytest.raises(LedgerError):
        ledger.since(math.nan)
    with pytest.raises(LedgerError):
        ledger.month_bytes(now=math.inf)


def test_a_file_that_is_not_sqlite_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    garbage = bytes(range(256)) * 40
    path.write_bytes(garbage)
    with pytest.raises(LedgerError, match=str(path)):
        Ledger(path)
    assert path.read_bytes() == garbage
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.sqlite"]


def test_a_short_file_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    path.write_bytes(b"SQLite")
    with pytest.raises(LedgerError, match=str(path)):
        Ledger(path)
    assert path.read_bytes() == b"SQLite"


def test_a_damaged_ledger_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as ledger:
        for hour in range(50):
            ledger.add("p", WorkDone(samples=1), when=WHEN + hour * 3600)
    data = bytearray(path.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    # Scribble over the table's root page (page 2), leaving the header intact.
    data[page_size : page_size + 64] = b"\xa5" * 64
    path.write_bytes(bytes(data))
    before = snapshot(path)
    with pytest.raises(LedgerError, match=str(path)):
        Ledger(path)
    assert snapshot(path) == before


def test_another_programs_database_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    other = sqlite3.connect(path)
    other.execute("CREATE TABLE notes (text TEXT)")
    other.execute("INSERT INTO notes VALUES ('keep me')")
    other.commit()
    other.close()
    before = snapshot(path)
    with pytest.raises(LedgerError, match="another program"):
        Ledger(path)
    assert snapshot(path) == before


def test_a_newer_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as ledger:
        ledger.add("p", WorkDone(samples=1), when=WHEN)
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    before = snapshot(path)
    with pytest.raises(LedgerError, match="newer Barnraise"):
        Ledger(path)
    assert snapshot(path) == before


def test_a_directory_in_the_way_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    path.mkdir()
    with pytest.raises(LedgerError, match=str(path)):
        Ledger(path)


def test_a_closed_ledger_refuses_work_and_closes_twice() -> None:
    ledger = Ledger.in_memory()
    ledger.close()
    ledger.close()
    with pytest.raises(LedgerError, match="closed"):
        ledger.add("p", WorkDone(samples=1), when=WHEN)
    with pytest.raises(LedgerError, match="closed"):
        ledger.totals()


def test_reopening_keeps_rows_and_schema(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "ledger.sqlite"
    with Ledger(path) as ledger:
        ledger.add("p", WorkDone(samples=3), when=WHEN)
    with Ledger(path) as ledger:
        assert ledger.totals() == WorkDone(samples=3)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()


def test_an_empty_file_becomes_a_ledger(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    path.touch()
    with Ledger(path) as ledger:
        ledger.add("p", WorkDone(samples=1), when=WHEN)
        assert ledger.totals() == WorkDone(samples=1)


def test_wal_mode_is_on(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as ledger:
        ledger.add("p", WorkDone(samples=1), when=WHEN)
        # The journal mode is stored in the file, so a second connection sees it.
        other = sqlite3.connect(path)
        try:
            assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        finally:
            other.close()
        conn = ledger._connection()
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_the_folder_and_file_are_private(tmp_path: Path) -> None:
    path = tmp_path / "new" / "ledger.sqlite"
    with Ledger(path):
        pass
    assert (path.parent.stat().st_mode & 0o777) == 0o700
    assert (path.stat().st_mode & 0o777) == 0o600
    assert os.access(path, os.R_OK | os.W_OK)
