"""Bandwidth limits of a Host: a token bucket per direction, shared by all of its connections.

Volunteers expect to cap what the client uses of their connection (BOINC and Folding@home both let them),
and the load-balancing benchmark needs links of known speed. Upload is paced where stream data is handed
to the transport: a sender that would overdraw the bucket waits until the debt is repaid. Download is
paced by pausing reading on the connection that overdrew it until the debt is repaid; TCP then slows the
sender down. Only stream data and received bytes count against the upload and download buckets
respectively; small control messages are never delayed, so a throttled peer stays responsive.

Each bucket allows a burst of ``burst_seconds`` of traffic at its rate, then holds the long-run average
to the rate. Limits may change at any time (the app's settings); ``None`` means unlimited.
"""

from __future__ import annotations

import asyncio

from core.util.clock import SYSTEM_CLOCK, Clock
from core.util.errors import ConfigError


class TokenBucket:
    """Bytes per second, with debt: taking more than is there is allowed, and costs waiting time."""

    def __init__(
        self,
        rate: float | None,
        *,
        burst_seconds: float = 0.05,
        clock: Clock = SYSTEM_CLOCK,
        full: bool = False,
    ) -> None:
        """``full``: start with the whole burst in the bucket (else empty)."""
        self._clock = clock
        self._burst_seconds = burst_seconds
        self._rate: float | None = None
        self._tokens = 0.0
        self._stamp = clock.monotonic()
        self.set_rate(rate)
        if full:
            self._tokens = self._capacity()

    @property
    def rate(self) -> float | None:
        return self._rate

    def set_rate(self, rate: float | None) -> None:
        if rate is not None and not rate > 0:
            raise ConfigError(
                f"a bandwidth limit must be a positive number of bytes/s, not {rate!r}"
            )
        self._refill()
        self._rate = None if rate is None else float(rate)
        self._tokens = min(self._tokens, self._capacity())

    def _capacity(self) -> float:
        return 0.0 if self._rate is None else self._rate * self._burst_seconds

    def _refill(self) -> None:
        now = self._clock.monotonic()
        if self._rate is not None:
            self._tokens = min(self._capacity(), self._tokens + (now - self._stamp) * self._rate)
        self._stamp = now

    @property
    def tokens(self) -> float:
        """What the bucket holds now (below 0: its debt; 0 when unlimited)."""
        self._refill()
        return self._tokens

    def take(self, size: float) -> float:
        """Take ``size`` bytes now; returns how many seconds to wait before the next use (0 if none)."""
        if self._rate is None:
            return 0.0
        self._refill()
        self._tokens -= size
        return 0.0 if self._tokens >= 0 else -self._tokens / self._rate

    async def acquire(self, size: int) -> None:
        """Take ``size`` bytes, waiting until the bucket is out of debt again."""
        wait = self.take(size)
        if wait > 0:
            await asyncio.sleep(wait)


class BandwidthLimits:
    """The upload and download buckets of one Host."""

    def __init__(self, upload: float | None = None, download: float | None = None) -> None:
        self.upload = TokenBucket(upload)
        self.download = TokenBucket(download)

    def set(self, upload: float | None, download: float | None) -> None:
        self.upload.set_rate(upload)
        self.download.set_rate(download)
