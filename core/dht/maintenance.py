"""Penalties: evicting contacts that stop answering and ignoring nodes that answer garbage.

A contact that fails ``max_failures`` requests in a row leaves the routing table (a replacement takes its
place). A node that answers garbage (malformed messages, records with bad signatures) is removed and
ignored for ``ban_seconds``, twice as long at each repeat offence, up to an hour.
"""

from __future__ import annotations

import logging

from core.dht.config import DHTConfig
from core.dht.routing import Contact, RoutingTable
from core.net.errors import PeerIdMismatchError
from core.trust.peer_id import PeerID
from core.util.clock import Clock

log = logging.getLogger(__name__)

MAX_BAN_SECONDS = 3600.0


class Penalties:
    def __init__(self, table: RoutingTable, clock: Clock, config: DHTConfig) -> None:
        self._table = table
        self._clock = clock
        self._config = config
        self._banned: dict[PeerID, tuple[float, float]] = {}  # peer -> (until, last ban length)

    def failed(self, contact: Contact, exc: Exception) -> None:
        contact.failures += 1
        # a different key at the address means the contact is gone for good
        gone = isinstance(exc, PeerIdMismatchError) or contact.failures >= self._config.max_failures
        if gone and self._table.remove(contact.peer_id) is not None:
            log.debug("evicted %s after %d failures: %s", contact.peer_id, contact.failures, exc)

    def garbage(self, peer: PeerID, reason: str) -> None:
        now = self._clock.monotonic()
        _, previous = self._banned.get(peer, (0.0, 0.0))
        length = min(MAX_BAN_SECONDS, previous * 2 if previous else self._config.ban_seconds)
        self._banned[peer] = (now + length, length)
        self._table.remove(peer)
        log.warning("ignoring %s for %.0f s: %s", peer, length, reason)

    def is_banned(self, peer: PeerID) -> bool:
        entry = self._banned.get(peer)
        return entry is not None and entry[0] > self._clock.monotonic()

    def banned_count(self) -> int:
        now = self._clock.monotonic()
        return sum(1 for until, _ in self._banned.values() if until > now)

    def forget_expired(self) -> None:
        """Drop bans that ended long ago (their length is kept for a while to double repeat bans)."""
        now = self._clock.monotonic()
        for peer, (until, length) in list(self._banned.items()):
            if until + 4 * length < now:
                del self._banned[peer]
