"""LoginLimiter: brute-force guessing of passwords is slowed per username and per client address.

Every login attempt counts as a failure the moment it starts (so a burst of parallel guesses cannot
all slip in before the first one fails) and is forgiven when the password turns out right. Once a
key (a username, or an address) has ``threshold`` failures within ``window`` seconds, its next
attempt must wait ``first_delay`` seconds after the last failure, and the wait doubles with every
further failure (up to ``max_delay``). While a key waits, attempts are refused with 429 before any
password is checked, even a right one. A success clears the username's failures; the address keeps
all but the forgiven one, so that an attacker's own account does not unlock their address.

The clock is injected (monotonic seconds), so tests move time instead of sleeping.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from core.coordinator.errors import TooManyAttempts


@dataclass(frozen=True, slots=True)
class LoginLimits:
    user_threshold: int = 5
    address_threshold: int = 20
    """Higher than per name: many honest people may share one address (a lab, a NAT)."""
    window: float = 3600.0
    first_delay: float = 2.0
    max_delay: float = 900.0
    max_tracked: int = 100_000
    """Keys remembered before a sweep forgets those with no failure in the window."""


class LoginLimiter:
    def __init__(
        self, limits: LoginLimits = LoginLimits(), clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limits = limits
        self._clock = clock
        self._failures: dict[tuple[str, str], deque[float]] = {}

    def begin(self, username_key: str, address: str) -> None:
        """Start an attempt: raise ``TooManyAttempts`` if either key must wait, else count it as
        a failure until ``succeeded`` forgives it."""
        now = self._clock()
        keys = self._keys(username_key, address)
        wait = max(self._wait(key, threshold, now) for key, threshold in keys)
        if wait > 0:
            raise TooManyAttempts(wait)
        if len(self._failures) >= self.limits.max_tracked:
            self.sweep()
        for key, _ in keys:
            self._failures.setdefault(key, deque()).append(now)

    def succeeded(self, username_key: str, address: str) -> None:
        """The password was right: clear the name's failures and forgive the address this one."""
        self._failures.pop(("user", username_key), None)
        failures = self._failures.get(("address", address))
        if failures:
            failures.pop()
            if not failures:
                del self._failures[("address", address)]

    def retry_after(self, username_key: str, address: str) -> float:
        """Seconds until an attempt would be let in (0 if now)."""
        now = self._clock()
        return max(self._wait(key, t, now) for key, t in self._keys(username_key, address))

    def sweep(self) -> None:
        """Forget keys whose failures are all older than the window."""
        horizon = self._clock() - self.limits.window
        stale = [
            k for k, failures in self._failures.items() if not failures or failures[-1] < horizon
        ]
        for key in stale:
            del self._failures[key]

    def __len__(self) -> int:
        return len(self._failures)

    def _keys(self, username_key: str, address: str) -> list[tuple[tuple[str, str], int]]:
        return [
            (("user", username_key), self.limits.user_threshold),
            (("address", address), self.limits.address_threshold),
        ]

    def _wait(self, key: tuple[str, str], threshold: int, now: float) -> float:
        failures = self._failures.get(key)
        if not failures:
            return 0.0
        horizon = now - self.limits.window
        while failures and failures[0] < horizon:
            failures.popleft()
        if len(failures) < threshold:
            return 0.0
        delay = self.limits.first_delay * 2.0 ** min(len(failures) - threshold, 60)
        return max(0.0, failures[-1] + min(delay, self.limits.max_delay) - now)
