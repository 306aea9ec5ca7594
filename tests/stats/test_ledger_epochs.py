"""The loss curve in the ledger: round trips, pruning to the newest rows, bad rows refused, and a
version-1 ledger file upgraded in place with its rows kept."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest

from core.stats import EPOCHS_KEPT, EpochRow, Ledger, LedgerError, WorkDone
from core.stats.schema import _MIGRATIONS, APPLICATION_ID, SCHEMA_VERSION
from core.util.files.sqlite_file import SqliteFile

WHEN = 1_700_000_000.0


def row(epoch: int, loss: float | None = 5.0) -> EpochRow:
    return EpochRow(epoch, WHEN + epoch, loss, 256 + epoch, 120.5, 3)


def test_epochs_round_trip_oldest_first_per_project() -> None:
    with Ledger.in_memory() as ledger:
        ledger.add_epoch("a", row(0, 8.25))
        ledger.add_epoch("b", row(7))
        ledger.add_epoch("a", row(1, None))
        ledger.add_epoch("a", row(2, 7.5))
        assert ledger.epochs("a") == [row(0, 8.25), row(1, None), row(2, 7.5)]
        assert ledger.epochs("b") == [row(7)]
        assert ledger.epochs("a", limit=2) == [row(1, None), row(2, 7.5)]
        assert ledger.epochs("never") == []
        # the hours table is untouched by the curve
        assert ledger.totals() == WorkDone()


def test_a_restarted_collaboration_counting_from_zero_again_is_kept_in_arrival_order() -> None:
    with Ledger.in_memory() as ledger:
        for epoch in (5, 6, 0, 1):
            ledger.add_epoch("a", row(epoch))
        assert [r.epoch for r in ledger.epochs("a")] == [5, 6, 0, 1]


def test_only_the_newest_rows_of_each_project_are_kept() -> None:
    with Ledger.in_memory() as ledger:
        for epoch in range(12):
            ledger.add_epoch("a", row(epoch), keep=5)
            ledger.add_epoch("b", row(100 + epoch), keep=3)
        assert [r.epoch for r in ledger.epochs("a")] == [7, 8, 9, 10, 11]
        assert [r.epoch for r in ledger.epochs("b")] == [109, 110, 111]
        conn = ledger._connection()
        assert conn.execute("SELECT count(*) FROM epochs").fetchone()[0] == 8


def test_the_default_keeps_2000_per_project() -> None:
    assert EPOCHS_KEPT == 2000
    with Ledger.in_memory() as ledger:
        for epoch in range(EPOCHS_KEPT + 7):
            ledger.add_epoch("a", row(epoch))
        ledger.add_epoch("b", row(0))
        kept = ledger.epochs("a", limit=10_000)
        assert len(kept) == EPOCHS_KEPT
        assert (kept[0].epoch, kept[-1].epoch) == (7, EPOCHS_KEPT + 6)
        assert len(ledger.epochs("b")) == 1


@pytest.mark.parametrize(
    ("project", "bad", "fragment"),
    [
        ("", row(1), "project name"),
        ("a", EpochRow(-1, WHEN, 1.0, 1, 1.0, 1), "epoch"),
        ("a", EpochRow(1, math.nan, 1.0, 1, 1.0, 1), "time"),
        ("a", EpochRow(1, WHEN, math.inf, 1, 1.0, 1), "loss"),
        ("a", EpochRow(1, WHEN, 1.0, True, 1.0, 1), "samples"),  # type: ignore[arg-type]
        ("a", EpochRow(1, WHEN, 1.0, 1, -2.0, 1), "samples_per_second"),
        ("a", EpochRow(1, WHEN, 1.0, 1, 1.0, 2**63), "peers"),
    ],
)
def test_bad_rows_are_refused_and_nothing_is_written(
    project: str, bad: EpochRow, fragment: str
) -> None:
    with Ledger.in_memory() as ledger:
        ledger.add_epoch("a", row(0))
        with pytest.raises(LedgerError, match=fragment):
            ledger.add_epoch(project, bad)
        assert ledger.epochs("a") == [row(0)]
        with pytest.raises(LedgerError, match="keep"):
            ledger.add_epoch("a", row(1), keep=0)
        with pytest.raises(LedgerError, match="number of epochs"):
            ledger.epochs("a", limit=-1)
        assert ledger.epochs("a") == [row(0)]


def test_a_version_1_ledger_is_upgraded_in_place_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    # a ledger exactly as the previous release wrote it: the first migration only
    old = SqliteFile("contribution ledger", APPLICATION_ID, _MIGRATIONS[:1], LedgerError)
    conn = old.open(path)
    conn.execute(
        "INSERT INTO hours (project, hour_start, samples, compute_seconds) VALUES (?, ?, ?, ?)",
        ("p", 1_699_999_200, 96, 2.5),
    )
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    assert (
        conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'epochs'").fetchone()[0] == 0
    )
    conn.close()

    with Ledger(path) as ledger:
        assert ledger.totals("p") == WorkDone(samples=96, compute_seconds=2.5)
        ledger.add_epoch("p", row(3, 6.0))
        assert ledger.epochs("p") == [row(3, 6.0)]
    check = sqlite3.connect(path)
    try:
        assert check.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert check.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        check.close()
    # and it opens again as it is
    with Ledger(path) as ledger:
        assert ledger.epochs("p") == [row(3, 6.0)]
        assert ledger.totals("p").samples == 96
