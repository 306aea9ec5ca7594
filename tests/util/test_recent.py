"""RecentEvents: a sliding window per key, forgetting old events and empty keys."""

from __future__ import annotations

from core.util.recent import RecentEvents


def test_counts_per_key_and_in_total_within_the_period() -> None:
    window = RecentEvents(60.0)
    window.add("a", 0.0)
    window.add("a", 10.0)
    window.add("b", 30.0)
    assert (window.count("a", 30.0), window.count("b", 30.0), window.total(30.0)) == (2, 1, 3)
    # at 60 s the first event is a whole period old: gone
    assert (window.count("a", 60.0), window.total(60.0)) == (1, 2)
    assert (window.count("a", 95.0), window.count("b", 95.0), window.total(95.0)) == (0, 0, 0)
    assert window.count("never", 95.0) == 0


def test_clear_forgets_everything() -> None:
    window = RecentEvents(60.0)
    window.add("a", 0.0)
    window.clear()
    assert window.total(1.0) == 0
