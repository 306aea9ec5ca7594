"""The backbone's held-out evaluations in the ledger: round trips (with the unigram floor and
without), pruning to the newest rows, bad rows refused, and ledgers of the schemas before them
(version 2) and before the floor (version 4) upgraded in place with their rows kept."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest

from core.stats import EpochRow, HeldOutRow, Ledger, LedgerError, WorkDone
from core.stats.schema import SCHEMA_VERSION
from tests.support.old_ledger import WHEN, old_ledger


def row(epoch: int, loss: float | None = 3.5, accuracy: float = 0.4) -> HeldOutRow:
    return HeldOutRow(epoch, WHEN + epoch, loss, accuracy, 256)


def test_evaluations_round_trip_oldest_first_per_project() -> None:
    with Ledger.in_memory() as ledger:
        ledger.add_held_out("a", row(0, 8.25, 0.0))
        ledger.add_held_out("b", row(7))
        ledger.add_held_out("a", row(10, None, 1.0))
        assert ledger.held_out("a") == [row(0, 8.25, 0.0), row(10, None, 1.0)]
        assert ledger.held_out("b") == [row(7)]
        assert ledger.held_out("a", limit=1) == [row(10, None, 1.0)]
        assert ledger.held_out("never") == []
        assert ledger.epochs("a") == []  # the loss curve is a table of its own


def test_the_floor_round_trips_beside_rows_without_one() -> None:
    with Ledger.in_memory() as ledger:
        floored = HeldOutRow(3, WHEN, 5.75, 0.25, 256, 6.25)
        ledger.add_held_out("a", row(1))
        ledger.add_held_out("a", floored)
        assert ledger.held_out("a") == [row(1), floored]
        assert [r.floor for r in ledger.held_out("a")] == [None, 6.25]


def test_only_the_newest_evaluations_of_each_project_are_kept() -> None:
    with Ledger.in_memory() as ledger:
        for epoch in range(9):
            ledger.add_held_out("a", row(epoch), keep=4)
            ledger.add_held_out("b", row(epoch), keep=2)
        assert [r.epoch for r in ledger.held_out("a")] == [5, 6, 7, 8]
        assert [r.epoch for r in ledger.held_out("b")] == [7, 8]


@pytest.mark.parametrize(
    ("project", "bad", "fragment"),
    [
        ("", row(1), "project name"),
        ("a", HeldOutRow(-1, WHEN, 1.0, 0.5, 1), "epoch"),
        ("a", HeldOutRow(1, math.inf, 1.0, 0.5, 1), "time"),
        ("a", HeldOutRow(1, WHEN, math.nan, 0.5, 1), "loss"),
        ("a", HeldOutRow(1, WHEN, 1.0, 1.5, 1), "accuracy"),
        ("a", HeldOutRow(1, WHEN, 1.0, math.nan, 1), "accuracy"),
        ("a", HeldOutRow(1, WHEN, 1.0, 0.5, -3), "samples"),
        ("a", HeldOutRow(1, WHEN, 1.0, 0.5, 1, math.inf), "floor"),
        ("a", HeldOutRow(1, WHEN, 1.0, 0.5, 1, math.nan), "floor"),
    ],
)
def test_bad_evaluations_are_refused_and_nothing_is_written(
    project: str, bad: HeldOutRow, fragment: str
) -> None:
    with Ledger.in_memory() as ledger:
        ledger.add_held_out("a", row(0))
        with pytest.raises(LedgerError, match=fragment):
            ledger.add_held_out(project, bad)
        with pytest.raises(LedgerError, match="keep"):
            ledger.add_held_out("a", row(1), keep=0)
        with pytest.raises(LedgerError, match="number of evaluations"):
            ledger.held_out("a", limit=-1)
        assert ledger.held_out("a") == [row(0)]


def test_a_version_2_ledger_gains_the_evaluations_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    # a ledger exactly as the release before the evaluations wrote it: two migrations
    conn = old_ledger(path, 2)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    assert (
        conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'held_out'").fetchone()[0]
        == 0
    )
    conn.close()

    with Ledger(path) as ledger:
        assert ledger.totals("p") == WorkDone(samples=96, compute_seconds=2.5)
        assert ledger.epochs("p") == [EpochRow(4, WHEN, 6.5, 512, 80.0, 3)]
        assert ledger.held_out("p") == []
        ledger.add_held_out("p", row(5))
    check = sqlite3.connect(path)
    try:
        assert check.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        check.close()
    with Ledger(path) as ledger:  # and it opens again as it is
        assert ledger.held_out("p") == [row(5)]
        assert ledger.epochs("p") == [EpochRow(4, WHEN, 6.5, 512, 80.0, 3)]
        assert ledger.totals("p").samples == 96


def test_a_version_4_ledger_gains_the_floor_and_keeps_its_evaluations(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    conn = old_ledger(path, 4)
    conn.execute(
        "INSERT INTO held_out (project, epoch, time, loss, accuracy, samples) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        ("p", 4, WHEN, 7.0, 0.25, 64),
    )
    conn.close()
    with Ledger(path) as ledger:
        assert ledger.held_out("p") == [HeldOutRow(4, WHEN, 7.0, 0.25, 64, None)]
        ledger.add_held_out("p", HeldOutRow(6, WHEN, 6.0, 0.5, 64, 6.5))
    with Ledger(path) as ledger:
        assert [r.floor for r in ledger.held_out("p")] == [None, 6.5]
    check = sqlite3.connect(path)
    try:
        assert check.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
    finally:
        check.close()
