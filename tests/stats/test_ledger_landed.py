"""This computer's landed epochs in the ledger: round trips per project and peer key, the first
record of an epoch kept, pruning to the newest rows, bad rows refused, and a ledger of the schema
before them (version 3) upgraded in place with its hours, epochs and evaluations kept."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest

from core.stats import EpochRow, HeldOutRow, LandedRow, Ledger, LedgerError, WorkDone
from core.stats.schema import SCHEMA_VERSION
from tests.support.old_ledger import WHEN, old_ledger

ME = "12D3KooWMe"
OTHER = "12D3KooWOther"


def row(epoch: int, samples: int = 256, peer: str = ME) -> LandedRow:
    return LandedRow(peer, epoch, samples, WHEN + epoch)


def test_landed_epochs_round_trip_oldest_first_per_project_and_peer() -> None:
    with Ledger.in_memory() as ledger:
        ledger.add_landed("a", row(4, 128))
        ledger.add_landed("b", row(7))
        ledger.add_landed("a", row(5, 0))
        ledger.add_landed("a", row(6, peer=OTHER))  # another key of this computer's, before
        assert ledger.landed("a", ME) == [row(4, 128), row(5, 0)]
        assert ledger.landed("a", OTHER) == [row(6, peer=OTHER)]
        assert ledger.landed("b", ME) == [row(7)]
        assert ledger.landed("a", ME, limit=1) == [row(5, 0)]
        assert ledger.landed("never", ME) == []
        assert ledger.epochs("a") == []  # the loss curve is a table of its own


def test_an_epoch_recorded_again_keeps_its_first_record() -> None:
    # as the coordinator credits each (epoch, peer) once: an epoch trained again after a rollback
    with Ledger.in_memory() as ledger:
        ledger.add_landed("a", row(3, 100))
        ledger.add_landed("a", row(3, 900))
        ledger.add_landed("b", row(3, 50))
        assert ledger.landed("a", ME) == [row(3, 100)]
        assert ledger.landed("b", ME) == [row(3, 50)]


def test_only_the_newest_landed_epochs_of_each_project_are_kept() -> None:
    with Ledger.in_memory() as ledger:
        for epoch in range(9):
            ledger.add_landed("a", row(epoch), keep=4)
            ledger.add_landed("b", row(epoch), keep=2)
        assert [r.epoch for r in ledger.landed("a", ME)] == [5, 6, 7, 8]
        assert [r.epoch for r in ledger.landed("b", ME)] == [7, 8]
        # the limit is per project, whichever key the rows are under
        ledger.add_landed("a", row(9, peer=OTHER), keep=4)
        assert [r.epoch for r in ledger.landed("a", ME)] == [6, 7, 8]


@pytest.mark.parametrize(
    ("project", "bad", "fragment"),
    [
        ("", row(1), "project name"),
        ("a", row(1, peer=""), "peer's key"),
        ("a", row(1, peer="k" * 201), "peer's key"),
        ("a", LandedRow(ME, -1, 1, WHEN), "epoch"),
        ("a", LandedRow(ME, 1, -3, WHEN), "samples"),
        ("a", LandedRow(ME, True, 1, WHEN), "epoch"),
        ("a", LandedRow(ME, 1, 1, math.nan), "time"),
        ("a", LandedRow(ME, 1, 1, math.inf), "time"),
    ],
)
def test_bad_landed_epochs_are_refused_and_nothing_is_written(
    project: str, bad: LandedRow, fragment: str
) -> None:
    with Ledger.in_memory() as ledger:
        ledger.add_landed("a", row(0))
        with pytest.raises(LedgerError, match=fragment):
            ledger.add_landed(project, bad)
        with pytest.raises(LedgerError, match="keep"):
            ledger.add_landed("a", row(1), keep=0)
        with pytest.raises(LedgerError, match="number of epochs"):
            ledger.landed("a", ME, limit=-1)
        assert ledger.landed("a", ME) == [row(0)]


def test_a_version_3_ledger_gains_the_landed_epochs_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    # a ledger exactly as the release before the landed epochs wrote it: three migrations
    conn = old_ledger(path, 3)
    conn.execute(
        "INSERT INTO held_out (project, epoch, time, loss, accuracy, samples) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        ("p", 4, WHEN, 7.0, 0.25, 64),
    )
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
    tables = "SELECT count(*) FROM sqlite_master WHERE name = 'landed'"
    assert conn.execute(tables).fetchone()[0] == 0
    conn.close()

    with Ledger(path) as ledger:
        assert ledger.totals("p") == WorkDone(samples=96, compute_seconds=2.5)
        assert ledger.epochs("p") == [EpochRow(4, WHEN, 6.5, 512, 80.0, 3)]
        assert ledger.held_out("p") == [HeldOutRow(4, WHEN, 7.0, 0.25, 64)]
        assert ledger.landed("p", ME) == []
        ledger.add_landed("p", row(5))
    check = sqlite3.connect(path)
    try:
        assert check.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        check.close()
    with Ledger(path) as ledger:  # and it opens again as it is
        assert ledger.landed("p", ME) == [row(5)]
        assert ledger.held_out("p") == [HeldOutRow(4, WHEN, 7.0, 0.25, 64)]
        assert ledger.totals("p").samples == 96
