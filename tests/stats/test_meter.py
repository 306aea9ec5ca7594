"""WorkMeter: counts in memory, writes once per flush, keeps what a failed write missed."""

from __future__ import annotations

import pytest

from core.stats import Ledger, LedgerError, WorkDone, WorkMeter

WHEN = 1_710_000_000.0


def test_flush_writes_the_sum_and_clears_it() -> None:
    ledger = Ledger.in_memory()
    meter = WorkMeter()
    meter.count(WorkDone(samples=3, compute_seconds=1.0))
    meter.count(WorkDone(samples=4, bytes_sent=10))
    assert meter.pending == WorkDone(samples=7, compute_seconds=1.0, bytes_sent=10)
    meter.flush(ledger, "p", WHEN)
    assert meter.pending == WorkDone()
    assert ledger.totals("p") == WorkDone(samples=7, compute_seconds=1.0, bytes_sent=10)
    assert len(ledger.hours("p", WHEN - 3600, WHEN + 3600)) == 1


def test_flushing_nothing_writes_nothing() -> None:
    ledger = Ledger.in_memory()
    meter = WorkMeter()
    meter.flush(ledger, "p", WHEN)
    assert ledger.projects() == []


def test_a_failed_flush_keeps_the_pending_amounts() -> None:
    ledger = Ledger.in_memory()
    meter = WorkMeter()
    meter.count(WorkDone(samples=5))
    ledger.close()
    with pytest.raises(LedgerError):
        meter.flush(ledger, "p", WHEN)
    assert meter.pending == WorkDone(samples=5)
    meter.count(WorkDone(samples=1))
    working = Ledger.in_memory()
    meter.flush(working, "p", WHEN)
    assert working.totals() == WorkDone(samples=6)
    assert meter.pending == WorkDone()


def test_an_invalid_project_keeps_the_pending_amounts() -> None:
    meter = WorkMeter()
    meter.count(WorkDone(rounds=1))
    with pytest.raises(LedgerError):
        meter.flush(Ledger.in_memory(), "", WHEN)
    assert meter.pending == WorkDone(rounds=1)


def test_an_invalid_delta_is_refused_when_counted() -> None:
    meter = WorkMeter()
    meter.count(WorkDone(samples=2))
    with pytest.raises(LedgerError):
        meter.count(WorkDone(samples=-1))
    assert meter.pending == WorkDone(samples=2)
