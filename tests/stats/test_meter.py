"""ContributionMeter: counts in memory, writes once per flush, keeps what a failed write missed."""

from __future__ import annotations

import pytest

from core.stats import Contribution, ContributionMeter, Ledger, LedgerError

WHEN = 1_710_000_000.0


def test_flush_writes_the_sum_and_clears_it() -> None:
    ledger = Ledger.in_memory()
    meter = ContributionMeter()
    meter.count(Contribution(samples=3, compute_seconds=1.0))
    meter.count(Contribution(samples=4, bytes_sent=10))
    assert meter.pending == Contribution(samples=7, compute_seconds=1.0, bytes_sent=10)
    meter.flush(ledger, "p", WHEN)
    assert meter.pending == Contribution()
    assert ledger.totals("p") == Contribution(samples=7, compute_seconds=1.0, bytes_sent=10)
    assert len(ledger.hours("p", WHEN - 3600, WHEN + 3600)) == 1


def test_flushing_nothing_writes_nothing() -> None:
    ledger = Ledger.in_memory()
    meter = ContributionMeter()
    meter.flush(ledger, "p", WHEN)
    assert ledger.projects() == []


def test_a_failed_flush_keeps_the_pending_amounts() -> None:
    ledger = Ledger.in_memory()
    meter = ContributionMeter()
    meter.count(Contribution(samples=5))
    ledger.close()
    with pytest.raises(LedgerError):
        meter.flush(ledger, "p", WHEN)
    assert meter.pending == Contribution(samples=5)
    meter.count(Contribution(samples=1))
    working = Ledger.in_memory()
    meter.flush(working, "p", WHEN)
    assert working.totals() == Contribution(samples=6)
    assert meter.pending == Contribution()


def test_an_invalid_project_keeps_the_pending_amounts() -> None:
    meter = ContributionMeter()
    meter.count(Contribution(rounds=1))
    with pytest.raises(LedgerError):
        meter.flush(Ledger.in_memory(), "", WHEN)
    assert meter.pending == Contribution(rounds=1)


def test_an_invalid_delta_is_refused_when_counted() -> None:
    meter = ContributionMeter()
    meter.count(Contribution(samples=2))
    with pytest.raises(LedgerError):
        meter.count(Contribution(samples=-1))
    assert meter.pending == Contribution(samples=2)
