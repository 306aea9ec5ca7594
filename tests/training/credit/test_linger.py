"""Linger: how long a stopping trainer keeps answering checks, on a clock the test moves."""

from __future__ import annotations

import pytest

from core.training.credit.checks.linger import CAP, LINGER, Linger


class Clock:
    """Time that passes only when the linger sleeps; calls made from checkers at set times."""

    def __init__(self, calls: list[float]) -> None:
        self.now = 100.0
        self.calls = sorted(calls)
        self.linger = Linger(lambda: self.now, self.sleep)

    async def sleep(self, seconds: float) -> None:
        end = self.now + seconds
        while self.calls and self.calls[0] <= end:
            self.now = self.calls.pop(0)
            self.linger.touch()
        self.now = end


@pytest.mark.parametrize(
    ("sealed_ago", "calls", "waited"),
    [
        (None, [], 0.0),  # nothing sealed: it stops at once
        (60.0, [], 0.0),  # its last round long ago: at once
        (1.0, [], LINGER - 1.0),  # sealed a second ago: until LINGER after it
        (1.0, [101.0, 102.5], 2.5 + LINGER),  # a check's calls keep it answering
        (0.0, [100.0 + 2.0 * k for k in range(1, 40)], CAP),  # never more than CAP
    ],
)
async def test_a_stopping_trainer_lingers_after_its_last_round_and_its_last_check_call(
    sealed_ago: float | None, calls: list[float], waited: float
) -> None:
    clock = Clock(calls)
    if sealed_ago is not None:
        clock.now -= sealed_ago
        clock.linger.touch()
        clock.now += sealed_ago
    await clock.linger.settle()
    assert clock.now - 100.0 == pytest.approx(waited)
