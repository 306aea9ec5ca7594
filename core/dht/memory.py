"""An in-memory network of DHT nodes, to simulate large swarms in one process.

Requests and responses still go through their wire encoding (msgpack and back), so validation is the
same as on real connections; only sockets, TLS and scheduling delays are missing. Nodes can be taken
down to simulate churn, and an optional ``latency`` function gives every request a simulated round
trip (half before the handler runs, half after), so lookups on a simulated swarm take the time they
would over a wide-area network.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from core.dht.messages import (
    FindRequest,
    FindResponse,
    PingRequest,
    PingResponse,
    StoreRequest,
    StoreResponse,
)
from core.dht.routing import Contact
from core.dht.transport import Caller, Handlers
from core.net.errors import DialError
from core.net.host.address import PeerAddress
from core.trust.identity import Identity
from core.trust.peer_id import PeerID
from core.util.msgpack_codec import pack, unpack
from core.util.wire import WireMessage

M = TypeVar("M", bound=WireMessage)

Latency = Callable[[PeerID, PeerID], float]
"""The round-trip time, in seconds, of one request from the first peer to the second."""


def _through_the_wire(message: M) -> M:
    return type(message).from_wire(unpack(pack(message.to_wire())))


class MemoryNetwork:
    """Delivers DHT requests between ``MemoryTransport``s by direct calls."""

    def __init__(self, latency: Latency | None = None) -> None:
        self._handlers: dict[PeerID, Handlers] = {}
        self.down: set[PeerID] = set()
        self.calls: Counter[str] = Counter()
        self.latency = latency
        """None: no delay; may be set or cleared at any time (e.g. build fast, then measure)."""
        self.in_flight = 0
        """Requests delivered and not yet answered (background stores included): zero when quiet."""
        self._quiet = asyncio.Event()
        self._quiet.set()
        self._made = 0

    def transport(self, identity: Identity | None = None, ip: str | None = None) -> MemoryTransport:
        """A node's transport; ``ip`` is the address others see its requests come from (by default
        one of 10.0.0.0/8 in a /24 of its own, so storage quotas count each node apart)."""
        if ip is None:
            self._made += 1
            ip = f"10.{(self._made >> 8) & 255}.{self._made & 255}.1"
        return MemoryTransport(self, identity or Identity.generate(), ip)

    def register(self, peer: PeerID, handlers: Handlers) -> None:
        self._handlers[peer] = handlers

    def unregister(self, peer: PeerID) -> None:
        self._handlers.pop(peer, None)

    async def deliver(
        self, sender: MemoryTransport, target: PeerID, kind: str, request: Any
    ) -> Any:
        self.calls[kind] += 1
        handlers = self._handlers.get(target)
        if handlers is None or target in self.down:
            raise DialError(f"{target} is not reachable")
        caller = Caller(sender.identity.peer_id, tuple(sender.addresses()), sender.ip)
        rtt = self.latency(caller.peer, target) if self.latency is not None else 0.0
        self.in_flight += 1
        self._quiet.clear()
        try:
            # the request's half of the trip; with no latency, still let other lookups interleave
            await asyncio.sleep(rtt / 2)
            handler = getattr(handlers, f"on_{kind}")
            response = await handler(caller, _through_the_wire(request))
            if rtt > 0:
                await asyncio.sleep(rtt / 2)  # the response's half
        finally:
            self.in_flight -= 1
            if not self.in_flight:
                self._quiet.set()
        return _through_the_wire(response)

    async def quiet(self) -> None:
        """Return once no request is in flight (a task about to send one may still be starting)."""
        await self._quiet.wait()


class MemoryTransport:
    def __init__(self, network: MemoryNetwork, identity: Identity, ip: str) -> None:
        self._network = network
        self._identity = identity
        self.ip = ip
        self._address = PeerAddress.tcp(ip, 1, identity.peer_id)

    @property
    def identity(self) -> Identity:
        return self._identity

    def addresses(self) -> list[PeerAddress]:
        return [self._address]

    async def ping(self, contact: Contact, request: PingRequest, timeout: float) -> PingResponse:
        response: PingResponse = await self._network.deliver(self, contact.peer_id, "ping", request)
        return response

    async def find(self, contact: Contact, request: FindRequest, timeout: float) -> FindResponse:
        response: FindResponse = await self._network.deliver(self, contact.peer_id, "find", request)
        return response

    async def store(self, contact: Contact, request: StoreRequest, timeout: float) -> StoreResponse:
        response: StoreResponse = await self._network.deliver(
            self, contact.peer_id, "store", request
        )
        return response

    def serve(self, handlers: Handlers) -> None:
        self._network.register(self._identity.peer_id, handlers)

    def unserve(self) -> None:
        self._network.unregister(self._identity.peer_id)
