"""LoginLimiter: password guessing is slowed per address prefix and per account, without ever
locking an account's owner out from everywhere.

Addresses count by prefix (``addresses``: IPv4 /24, IPv6 /56). Three kinds of counters, each of
failures within ``window`` seconds; once one reaches its threshold, the next attempt must wait
``first_delay`` after the last failure, doubling with each further failure up to its cap:

- per (account, prefix), threshold ``user_threshold``, up to ``max_delay`` (15 min): one guesser
  at one account is slowed hard;
- per prefix, threshold ``address_threshold``, up to ``max_delay``: one guesser across many
  accounts (higher, as many honest people may share one prefix: a lab, a NAT);
- per account over all prefixes, threshold ``account_threshold``, capped at ``account_max_delay``
  (a few seconds): guessers spread over many prefixes are slowed, yet this counter is a delay, never
  a lock, and it does not apply at all to a prefix with no failure on this account, so the owner
  logging in from their own network is never refused because someone else guessed.

A refused attempt is answered 429 (Retry-After) before any password is checked, even a right one.
Every attempt counts as a failure the moment it starts (so a burst of parallel guesses cannot all
slip in before the first fails) and is forgiven when the password turns out right: the account's
counter from that prefix and its account-wide counter are cleared (other prefixes' stay), and the
prefix loses the one failure, so an attacker's own account does not unlock their prefix.

The clock is injected (monotonic seconds), so tests move time instead of sleeping.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from core.coordinator.errors import TooManyAttempts
from core.coordinator.limits.addresses import address_prefix
from core.util.clock import SYSTEM_CLOCK, Clock

_Key = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LoginLimits:
    user_threshold: int = 5
    """Failures for one account from one address prefix before waits begin."""
    address_threshold: int = 20
    """Failures from one prefix (any accounts) before waits begin."""
    account_threshold: int = 10
    """Failures for one account from all prefixes before its (short) waits begin."""
    window: float = 3600.0
    first_delay: float = 2.0
    max_delay: float = 900.0
    account_max_delay: float = 4.0
    """The most the account-wide counter makes anyone wait: a slow-down, never a lock."""
    max_tracked: int = 100_000
    """Keys remembered before a sweep forgets those with no failure in the window."""


class LoginLimiter:
    def __init__(self, limits: LoginLimits = LoginLimits(), clock: Clock = SYSTEM_CLOCK) -> None:
        self.limits = limits
        self._clock = clock
        self._failures: dict[_Key, deque[float]] = {}

    def begin(self, username_key: str, address: str | None) -> None:
        """Start an attempt: raise ``TooManyAttempts`` if it must wait, else count it as a
        failure until ``succeeded`` forgives it."""
        now = self._clock.monotonic()
        keys = self._keys(username_key, address_prefix(address), now)
        wait = max(self._wait(key, threshold, cap, now) for key, threshold, cap in keys)
        if wait > 0:
            raise TooManyAttempts(wait)
        if len(self._failures) >= self.limits.max_tracked:
            self.sweep()
        for key in self._counted(username_key, address_prefix(address)):
            self._failures.setdefault(key, deque()).append(now)

    def succeeded(self, username_key: str, address: str | None) -> None:
        """The password was right: clear the account's failures from this prefix and its
        account-wide count, and forgive the prefix this one (other prefixes stay slowed)."""
        prefix = address_prefix(address)
        self._failures.pop(("pair", username_key, prefix), None)
        self._failures.pop(("account", username_key), None)
        failures = self._failures.get(("prefix", prefix))
        if failures:
            failures.pop()
            if not failures:
                del self._failures[("prefix", prefix)]

    def retry_after(self, username_key: str, address: str | None) -> float:
        """Seconds until an attempt would be let in (0 if now)."""
        now = self._clock.monotonic()
        keys = self._keys(username_key, address_prefix(address), now)
        return max(self._wait(key, threshold, cap, now) for key, threshold, cap in keys)

    def sweep(self) -> None:
        """Forget keys whose failures are all older than the window."""
        horizon = self._clock.monotonic() - self.limits.window
        stale = [
            k for k, failures in self._failures.items() if not failures or failures[-1] < horizon
        ]
        for key in stale:
            del self._failures[key]

    def __len__(self) -> int:
        return len(self._failures)

    @staticmethod
    def _counted(username_key: str, prefix: str) -> list[_Key]:
        return [("pair", username_key, prefix), ("prefix", prefix), ("account", username_key)]

    def _keys(self, username_key: str, prefix: str, now: float) -> list[tuple[_Key, int, float]]:
        limits = self.limits
        pair = ("pair", username_key, prefix)
        keys: list[tuple[_Key, int, float]] = [
            (pair, limits.user_threshold, limits.max_delay),
            (("prefix", prefix), limits.address_threshold, limits.max_delay),
        ]
        # The account-wide slow-down only meets prefixes that already failed on this account.
        if self._recent(pair, now):
            account = ("account", username_key)
            keys.append((account, limits.account_threshold, limits.account_max_delay))
        return keys

    def _recent(self, key: _Key, now: float) -> int:
        failures = self._failures.get(key)
        if not failures:
            return 0
        horizon = now - self.limits.window
        while failures and failures[0] < horizon:
            failures.popleft()
        return len(failures)

    def _wait(self, key: _Key, threshold: int, cap: float, now: float) -> float:
        count = self._recent(key, now)
        if count < threshold:
            return 0.0
        failures = self._failures[key]
        delay = self.limits.first_delay * 2.0 ** min(count - threshold, 60)
        return max(0.0, failures[-1] + min(delay, cap) - now)
