"""RoundClock: rounds on the shared wall clock, at fixed times whoever asks."""

from __future__ import annotations

import pytest

from core.modes.clock import RoundClock


@pytest.mark.parametrize(
    ("now", "index", "left"),
    [(0.0, 0, 60.0), (59.5, 0, 0.5), (60.0, 1, 60.0), (1_700_000_030.0, 28_333_333, 10.0)],
)
def test_rounds_are_fixed_windows_of_unix_time(now: float, index: int, left: float) -> None:
    clock = RoundClock(60.0)
    assert clock.index(now) == index
    assert clock.until_end(now) == pytest.approx(left)
    assert clock.end_of(index) == pytest.approx(now + left)


def test_two_peers_with_different_start_times_end_rounds_together() -> None:
    clock = RoundClock(30.0)
    fast_joined, slow_joined = 1000.0, 1017.3
    assert clock.end_of(clock.index(fast_joined)) == clock.end_of(clock.index(slow_joined)) == 1020


@pytest.mark.parametrize("seconds", [0.0, -1.0])
def test_a_round_must_last(seconds: float) -> None:
    with pytest.raises(ValueError, match="round"):
        RoundClock(seconds)
