"""Retrying: capped exponential backoff with jitter, and one log line per change of reason.

A peer that cannot load the state, find a group or reach a donor must neither spin nor flood its log:
each failure waits longer than the last (doubling up to a cap, with random jitter so that many peers
that failed together do not retry together), and the reason is logged when it changes, not once per
attempt. ``reason`` says what is awaited now (None once it worked), for whoever shows the peer's state.
"""

from __future__ import annotations

import logging
import random


class Retry:
    """The attempts at one thing: how long to wait after each failure, and why we are waiting."""

    def __init__(
        self,
        what: str,
        log: logging.Logger,
        *,
        first: float = 0.5,
        cap: float = 15.0,
        rng: random.Random | None = None,
    ) -> None:
        if first <= 0 or cap < first:
            raise ValueError("need 0 < first <= cap")
        self.what = what
        self.first = first
        self.cap = cap
        self.failures = 0
        self.reason: str | None = None
        """Why the last attempt failed; None before the first failure and after a success."""
        self._log = log
        self._rng = rng or random.Random()

    def failed(self, reason: str) -> float:
        """Record a failure; returns the seconds to wait before the next attempt."""
        if reason != self.reason:
            self._log.warning("%s: %s (retrying with backoff)", self.what, reason)
        self.reason = reason
        self.failures += 1
        ceiling = min(self.cap, self.first * 2.0 ** (self.failures - 1))
        # jitter in [ceiling/2, ceiling]: spreads peers that failed together, never retries at once
        return ceiling * (0.5 + 0.5 * self._rng.random())

    def succeeded(self) -> None:
        if self.reason is not None:
            self._log.info("%s: done after %d failed attempt(s)", self.what, self.failures)
        self.failures = 0
        self.reason = None
