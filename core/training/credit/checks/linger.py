"""Linger: a stopping trainer answers the checks of its last rounds a few seconds more.

A check of a round is asked within a second or two of the round's landing, and one that finds its
member gone cannot judge it: it stays open, and expires withdrawing what the member was paid on
trust since its last passed check (``standing``). So a trainer that stops cleanly keeps answering
until ``LINGER`` seconds have passed since its last round was sealed and since a checker last asked
it anything, ``CAP`` seconds at most. A computer that goes off at once cannot, and may lose that
credit; that is the price of not paying what a member hides from the checks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

LINGER = 3.0
"""Seconds a stopping trainer keeps answering after its last round sealed or its last check call."""
CAP = 30.0
"""Seconds at most it lingers, however busy the checkers keep it."""


class Linger:
    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._clock, self._sleep = clock, sleep
        self._last = -float("inf")

    def touch(self) -> None:
        """A round was sealed, or a checker asked something: a check may be under way."""
        self._last = self._clock()

    async def settle(self, linger: float = LINGER, cap: float = CAP) -> None:
        """Return once ``linger`` seconds passed without a touch, or after ``cap``."""
        end = self._clock() + cap
        while True:  # each touch meanwhile moves the end on
            wait = min(self._last + linger, end) - self._clock()
            if wait <= 0:
                return
            await self._sleep(wait)
