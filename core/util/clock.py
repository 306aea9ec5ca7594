"""Time, injectable so that expiry and timeouts can be tested without waiting.

One idiom for injectable time: a class that reads the time takes ``clock: Clock`` (by default
``SYSTEM_CLOCK``) and calls ``clock.time()`` or ``clock.monotonic()``. A ``Clock`` rather than a
bare ``Callable[[], float]``: each call says which time it reads, one object serves a class that
needs both, and a test's ``FakeClock`` moves both together. Code whose time no test moves calls
``time.monotonic()`` itself.

Wall time (``time()``) is what records expire by, since expirations are absolute across peers;
``monotonic()`` is for measuring intervals on one machine (it is the asyncio loop's time too).
"""

from __future__ import annotations

import time as _time
from typing import Final, Protocol


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


SYSTEM_CLOCK: Final = SystemClock()
"""The real clocks: the default of every ``clock`` parameter (it holds no state)."""


class FakeClock:
    """A clock for tests: reads ``start`` (wall) and ``monotonic_start``, and moves only when
    told, both clocks by as much."""

    def __init__(self, start: float = 1_700_000_000.0, *, monotonic_start: float = 0.0) -> None:
        self._now = start
        self._mono = monotonic_start

    def time(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        self._now += seconds
        self._mono += seconds

    def advance_to(self, monotonic: float) -> None:
        """Move on until ``monotonic()`` reads ``monotonic``."""
        self.advance(monotonic - self._mono)
