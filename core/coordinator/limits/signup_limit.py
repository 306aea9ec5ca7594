"""SignupLimiter: how fast accounts may be created, per address prefix and over all.

Each sign-up costs an scrypt hash (~16 MiB, tens of milliseconds) and a row that stays; without a
limit one script fills the database with accounts. Every sign-up attempt with a well-formed name
and password counts (taken names too, so probing for names is slowed the same way), per address
prefix (``addresses``: IPv4 /24, IPv6 /56, 127/8 as one) and over all prefixes, each in a sliding
window. Beyond either limit the attempt is refused with 429 and the seconds until the oldest
counted attempt leaves the window. The defaults let a classroom behind one NAT sign up over an
hour, and a launch-day crowd at two a second, while a flood from one network stops after ten.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from core.coordinator.errors import TooManyAttempts
from core.coordinator.limits.addresses import address_prefix
from core.util.clock import SYSTEM_CLOCK, Clock


@dataclass(frozen=True, slots=True)
class SignupLimits:
    per_prefix: int = 10
    prefix_window: float = 3600.0
    total: int = 120
    total_window: float = 60.0
    max_tracked: int = 100_000
    """Prefixes remembered before those with no sign-up in the window are forgotten."""


class SignupLimiter:
    def __init__(self, limits: SignupLimits = SignupLimits(), clock: Clock = SYSTEM_CLOCK) -> None:
        self.limits = limits
        self._clock = clock
        self._by_prefix: dict[str, deque[float]] = {}
        self._all: deque[float] = deque()

    def attempt(self, address: str | None) -> None:
        """Count a sign-up from ``address``, or raise ``TooManyAttempts`` if it must wait."""
        now = self._clock.monotonic()
        limits = self.limits
        prefix = address_prefix(address)
        mine = self._by_prefix.get(prefix, deque())
        _expire(mine, now - limits.prefix_window)
        _expire(self._all, now - limits.total_window)
        wait = 0.0
        if len(mine) >= limits.per_prefix:
            wait = mine[0] + limits.prefix_window - now
        if len(self._all) >= limits.total:
            wait = max(wait, self._all[0] + limits.total_window - now)
        if wait > 0:
            raise TooManyAttempts(wait, "sign-ups from your network or in all")
        if prefix not in self._by_prefix and len(self._by_prefix) >= limits.max_tracked:
            self.sweep()
        self._by_prefix[prefix] = mine
        mine.append(now)
        self._all.append(now)

    def sweep(self) -> None:
        """Forget prefixes with no sign-up in the window."""
        horizon = self._clock.monotonic() - self.limits.prefix_window
        for prefix in [
            p for p, times in self._by_prefix.items() if not times or times[-1] <= horizon
        ]:
            del self._by_prefix[prefix]

    def __len__(self) -> int:
        return len(self._by_prefix)


def _expire(times: deque[float], horizon: float) -> None:
    while times and times[0] <= horizon:
        times.popleft()
