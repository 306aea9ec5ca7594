"""The Host's outbound half: reaching a peer, over the connection we have or a new one.

Concurrent callers share a dial to a peer, over every address we know for it in ``dialing``'s order
with staggered parallel attempts; a TCP connection or a relay's circuit, then TLS as the client, the
proof that the expected peer answers, and in a moderated project its hello.

A caller joins a dial under way only if that dial tries every address the caller knows; otherwise
it starts its own. The DHT and the meetings may still dial a home server at the LAN address it
first announced while a trainer calls it at its relay address; joining such a dial, the call would
fail with the LAN address's error without ever trying the relay.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeAlias

from core.net.config import NetConfig
from core.net.errors import DialError, HandshakeError, NetError, PeerIdMismatchError
from core.net.host.address import PeerAddress
from core.net.host.dialing import DIAL_STAGGER, AllAttemptsFailed, dial_order, first_success
from core.net.host.inbound import NewConnection, Unwrapped
from core.net.host.peerstore import PeerStore
from core.net.host.tls import SERVER_NAME, authenticated_peer
from core.net.wire.connection import Connection
from core.trust.peer_id import PeerID
from core.util.tasks import BackgroundTasks

Target: TypeAlias = PeerAddress | PeerID | str
RelayDialer: TypeAlias = Callable[[PeerAddress], Awaitable[asyncio.Transport]]
"""Opens a byte stream to a relayed address's peer, through its relay (``core.net.relay.client``)."""


@dataclass(frozen=True, slots=True, eq=False)
class _Dial:
    """A dial under way and the addresses it tries."""

    task: asyncio.Task[Connection]
    addresses: frozenset[PeerAddress]


class Outbound:
    """Dials peers: callers share a dial that tries their addresses; first address to answer wins."""

    def __init__(
        self,
        *,
        peer_id: PeerID,
        config: NetConfig,
        client_ctx: ssl.SSLContext,
        tasks: BackgroundTasks,
        peerstore: PeerStore,
        new_connection: NewConnection,
        register: Callable[[Connection], None],
        connections: Callable[[PeerID], list[Connection]],
        waits_for_hello: Callable[[], bool],
    ) -> None:
        self._peer_id = peer_id
        self._config = config
        self._client_ctx = client_ctx
        self._tasks = tasks
        self._peerstore = peerstore
        self._new_connection = new_connection
        self._register = register
        self._connections = connections
        self._waits_for_hello = waits_for_hello
        self._dials: dict[PeerID, list[_Dial]] = {}
        self.closed = False
        self.relay_dialer: RelayDialer | None = None
        """Set by the relay client; without it relayed addresses cannot be dialed."""

    async def connect(self, target: Target) -> Connection:
        """A usable connection to the peer, reusing one if it exists."""
        peer, addresses = self._resolve(target)
        usable = [conn for conn in self._connections(peer) if conn.is_usable]
        if usable:  # a direct connection before one through a relay
            return min(usable, key=lambda conn: conn.relayed_via is not None)
        if self.closed:
            raise DialError("this host is closed")
        wanted = frozenset(addresses)
        # a finished dial whose done-callback has not run yet is over: its failure (or its
        # connection, no longer usable above) must not answer a new attempt
        joined = next(
            (
                dial.task
                for dial in self._dials.get(peer, ())
                if not dial.task.done() and wanted <= dial.addresses
            ),
            None,
        )
        if joined is None:
            joined = self._tasks.spawn(
                f"dial-{peer.short()}", self._dial_any(peer, addresses), awaited=True
            )
            self._dials.setdefault(peer, []).append(_Dial(joined, wanted))
            joined.add_done_callback(functools.partial(self._dial_done, peer))
        # shielded: a caller that gives up must not cancel a dial others are waiting for
        return await asyncio.shield(joined)

    def _dial_done(self, peer: PeerID, _task: asyncio.Task[Connection]) -> None:
        running = [other for other in self._dials.get(peer, ()) if not other.task.done()]
        if running:
            self._dials[peer] = running
        else:
            self._dials.pop(peer, None)

    def _resolve(self, target: Target) -> tuple[PeerID, list[PeerAddress]]:
        if isinstance(target, str):
            target = PeerAddress.parse(target)
        if isinstance(target, PeerID):
            peer = target
            addresses = list(self._peerstore.get(peer, ()))
        else:
            peer = target.require_peer()
            addresses = [target] + [a for a in self._peerstore.get(peer, ()) if a != target]
        if peer == self._peer_id:
            raise DialError("a peer cannot dial itself")
        if not addresses and not self._connections(peer):
            raise DialError(f"no known address for {peer}")
        return peer, addresses

    async def _dial_any(self, peer: PeerID, addresses: list[PeerAddress]) -> Connection:
        ordered = dial_order(addresses)
        attempts: list[Callable[[], Awaitable[Connection]]] = [
            functools.partial(self._dial, address, peer) for address in ordered
        ]

        async def discard(extra: Connection) -> None:
            await extra.close("another address of this peer answered first")

        try:
            return await first_success(attempts, stagger=DIAL_STAGGER, discard=discard)
        except AllAttemptsFailed as failed:
            errors = failed.errors
        if len(ordered) == 1 and isinstance(errors[0], PeerIdMismatchError):
            raise errors[0]
        reasons = []
        for address, error in zip(ordered, errors, strict=True):
            if isinstance(error, PeerIdMismatchError):
                reasons.append(f"{address}: another peer answers there")
            elif isinstance(error, NetError):
                reasons.append(f"{address}: {error}")
            else:
                raise error  # not a network failure: a bug, or a cancellation
        raise DialError(f"could not connect to {peer}: " + "; ".join(reasons))

    async def _dial(self, address: PeerAddress, expected: PeerID) -> Connection:
        transport = await self.open_transport(address)
        where = "through relay " + str(address.relay_id) if address.is_relayed else None
        return await self.secure(transport, expected, where=where, relayed_via=address.relay_id)

    async def open_transport(self, address: PeerAddress) -> asyncio.Transport:
        """A byte stream to ``address``: a TCP connection, or a circuit through a relay."""
        if address.is_relayed:
            if self.relay_dialer is None:
                raise DialError("this peer does not use relays")
            return await self.relay_dialer(address)
        if address.host is None or address.port is None:
            raise DialError("not a host and port")
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._config.dial_timeout):
                transport, _ = await loop.create_connection(Unwrapped, address.host, address.port)
        except TimeoutError:
            raise DialError(f"no answer within {self._config.dial_timeout:g} s") from None
        except OSError as exc:
            raise DialError(exc.strerror or str(exc)) from None
        assert isinstance(transport, asyncio.Transport)
        return transport

    async def secure(
        self,
        transport: asyncio.Transport,
        expected: PeerID,
        *,
        where: str | None = None,
        relayed_via: PeerID | None = None,
        register: bool = True,
    ) -> Connection:
        """Run TLS as the client over ``transport``; see ``Host.secure_outbound``."""
        loop = asyncio.get_running_loop()
        conn = self._new_connection(initiator=True, transport=transport, relayed_via=relayed_via)
        try:
            tls = await loop.start_tls(
                transport,
                conn,
                self._client_ctx,
                server_hostname=SERVER_NAME,
                ssl_handshake_timeout=self._config.handshake_timeout,
                ssl_shutdown_timeout=self._config.close_grace,
            )
        except (OSError, ssl.SSLError, TimeoutError) as exc:
            transport.abort()
            raise HandshakeError(f"TLS handshake failed: {exc}") from None
        except BaseException:
            transport.abort()  # cancelled (another address won the race): leave no socket behind
            raise
        assert tls is not None
        try:
            peer = authenticated_peer(tls.get_extra_info("ssl_object"))
            if peer != expected:
                at = where or conn.describe()
                raise PeerIdMismatchError(
                    f"dialed {expected} at {at} but met {peer} there; "
                    "the address is stale or belongs to someone else"
                )
            conn.attach(tls, peer)
        except BaseException as exc:
            conn.abort(f"dial failed: {exc}", level=logging.DEBUG, transport=tls)
            raise
        # Open projects do not wait for the peer's hello (our first request follows our hello at
        # once); in a moderated one the peer's pass is checked before anything is sent to it.
        try:
            if self._waits_for_hello():
                await conn.wait_ready()
        except BaseException:
            conn.abort("the dial was given up", level=logging.DEBUG)
            raise
        if register:
            self._register(conn)
        return conn
