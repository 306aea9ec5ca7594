"""Budget: a share of the checker's time, as a token bucket (``core.net.wire.bandwidth``) that
fills at that share of the clock and that each check's recomputing empties.

A share of all the time since the start would let a burst of checks after a quiet day spend the
day's allowance at once (a share of the last hour, the hour's). The bucket holds at most ``BURST``
seconds' allowance, and starts full (or, asked, empty). A check may start while some is left, and
may take it below zero: the next then waits until it has filled again. Over any stretch longer
than ``BURST`` the checks take the share, and within one at most ``BURST`` times the share more.
"""

from __future__ import annotations

import math

from core.net.wire.bandwidth import TokenBucket
from core.util.clock import SYSTEM_CLOCK, Clock

BURST = 600.0
"""Seconds of the clock whose allowance the bucket holds: a quiet spell saves no more."""


class Budget:
    def __init__(self, share: float, clock: Clock = SYSTEM_CLOCK, *, full: bool = True) -> None:
        """``share``: of the clock's time, at least 0 (``inf``: no bound); ``full``: the bucket
        starts full (False: empty, nothing allowed before the share has filled some)."""
        if not share >= 0:
            raise ValueError(f"a budget is a share of the time, at least 0, not {share}")
        self.share = share
        rate = None if math.isinf(share) or share == 0 else share
        self._bucket = TokenBucket(rate, burst_seconds=BURST, clock=clock, full=full)
        self.under_way = 0
        """Checks drawn under this budget and not done yet (its owner counts them)."""

    def level(self) -> float:
        """The seconds of checking the budget allows now (below 0: owed)."""
        return math.inf if math.isinf(self.share) else self._bucket.tokens

    def allows(self, ahead: float = 0.0) -> bool:
        """Whether one more check may start, with ``ahead`` seconds of checks under way or drawn
        before it."""
        return self.level() - ahead > 0

    def spend(self, seconds: float) -> None:
        self._bucket.take(seconds)
