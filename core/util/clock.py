"""Time, injectable so that expiry and timeouts can be tested without waiting.

Services take a ``Clock``. ``SystemClock`` reads the real clocks; ``FakeClock`` only moves when told to.
Wall time (``time()``) is what records expire by, since expirations are absolute across peers;
``monotonic()`` is for measuring intervals on one machine.
"""

from __future__ import annotations

import time as _time
from typing import Protocol


class Clock(Protocol):
    def time(self) -> float:
        """Seconds since the Unix epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary start, never going backwards."""
        ...


class SystemClock:
    def time(self) -> float:
        return _time.time()

    def monotonic(self) -> float:
        return _time.monotonic()


class FakeClock:
    """A clock for tests: starts at ``start`` and moves only through ``advance``."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._mono = 0.0

    def time(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        self._now += seconds
        self._mono += seconds
