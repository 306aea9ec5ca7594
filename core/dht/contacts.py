"""Keeping the routing table honest: who answered, who went silent, who lied.

Every node that answers us, and every server that sends us a request it can be dialed back from, enters
the routing table. When its bucket is full, the oldest contact is pinged and keeps its place if it
answers (long-lived nodes are the most reliable). Penalties (``maintenance``) evict the silent and
ignore the liars.
"""

from __future__ import annotations

from core.dht.ids import node_id
from core.dht.maintenance import Penalties
from core.dht.messages import PingRequest
from core.dht.routing import Contact
from core.dht.state import NodeState
from core.dht.transport import Caller
from core.net.errors import NetError
from core.net.host.address import PeerAddress
from core.trust.peer_id import PeerID


class ContactBook:
    def __init__(self, state: NodeState) -> None:
        self._state = state
        self.penalties = Penalties(state.table, state.clock, state.config)
        self._checking: set[PeerID] = set()

    def make(self, peer: PeerID, addresses: tuple[PeerAddress, ...]) -> Contact:
        return Contact(peer, node_id(peer), addresses, self._state.clock.monotonic())

    def saw(self, caller: Caller, client: bool) -> None:
        """A request is proof of life: servers that can be dialed back enter the routing table."""
        if client or not caller.addresses or self.penalties.is_banned(caller.peer):
            return
        self.add(self.make(caller.peer, caller.addresses))

    def add(self, contact: Contact) -> None:
        state = self._state
        oldest = state.table.add(contact)
        if oldest is not None and oldest.peer_id not in self._checking and not state.tasks.closed:
            self._checking.add(oldest.peer_id)
            state.tasks.spawn(f"check-{oldest.peer_id.short()}", self._check_oldest(oldest))

    async def _check_oldest(self, contact: Contact) -> None:
        """A full bucket met a newcomer: keep the oldest contact if it still answers."""
        state = self._state
        try:
            state.stats.sent["ping"] += 1
            await state.transport.ping(
                contact, PingRequest(state.config.client_mode), state.config.rpc_timeout
            )
        except NetError:
            state.table.remove(contact.peer_id)
        else:
            self.alive(contact)
        finally:
            self._checking.discard(contact.peer_id)

    def alive(self, contact: Contact) -> None:
        """It answered: it belongs in the routing table (or moves to the fresh end of its bucket)."""
        contact.failures = 0
        contact.last_seen = self._state.clock.monotonic()
        if not self.penalties.is_banned(contact.peer_id):
            self.add(contact)

    def failed(self, contact: Contact, exc: Exception) -> None:
        self._state.stats.failed_requests += 1
        self.penalties.failed(contact, exc)

    def garbage(self, contact: Contact, reason: str) -> None:
        self._state.stats.garbage_answers += 1
        self.penalties.garbage(contact.peer_id, reason)
