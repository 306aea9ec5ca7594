"""Budget: a share of the checker's time, as a bucket that fills at that share of its clock and
that each check's recomputing empties.

A share of all the time since the start would let a burst of checks after a quiet day spend the
day's allowance at once (a share of the last hour, the hour's). The bucket holds at most ``BURST``
seconds' allowance. A check may start while some is left, and may take it below zero: the next
then waits until it has filled again. Over any stretch longer than ``BURST`` the checks take the
share, and within one at most ``BURST`` times the share more.
"""

from __future__ import annotations

import math
from collections.abc import Callable

BURST = 600.0
"""Seconds of the clock whose allowance the bucket holds: a quiet spell saves no more."""


class Budget:
    def __init__(self, share: float, clock: Callable[[], float]) -> None:
        """``share``: of the clock's time, at least 0 (``inf``: no bound)."""
        if not share >= 0:
            raise ValueError(f"a budget is a share of the time, at least 0, not {share}")
        self.share = share
        self._clock = clock
        self._level = share * BURST
        self._at = clock()
        self.under_way = 0
        """Checks drawn under this budget and not done yet (its owner counts them)."""

    def level(self) -> float:
        """The seconds of checking the budget allows now (below 0: owed)."""
        now = self._clock()
        if not math.isinf(self.share):
            self._level = min(self.share * BURST, self._level + self.share * (now - self._at))
        self._at = now
        return self._level

    def allows(self, ahead: float = 0.0) -> bool:
        """Whether one more check may start, with ``ahead`` seconds of checks under way or drawn
        before it."""
        return math.isinf(self.share) or self.level() - ahead > 0

    def spend(self, seconds: float) -> None:
        self.level()
        if not math.isinf(self.share):
            self._level -= seconds
