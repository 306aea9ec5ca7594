"""How a DHT node reaches others: the ``DHTTransport`` interface and its implementation over a Host.

Keeping the node behind this small interface lets the same node code run on real TLS connections and
on the in-memory network (``memory``) used to simulate a thousand nodes in one test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from core.dht.messages import (
    FIND,
    PING,
    STORE,
    FindRequest,
    FindResponse,
    PingRequest,
    PingResponse,
    StoreRequest,
    StoreResponse,
)
from core.dht.routing import Contact
from core.net.host.address import PeerAddress
from core.net.host.host import Host
from core.net.wire.connection import Connection
from core.net.wire.rpc import CallContext
from core.trust.identity import Identity
from core.trust.peer_id import PeerID


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request, where it says it can be reached, and where it came from."""

    peer: PeerID
    addresses: tuple[PeerAddress, ...]
    ip: str | None = None
    """The remote address seen on the connection (not claimed by the caller, so a storage quota can
    count by network); None when it came through a relay, whose circuits hide it."""


class Handlers(Protocol):
    async def on_ping(self, caller: Caller, request: PingRequest) -> PingResponse: ...

    async def on_find(self, caller: Caller, request: FindRequest) -> FindResponse: ...

    async def on_store(self, caller: Caller, request: StoreRequest) -> StoreResponse: ...


class DHTTransport(Protocol):
    @property
    def identity(self) -> Identity: ...

    def addresses(self) -> list[PeerAddress]: ...

    async def ping(
        self, contact: Contact, request: PingRequest, timeout: float
    ) -> PingResponse: ...

    async def find(
        self, contact: Contact, request: FindRequest, timeout: float
    ) -> FindResponse: ...

    async def store(
        self, contact: Contact, request: StoreRequest, timeout: float
    ) -> StoreResponse: ...

    def serve(self, handlers: Handlers) -> None: ...

    def unserve(self) -> None: ...


class HostTransport:
    """The DHT's calls as typed RPCs on a Host (one TLS connection per peer, reused)."""

    def __init__(self, host: Host) -> None:
        self._host = host

    @property
    def identity(self) -> Identity:
        return self._host.identity

    def addresses(self) -> list[PeerAddress]:
        return self._host.addresses

    def _remember(self, contact: Contact) -> None:
        if contact.addresses and contact.peer_id not in self._host.peerstore:
            self._host.add_addresses(contact.peer_id, contact.addresses)

    async def ping(self, contact: Contact, request: PingRequest, timeout: float) -> PingResponse:
        self._remember(contact)
        return await self._host.call(contact.peer_id, PING, request, timeout=timeout)

    async def find(self, contact: Contact, request: FindRequest, timeout: float) -> FindResponse:
        self._remember(contact)
        return await self._host.call(contact.peer_id, FIND, request, timeout=timeout)

    async def store(self, contact: Contact, request: StoreRequest, timeout: float) -> StoreResponse:
        self._remember(contact)
        return await self._host.call(contact.peer_id, STORE, request, timeout=timeout)

    def _caller(self, ctx: CallContext) -> Caller:
        conn = ctx.connection
        ip = None
        # a Host's calls run on a Connection; a relayed one's socket address is our own socket pair
        if isinstance(conn, Connection) and conn.relayed_via is None and conn.remote_address:
            ip = conn.remote_address[0]
        return Caller(ctx.peer, tuple(self._host.peerstore.get(ctx.peer, ())), ip)

    def serve(self, handlers: Handlers) -> None:
        async def ping(ctx: CallContext, request: PingRequest) -> PingResponse:
            return await handlers.on_ping(self._caller(ctx), request)

        async def find(ctx: CallContext, request: FindRequest) -> FindResponse:
            return await handlers.on_find(self._caller(ctx), request)

        async def store(ctx: CallContext, request: StoreRequest) -> StoreResponse:
            return await handlers.on_store(self._caller(ctx), request)

        self._host.router.add(PING, ping)
        self._host.router.add(FIND, find)
        self._host.router.add(STORE, store)

    def unserve(self) -> None:
        for method in (PING, FIND, STORE):
            self._host.router.remove(method.name)
