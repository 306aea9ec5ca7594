"""Ledger round trips with fixed timestamps: accumulation, separation, and every query."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core.stats import HourRow, Ledger, WorkDone


def at(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, *, second: int = 0
) -> float:
    """A unix time given in UTC."""
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()


@pytest.fixture
def ledger() -> Ledger:
    return Ledger.in_memory()


def test_contribution_adds_and_knows_when_it_is_empty() -> None:
    a = WorkDone(samples=1, compute_seconds=0.5, epochs=1, rounds=2, bytes_sent=3)
    b = WorkDone(samples=2, compute_seconds=1.0, bytes_received=7)
    assert a + b == WorkDone(
        samples=3, compute_seconds=1.5, epochs=1, rounds=2, bytes_sent=3, bytes_received=7
    )
    assert WorkDone().is_empty()
    assert not WorkDone(compute_seconds=0.1).is_empty()
    assert not WorkDone(bytes_received=1).is_empty()


def test_adds_in_the_same_hour_accumulate(ledger: Ledger) -> None:
    ledger.add(
        "p", WorkDone(samples=10, compute_seconds=1.5), when=at(2024, 3, 10, 14, 0, second=1)
    )
    ledger.add("p", WorkDone(samples=5, bytes_sent=100), when=at(2024, 3, 10, 14, 59, second=59))
    rows = ledger.hours("p", at(2024, 3, 10), at(2024, 3, 11))
    assert rows == [
        HourRow(
            "p",
            int(at(2024, 3, 10, 14)),
            WorkDone(samples=15, compute_seconds=1.5, bytes_sent=100),
        )
    ]


def test_hours_and_projects_are_kept_apart(ledger: Ledger) -> None:
    ledger.add("a", WorkDone(samples=1), when=at(2024, 3, 10, 14, 59, second=59))
    ledger.add("a", WorkDone(samples=2), when=at(2024, 3, 10, 15))
    ledger.add("b", WorkDone(samples=4), when=at(2024, 3, 10, 14, 30))
    ledger.add("b", WorkDone(), when=at(2024, 3, 10, 16))  # empty: nothing stored
    rows = ledger.hours(None, at(2024, 3, 10), at(2024, 3, 11))
    assert [(row.project, row.hour_start, row.amounts.samples) for row in rows] == [
        ("a", int(at(2024, 3, 10, 14)), 1),
        ("b", int(at(2024, 3, 10, 14)), 4),
        ("a", int(at(2024, 3, 10, 15)), 2),
    ]
    assert ledger.projects() == ["a", "b"]
    assert ledger.totals("a") == WorkDone(samples=3)
    assert ledger.totals("b") == WorkDone(samples=4)
    assert ledger.totals() == WorkDone(samples=7)
    assert ledger.totals("nobody") == WorkDone()


def test_an_empty_ledger_reads_as_zero(ledger: Ledger) -> None:
    assert ledger.totals() == WorkDone()
    assert ledger.since(0) == WorkDone()
    assert ledger.hours(None, 0, at(2030, 1, 1)) == []
    assert ledger.projects() == []
    assert ledger.month_bytes(now=at(2024, 3, 10)) == 0


def test_since_starts_at_the_hour_containing_start(ledger: Ledger) -> None:
    ledger.add("a", WorkDone(epochs=1), when=at(2024, 3, 10, 13, 59))
    ledger.add("a", WorkDone(epochs=2), when=at(2024, 3, 10, 14, 5))
    ledger.add("b", WorkDone(epochs=4), when=at(2024, 3, 10, 15))
    # 14:40 lies in the 14:00 hour, which counts in full.
    assert ledger.since(at(2024, 3, 10, 14, 40)) == WorkDone(epochs=6)
    assert ledger.since(at(2024, 3, 10, 14, 40), "a") == WorkDone(epochs=2)
    assert ledger.since(at(2024, 3, 10, 16)) == WorkDone()


def test_hours_end_is_exclusive(ledger: Ledger) -> None:
    for hour in range(10, 14):
        ledger.add("a", WorkDone(rounds=hour), when=at(2024, 3, 10, hour, 30))
    rows = ledger.hours("a", at(2024, 3, 10, 11, 45), at(2024, 3, 10, 13))
    assert [row.amounts.rounds for row in rows] == [11, 12]


def test_daily_fills_empty_days_oldest_first(ledger: Ledger) -> None:
    ledger.add("a", WorkDone(samples=1), when=at(2024, 3, 8, 23, 59))
    ledger.add("a", WorkDone(samples=2), when=at(2024, 3, 10, 0, 0))
    ledger.add("b", WorkDone(samples=4), when=at(2024, 3, 10, 12))
    ledger.add("a", WorkDone(samples=8), when=at(2024, 3, 6))  # before the window
    now = at(2024, 3, 10, 18)
    assert ledger.daily(None, 4, now=now) == [
        ("2024-03-07", WorkDone()),
        ("2024-03-08", WorkDone(samples=1)),
        ("2024-03-09", WorkDone()),
        ("2024-03-10", WorkDone(samples=6)),
    ]
    assert [amounts.samples for _, amounts in ledger.daily("a", 4, now=now)] == [0, 1, 0, 2]
    assert ledger.daily(None, 0, now=now) == []


def test_a_local_offset_moves_hours_to_another_day(ledger: Ledger) -> None:
    ledger.add("a", WorkDone(samples=1), when=at(2024, 3, 9, 22, 30))  # 00:30 on the 10th at +2
    ledger.add("a", WorkDone(samples=2), when=at(2024, 3, 10, 3))  # 22:00 on the 9th at -5
    now = at(2024, 3, 10, 12)
    assert ledger.daily("a", 2, now=now) == [
        ("2024-03-09", WorkDone(samples=1)),
        ("2024-03-10", WorkDone(samples=2)),
    ]
    assert ledger.daily("a", 2, now=now, utc_offset_seconds=2 * 3600) == [
        ("2024-03-09", WorkDone()),
        ("2024-03-10", WorkDone(samples=3)),
    ]
    assert ledger.daily("a", 2, now=now, utc_offset_seconds=-5 * 3600) == [
        ("2024-03-09", WorkDone(samples=3)),
        ("2024-03-10", WorkDone()),
    ]


def test_the_offset_also_decides_which_day_is_today(ledger: Ledger) -> None:
    now = at(2024, 3, 10, 23)  # already the 11th at +2
    assert [day for day, _ in ledger.daily(None, 2, now=now, utc_offset_seconds=7200)] == [
        "2024-03-10",
        "2024-03-11",
    ]


def test_month_bytes_counts_from_the_local_month_start(ledger: Ledger) -> None:
    ledger.add("a", WorkDone(bytes_sent=1, bytes_received=2), when=at(2024, 2, 29, 23, 30))
    ledger.add("a", WorkDone(bytes_sent=10, samples=5), when=at(2024, 3, 1, 0, 10))
    ledger.add("b", WorkDone(bytes_received=100), when=at(2024, 3, 15))
    now = at(2024, 3, 20)
    assert ledger.month_bytes(now=now) == 110
    # At +1 the 23:30 hour of Feb 29th is already March 1st.
    assert ledger.month_bytes(now=now, utc_offset_seconds=3600) == 113
    # At -1 the 00:10 hour of March 1st is still February.
    assert ledger.month_bytes(now=now, utc_offset_seconds=-3600) == 100
    # On the first of the month only that day counts.
    assert ledger.month_bytes(now=at(2024, 3, 1, 5)) == 110
    assert ledger.month_bytes(now=at(2024, 2, 29, 23, 59)) == 3 + 110  # "now" precedes some rows


def test_add_many_writes_all_entries(ledger: Ledger) -> None:
    ledger.add_many(
        [
            ("a", WorkDone(samples=1), at(2024, 3, 10, 1)),
            ("a", WorkDone(samples=2), at(2024, 3, 10, 1, 30)),
            ("b", WorkDone(samples=4), at(2024, 3, 10, 2)),
        ]
    )
    assert ledger.totals("a") == WorkDone(samples=3)
    assert len(ledger.hours(None, 0, at(2030, 1, 1))) == 2


def test_compute_seconds_keep_their_fractions(ledger: Ledger) -> None:
    for _ in range(4):
        ledger.add("a", WorkDone(compute_seconds=0.25), when=at(2024, 3, 10))
    assert ledger.totals().compute_seconds == pytest.approx(1.0)
    assert isinstance(ledger.totals().samples, int)


def test_an_hour_counts_for_the_local_day_it_starts_in(ledger: Ledger) -> None:
    # At +5:30 the 18:00 UTC hour runs from 23:30 on the 9th to 00:30 on the 10th.
    ledger.add("a", WorkDone(samples=1), when=at(2024, 3, 9, 18, 45))
    now = at(2024, 3, 10, 12)
    assert ledger.daily("a", 2, now=now, utc_offset_seconds=5 * 3600 + 1800) == [
        ("2024-03-09", WorkDone(samples=1)),
        ("2024-03-10", WorkDone()),
    ]
