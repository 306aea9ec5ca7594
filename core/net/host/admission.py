"""Which inbound connections may be handshaking with us at once: limits per address, prefix and in all.

An inbound connection costs a TLS handshake and its buffers before it has proved anything, and a
stranger can open thousands for free. ``Admission`` bounds the handshakes in progress three ways:
per source address (``max_pending_per_ip``), per network prefix (``max_pending_per_prefix``; a /24
for IPv4, a /56 for IPv6, the blocks one home or one provider customer typically holds) and in all
(``max_pending_handshakes``). A newcomer is always let in; when a limit is reached, an older
attempt of the crowded source or prefix is dropped to make room (for the total: of the prefix
holding the most slots): the oldest that has not sent a byte yet, else the oldest. A real peer
sends its TLS ClientHello at once (``speaking``), so a flood of silent connections only ever pushes
out its own attempts, and a flood that speaks its earlier ones: a legitimate handshake still gets
through beside it, from another network or even from the flooder's own address, and the flood
costs us at most the limits' worth at a time.

Connections through a relay are keyed by the relay (``relay:<PeerID>``): the relay's own limits
bound the circuits of each of its clients.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass, field


def address_block(source: str, ipv6_bits: int = 56) -> str | None:
    """The block ``source`` belongs to: its /24 (IPv4, IPv4-mapped IPv6) or its ``ipv6_bits``
    prefix (IPv6); None when it is not an IP address."""
    try:
        ip = ipaddress.ip_address(source.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    bits = 24 if ip.version == 4 else ipv6_bits
    return str(ipaddress.ip_network(f"{ip}/{bits}", strict=False))


def network_prefix(source: str) -> str:
    """The prefix ``source`` is counted under: its /24 (IPv4, IPv4-mapped IPv6) or /56 (IPv6)."""
    return address_block(source) or source  # not an address (a relay's key): its own prefix


def _nothing() -> None:
    return None


def _silent() -> bool:
    return False


@dataclass(eq=False)
class Attempt:
    """One handshake in progress. ``drop`` abandons it (set by the owner once it is running)."""

    source: str
    prefix: str
    drop: Callable[[], None] = field(default=_nothing)
    speaking: bool = False
    """The dialer has sent its first bytes (``Admission.spoke``)."""
    spoken: Callable[[], bool] = field(default=_silent)
    """Asked before a silent attempt is dropped: have its bytes arrived in the meantime?"""


class Admission:
    """Counts handshakes in progress and chooses which to drop when a limit is reached."""

    def __init__(self, *, total: int, per_source: int, per_prefix: int) -> None:
        if min(total, per_source, per_prefix) < 1:
            raise ValueError("admission limits must be at least 1")
        self.total = total
        self.per_source = per_source
        self.per_prefix = per_prefix
        # attempts in arrival order (dicts keep insertion order), by source and by prefix
        self._by_source: dict[str, dict[Attempt, None]] = {}
        self._by_prefix: dict[str, dict[Attempt, None]] = {}
        self._pending = 0
        self.dropped = 0
        """Handshakes dropped to make room, since the start (for logs and diagnostics)."""

    @property
    def pending(self) -> int:
        return self._pending

    def admit(self, source: str) -> Attempt:
        """Count a new handshake from ``source``, first dropping an older one if a limit is full."""
        attempt = Attempt(source, network_prefix(source))
        same_source = self._by_source.get(attempt.source, {})
        same_prefix = self._by_prefix.get(attempt.prefix, {})
        if len(same_source) >= self.per_source:
            self._drop(_victim(same_source))
        elif len(same_prefix) >= self.per_prefix:
            self._drop(_victim(same_prefix))
        elif self._pending >= self.total:
            self._drop(_victim(max(self._by_prefix.values(), key=len)))
        self._by_source.setdefault(attempt.source, {})[attempt] = None
        self._by_prefix.setdefault(attempt.prefix, {})[attempt] = None
        self._pending += 1
        return attempt

    def release(self, attempt: Attempt) -> None:
        """The handshake ended (either way). Idempotent: a dropped attempt was released already."""
        same_source = self._by_source.get(attempt.source)
        if same_source is None or attempt not in same_source:
            return
        del same_source[attempt]
        if not same_source:
            del self._by_source[attempt.source]
        same_prefix = self._by_prefix[attempt.prefix]
        del same_prefix[attempt]
        if not same_prefix:
            del self._by_prefix[attempt.prefix]
        self._pending -= 1
        # the owner's callbacks hold its transport and timers, which hold the attempt: let go
        # now, or each dropped connection lingers until the cyclic collector's next full pass
        attempt.drop, attempt.spoken = _nothing, _silent

    @staticmethod
    def spoke(attempt: Attempt) -> None:
        """The dialer sent its first bytes: drop this one only after every silent one."""
        attempt.speaking = True

    def _drop(self, attempt: Attempt) -> None:
        drop = attempt.drop
        self.release(attempt)
        self.dropped += 1
        drop()


def _victim(attempts: dict[Attempt, None]) -> Attempt:
    """The oldest attempt that has not spoken yet, else the oldest."""
    for attempt in attempts:
        if not attempt.speaking:
            if not attempt.spoken():
                return attempt
            attempt.speaking = True
    return next(iter(attempts))
