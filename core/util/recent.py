"""RecentEvents: how many events each key had within the last ``period`` seconds.

The sliding window behind the network's rate limits (dial-backs, reservation requests, hole-punch
requests): old events are forgotten as time passes, and keys with none left are dropped, so the
memory follows the recent traffic only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable


class RecentEvents:
    """Events per key within the last ``period`` seconds (times from the caller's clock)."""

    def __init__(self, period: float) -> None:
        self.period = period
        self._times: dict[Hashable, deque[float]] = {}
        self._total = 0

    def count(self, key: Hashable, now: float) -> int:
        self._expire(now)
        times = self._times.get(key)
        return len(times) if times is not None else 0

    def total(self, now: float) -> int:
        self._expire(now)
        return self._total

    def add(self, key: Hashable, now: float) -> None:
        self._times.setdefault(key, deque()).append(now)
        self._total += 1

    def clear(self) -> None:
        self._times.clear()
        self._total = 0

    def _expire(self, now: float) -> None:
        oldest = now - self.period
        for key in list(self._times):
            times = self._times[key]
            while times and times[0] <= oldest:
                times.popleft()
                self._total -= 1
            if not times:
                del self._times[key]
