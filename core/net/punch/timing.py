"""When each side of a hole punch fires, how often it is tried, and when a pair may try again.

Pure arithmetic (no sockets, no sleeping): ``core.net.punch.puncher`` feeds it round-trip samples and the
loop's clock; the tests feed it a fake clock.

Synchronisation. The initiator A sends SYNC over the relayed connection and starts its dials half a
round trip later; the responder B starts its dials the moment SYNC arrives, which is about half a
round trip after it left A. Both connects therefore leave at about the same moment. For TCP the
moment does not have to be exact: once both sockets exist, the later SYN passes the NAT that the
earlier one opened, and the kernel retransmits a SYN that an unopened NAT dropped (after 1 s, then
3 s). What matters is that A's connecting socket exists before B's SYN reaches A, so that the SYN
meets that socket rather than A's listener; firing A at RTT/2 gives it half a round trip of lead
on B's SYN, which still needs a one-way trip to arrive.

The round trip is estimated from the smallest recent sample: queuing only ever adds delay, so the
minimum is the closest to the path's propagation time, and a peer that answered slowly once (a busy
loop) does not push A's dials late.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from core.util.clock import Clock
from core.util.recent import RecentEvents

MAX_RTT = 5.0
"""A larger relayed round trip is treated as this: beyond it the estimate is noise, not a path."""


@dataclass(frozen=True, slots=True)
class PunchTiming:
    """The schedule of one pair's hole punch. Times in seconds."""

    attempts: int = 3
    """Rounds of CONNECT/SYNC; each round measures the round trip afresh."""
    dial_window: float = 3.5
    """How long the sockets keep trying, beyond the round trip: covers the first SYN (possibly
    dropped by a NAT not opened yet) and the kernel's retransmissions after 1 s and 3 s."""
    max_dial_window: float = 10.0
    redial_gap: float = 0.2
    """After a connect failed at once (refused, unreachable), a fresh socket tries after this."""
    retry_pause: float = 1.0
    """Between two rounds, times the round's number: a NAT's stale entry from the last round gets
    time to expire, and a busy peer is not hammered."""
    backoff: float = 600.0
    """After every round failed, the pair is not tried again for this long..."""
    max_backoff: float = 3600.0
    """...doubled after each further failure, up to this (a symmetric NAT will not change soon)."""
    relay_grace: float = 30.0
    """A relayed connection replaced by a punched one is closed after this, once it is idle."""

    def rtt(self, samples: Sequence[float]) -> float:
        """The round trip to plan with: the smallest sample, at most ``MAX_RTT``."""
        valid = [s for s in samples if s >= 0.0]
        if not valid:
            raise ValueError("no round-trip sample")
        return min(*valid, MAX_RTT)

    def initiator_fires_at(self, sync_sent_at: float, samples: Sequence[float]) -> float:
        """The loop time at which A dials: half a round trip after SYNC left."""
        return sync_sent_at + self.rtt(samples) / 2

    def window(self, samples: Sequence[float]) -> float:
        """How long A's sockets keep trying, from the moment A fires."""
        return min(self.dial_window + 2 * self.rtt(samples), self.max_dial_window)

    def responder_window(self, rtt: float) -> float:
        """How long B's sockets keep trying, from the moment SYNC arrives.

        B fires about half a round trip after A, so a window one round trip shorter makes B's
        sockets give up before A's. A SYN B retransmitted after A closed its sockets would reach A's
        listener (through a NAT entry A's SYN left behind) and be taken for an ordinary inbound
        connection; ending B first avoids that.
        """
        rtt = min(max(rtt, 0.0), MAX_RTT)
        return max(min(self.dial_window + rtt, self.max_dial_window - rtt), self.redial_gap)

    def pause_before(self, attempt: int) -> float:
        """Seconds to wait before round ``attempt`` (numbered from 1)."""
        return 0.0 if attempt <= 1 else self.retry_pause * (attempt - 1)

    def backoff_after(self, failures: int) -> float:
        """How long a pair waits after its ``failures``-th failed punch in a row."""
        if failures < 1:
            return 0.0
        return min(self.backoff * 2.0 ** (failures - 1), self.max_backoff)


class Backoff:
    """Which peers we recently failed to punch to, and until when we leave them on the relay."""

    def __init__(self, timing: PunchTiming, clock: Clock) -> None:
        self._timing = timing
        self._clock = clock
        self._failures: dict[object, tuple[int, float]] = {}  # peer -> (failures in a row, until)

    def failed(self, peer: object) -> float:
        """Record a failed punch; returns the seconds until the pair may try again."""
        now = self._clock.monotonic()
        self._forget_old(now)
        count = self._failures.get(peer, (0, 0.0))[0] + 1
        wait = self._timing.backoff_after(count)
        self._failures[peer] = (count, now + wait)
        return wait

    def _forget_old(self, now: float) -> None:
        """Forget pairs whose wait ended a longest back-off ago: we met them once and not since
        (remembering every relayed peer ever met would grow for as long as the engine runs)."""
        horizon = now - self._timing.max_backoff
        for peer in [p for p, (_, until) in self._failures.items() if until < horizon]:
            del self._failures[peer]

    def __len__(self) -> int:
        return len(self._failures)

    def succeeded(self, peer: object) -> None:
        self._failures.pop(peer, None)

    def waiting(self, peer: object) -> float:
        """Seconds left before ``peer`` may be punched again (0: now)."""
        entry = self._failures.get(peer)
        return 0.0 if entry is None else max(0.0, entry[1] - self._clock.monotonic())


class RateLimit:
    """At most ``limit`` events per ``period`` seconds per key, and ``total`` over all keys.

    Guards the responder: every CONNECT makes it open sockets towards addresses the caller chose, so
    a peer (or many) asking in a burst must be told no rather than served.
    """

    def __init__(self, limit: int, period: float, total: int, clock: Clock) -> None:
        self._limit = limit
        self._total = total
        self._clock = clock
        self._events = RecentEvents(period)  # memory stays bounded by ``total``

    def allow(self, key: Hashable) -> bool:
        """Whether one more event for ``key`` fits; counts it if so."""
        now = self._clock.monotonic()
        if self._events.total(now) >= self._total or self._events.count(key, now) >= self._limit:
            return False
        self._events.add(key, now)
        return True
