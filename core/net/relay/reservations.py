"""Reservations: which peers a relay keeps reachable, and the limits on holding one.

A reservation belongs to one authenticated connection: it lives until it expires or that connection
closes, whichever comes first, so a peer that went away frees its slot without any message. Dead
reservations are dropped lazily, whenever the table is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.net.host.admission import network_prefix
from core.net.relay.limits import RelayLimits
from core.net.relay.messages import RelayRefused, RelayStatus
from core.util.recent import RecentEvents

if TYPE_CHECKING:
    from core.net.wire.connection import Connection
    from core.trust.peer_id import PeerID

RATE_WINDOW = 60.0
"""Seconds over which a peer's reservation requests are counted (``reserve_calls_per_minute``)."""


@dataclass(slots=True)
class Reservation:
    peer: PeerID
    ip: str
    connection: Connection
    """Where the relay reaches the peer to offer it circuits."""
    expires: float
    """Loop time (``loop.time()``)."""

    @property
    def prefix(self) -> str:
        return network_prefix(self.ip)

    def live(self, now: float) -> bool:
        return now < self.expires and not self.connection.closing


class Reservations:
    """The live reservations of one relay, by peer."""

    def __init__(self, limits: RelayLimits) -> None:
        self._limits = limits
        self._by_peer: dict[PeerID, Reservation] = {}
        self._requests = RecentEvents(RATE_WINDOW)

    def __len__(self) -> int:
        return len(self._by_peer)

    def get(self, peer: PeerID, now: float) -> Reservation | None:
        """The peer's live reservation, if it holds one."""
        found = self._by_peer.get(peer)
        if found is not None and not found.live(now):
            del self._by_peer[peer]
            return None
        return found

    def reserve(self, peer: PeerID, ip: str, connection: Connection, now: float) -> Reservation:
        """Grant or renew ``peer``'s reservation, or raise ``RelayRefused`` saying which limit."""
        limits = self._limits
        self._count_request(peer, now)
        self._purge(now)
        current = self._by_peer.get(peer)
        if current is None:  # a renewal needs no free slot: it keeps the one it has
            if len(self._by_peer) >= limits.max_reservations:
                raise RelayRefused(
                    RelayStatus.LIMIT,
                    f"the relay holds its maximum of {limits.max_reservations} reservations",
                )
            same_ip = sum(1 for held in self._by_peer.values() if held.ip == ip)
            if same_ip >= limits.max_reservations_per_ip:
                raise RelayRefused(
                    RelayStatus.LIMIT,
                    f"too many reservations from {ip} (limit {limits.max_reservations_per_ip})",
                )
            prefix = network_prefix(ip)
            same_prefix = sum(1 for held in self._by_peer.values() if held.prefix == prefix)
            if same_prefix >= limits.max_reservations_per_prefix:
                raise RelayRefused(
                    RelayStatus.LIMIT,
                    f"too many reservations from {prefix} "
                    f"(limit {limits.max_reservations_per_prefix})",
                )
        reservation = Reservation(peer, ip, connection, now + limits.reservation_seconds)
        self._by_peer[peer] = reservation
        return reservation

    def _count_request(self, peer: PeerID, now: float) -> None:
        limit = self._limits.reserve_calls_per_minute
        if self._requests.count(peer, now) >= limit:
            raise RelayRefused(
                RelayStatus.LIMIT,
                f"too many reservation requests (limit {limit} a minute); try again later",
            )
        self._requests.add(peer, now)

    def _purge(self, now: float) -> None:
        for peer in [peer for peer, held in self._by_peer.items() if not held.live(now)]:
            del self._by_peer[peer]

    def drop(self, peer: PeerID) -> None:
        self._by_peer.pop(peer, None)

    def clear(self) -> None:
        self._by_peer.clear()
        self._requests.clear()
