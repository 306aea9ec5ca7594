"""The Host: a peer's presence on the network.

It listens, dials (one connection per peer, reused; concurrent dials to one peer share one attempt),
authenticates every connection, serves the Router's handlers, closes idle connections and, on
``close()``, shuts everything down without leaving tasks or sockets behind.

The way in is ``inbound`` and the way out ``outbound``; the Host keeps what both share: the
connections by peer, what our hello says, the calls, and closing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from typing import Any, Generic

from core.net.config import NetConfig
from core.net.errors import DeadlineExceededError, MalformedResponseError
from core.net.host.access import RENEW_PASS, HostAccess
from core.net.host.address import PeerAddress
from core.net.host.advertise import advertised, interface_ips
from core.net.host.certificate import issue_credentials
from core.net.host.gate import AccessGate
from core.net.host.inbound import Inbound
from core.net.host.outbound import Outbound, RelayDialer, Target
from core.net.host.peerstore import PeerStore
from core.net.host.tls import client_context, server_context
from core.net.wire.bandwidth import BandwidthLimits
from core.net.wire.connection import CallStream, Connection
from core.net.wire.hello import AGENT, PROTOCOL_VERSION, Hello
from core.net.wire.rpc import Method, Req, Resp, Router, StreamMethod
from core.net.wire.traffic import Traffic
from core.trust.identity import Identity
from core.trust.peer_id import PeerID
from core.util.errors import WireFormatError
from core.util.memory import ReleaseSchedule
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)

INTERFACES_TTL = 30.0
"""Seconds the list of our interface addresses is reused before it is read again (laptops move)."""


class StreamCall(Generic[Resp]):
    """A streaming call in progress: its ``stream`` and its typed final ``result()``."""

    def __init__(self, stream: CallStream, method: StreamMethod[Any, Resp]) -> None:
        self.stream = stream
        self._method = method

    async def result(self) -> Resp:
        return _decode_response(
            self._method.response, self._method.name, await self.stream.result()
        )


def _decode_response(cls: type[Resp], name: str, raw: Any) -> Resp:
    try:
        return cls.from_wire(raw)
    except WireFormatError as exc:
        raise MalformedResponseError(f"malformed response to {name}: {exc}", remote=True) from None


class Host:
    """Listens, dials, authenticates and serves calls for one identity."""

    def __init__(
        self,
        identity: Identity,
        config: NetConfig | None = None,
        *,
        access: AccessGate | None = None,
    ) -> None:
        self.identity = identity
        self.peer_id = identity.peer_id
        self.config = config or NetConfig()
        self.router = Router()
        credentials = issue_credentials(identity)
        self._connections: dict[PeerID, list[Connection]] = {}
        self._tasks = BackgroundTasks(f"host-{self.peer_id.short()}")
        self._closes = 0  # connections closed since the start: churn, for ``_release``
        self._release = ReleaseSchedule()
        self._closed = False
        self._interfaces: tuple[float, list[str]] | None = None
        self.confirmed_addresses: list[PeerAddress] = []
        """Public addresses a reachability check proved others can dial (set by its owner)."""
        self.relay_addresses: list[PeerAddress] = []
        """``relay:<relay>/<us>`` addresses while relays hold reservations for us."""
        self.peerstore = PeerStore(lambda peer: bool(self._connections.get(peer)))
        self._offers: dict[str, object] = {}
        self._connection_listeners: list[Callable[[Connection], None]] = []
        self.bandwidth = BandwidthLimits(self.config.upload_limit, self.config.download_limit)
        self.traffic = Traffic()
        self.access = access
        self._access: HostAccess | None = None
        if access is not None:
            if access.me != self.peer_id:
                raise ValueError("the access gate belongs to another identity")
            self._access = HostAccess(
                access, self.connections, self._spawn, self.config.call_timeout
            )
            self.router.add_raw(RENEW_PASS, self._access.on_renewed_pass)
        self.inbound = Inbound(
            peer_id=self.peer_id,
            config=self.config,
            server_ctx=server_context(credentials),
            tasks=self._tasks,
            new_connection=self._new_connection,
            register=self._register,
        )
        self.outbound = Outbound(
            peer_id=self.peer_id,
            config=self.config,
            client_ctx=client_context(credentials),
            tasks=self._tasks,
            peerstore=self.peerstore,
            new_connection=self._new_connection,
            register=self._register,
            connections=self.connections,
            waits_for_hello=lambda: self.access is not None,
        )

    @property
    def listen_addresses(self) -> list[PeerAddress]:
        """Where our listeners are bound, as bound (wildcards included): ours, not for others."""
        return self.inbound.listen_addresses

    @property
    def relay_dialer(self) -> RelayDialer | None:
        """Set by the relay client; without it relayed addresses cannot be dialed."""
        return self.outbound.relay_dialer

    @relay_dialer.setter
    def relay_dialer(self, dialer: RelayDialer | None) -> None:
        self.outbound.relay_dialer = dialer

    def set_bandwidth_limits(self, upload: float | None, download: float | None) -> None:
        """Bytes per second over all connections, effective at once (None: unlimited)."""
        self.bandwidth.set(upload, download)

    # ---- lifecycle -------------------------------------------------------------------------------

    async def start(
        self, listen: Sequence[str] = ("/ip4/127.0.0.1/tcp/0",), *, port_fallback: bool = False
    ) -> None:
        """Listen on each address (port 0 picks a free port); start the idle sweeper.

        With ``port_fallback`` a taken port is replaced by a free one (said in the log), the same
        for every address; an IPv6 wildcard on a computer without IPv6 is skipped.
        """
        await self.inbound.listen(listen, port_fallback=port_fallback)
        self._tasks.spawn("idle-sweeper", self._sweep_idle())
        if self._access is not None:
            self._access.start()

    async def close(self) -> None:
        """Stop listening, close every connection, and wait until nothing of ours is left."""
        if self._closed:
            return
        self._closed = True
        self.outbound.closed = True
        if self._access is not None:
            self._access.stop()
        self.inbound.stop()
        await self._tasks.close()
        connections = [conn for conns in self._connections.values() for conn in conns]
        await asyncio.gather(
            *(conn.close("the peer is shutting down") for conn in connections),
            return_exceptions=True,
        )
        await self.inbound.wait_closed()

    async def __aenter__(self) -> Host:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def addresses(self) -> list[PeerAddress]:
        """Where others can dial us, best first, each ending in our PeerID (``core.net.host.advertise``).

        Never a loopback, unspecified or link-local address, except from a Host that listens on
        loopback alone (a swarm inside one computer).
        """
        return advertised(
            self.peer_id,
            self.listen_addresses,
            interfaces=self._interface_ips,
            confirmed=self.confirmed_addresses,
            relays=self.relay_addresses,
        )

    @property
    def listening_port(self) -> int | None:
        """The port our listeners share (None when not listening)."""
        return self.listen_addresses[0].port if self.listen_addresses else None

    def _interface_ips(self) -> list[str]:
        now = time.monotonic()
        if self._interfaces is None or now - self._interfaces[0] > INTERFACES_TTL:
            self._interfaces = (now, interface_ips())
        return self._interfaces[1]

    def offer(self, name: str, value: object) -> None:
        """Tell every peer we greet from now on that we offer ``name`` (a hello extension).

        Services announce themselves so (``relay``, ``dialback``); ``pass`` is reserved.
        """
        if name == "pass":
            raise ValueError("the access pass is not an offer")
        self._offers[name] = value

    def withdraw(self, name: str) -> None:
        self._offers.pop(name, None)

    def on_connection(self, listener: Callable[[Connection], None]) -> None:
        """Call ``listener`` with every new authenticated connection, either direction."""
        self._connection_listeners.append(listener)

    def remove_connection_listener(self, listener: Callable[[Connection], None]) -> None:
        """Stop calling ``listener`` (a service that stops; one that restarts adds it again)."""
        with contextlib.suppress(ValueError):
            self._connection_listeners.remove(listener)

    def claim_inbound(self, claim: Callable[[asyncio.Transport], bool]) -> None:
        """Offer each new inbound TCP connection to ``claim`` before we serve TLS on it.

        ``claim`` returns True when it takes the transport over (then it runs TLS itself). Hole
        punching needs it: a punched connection that reaches our listener must get the TLS role
        the punch fixed for us, which may be the client's (``core.net.punch.puncher``).
        """
        self.inbound.claim(claim)

    def release_inbound(self, claim: Callable[[asyncio.Transport], bool]) -> None:
        self.inbound.release(claim)

    def connections(self, peer: PeerID | None = None) -> list[Connection]:
        if peer is not None:
            return list(self._connections.get(peer, ()))
        return [conn for conns in self._connections.values() for conn in conns]

    def add_addresses(self, peer: PeerID, addresses: Sequence[PeerAddress]) -> None:
        """Remember where ``peer`` can be dialed, so calls can name it by PeerID alone."""
        self.peerstore.add(peer, addresses)

    # ---- calls -----------------------------------------------------------------------------------

    async def call(
        self,
        target: Target,
        method: Method[Req, Resp],
        request: Req,
        *,
        timeout: float | None = None,
    ) -> Resp:
        """Call a typed unary method; ``timeout`` covers dialing too."""
        raw = await self.call_raw(target, method.name, request.to_wire(), timeout=timeout)
        return _decode_response(method.response, method.name, raw)

    async def call_raw(
        self, target: Target, method: str, request: Any, *, timeout: float | None = None
    ) -> Any:
        timeout = self.config.call_timeout if timeout is None else timeout
        loop = asyncio.get_running_loop()
        start = loop.time()
        conn = await self._connect_within(target, timeout)
        # the connection gets what dialing left of the deadline, and names the caller's
        remaining = max(1e-3, timeout - (loop.time() - start))
        return await conn.call(method, request, timeout=remaining, deadline=timeout)

    @asynccontextmanager
    async def open_stream(
        self,
        target: Target,
        method: StreamMethod[Req, Resp],
        request: Req,
        *,
        timeout: float | None = None,
    ) -> AsyncIterator[StreamCall[Resp]]:
        """Open a streaming call; leaving the block before the result came cancels it."""
        timeout = self.config.call_timeout if timeout is None else timeout
        loop = asyncio.get_running_loop()
        start = loop.time()
        conn = await self._connect_within(target, timeout)
        remaining = max(1e-3, timeout - (loop.time() - start))
        stream = conn.open_stream(
            method.name, request.to_wire(), timeout=remaining, deadline=timeout
        )
        try:
            yield StreamCall(stream, method)
        finally:
            if not stream.done:
                stream.cancel()

    async def _connect_within(self, target: Target, timeout: float) -> Connection:
        try:
            async with asyncio.timeout(timeout):
                return await self.connect(target)
        except TimeoutError:
            raise DeadlineExceededError(
                f"could not connect to {target} within {timeout:g} s"
            ) from None

    # ---- connecting ------------------------------------------------------------------------------

    async def connect(self, target: Target) -> Connection:
        """A usable connection to the peer, reusing one if it exists."""
        return await self.outbound.connect(target)

    async def dial_fresh(self, address: PeerAddress, expected: PeerID) -> Connection:
        """A new connection to ``address`` that no call of ours will reuse; the caller closes it.

        For checks that must not ride on an existing connection (a reachability dial-back).
        """
        transport = await self.outbound.open_transport(address)
        return await self.outbound.secure(transport, expected, register=False)

    async def secure_outbound(
        self,
        transport: asyncio.Transport,
        expected: PeerID,
        *,
        where: str | None = None,
        relayed_via: PeerID | None = None,
        register: bool = True,
    ) -> Connection:
        """Run TLS as the client over ``transport`` and prove that ``expected`` answers."""
        return await self.outbound.secure(
            transport, expected, where=where, relayed_via=relayed_via, register=register
        )

    def accept_transport(
        self, transport: asyncio.Transport, *, relayed_via: PeerID | None = None
    ) -> bool:
        """Serve TLS over a new inbound byte stream (a TCP connection or a relay's circuit).

        False when it was refused at once (the host is closing). Too many handshakes at once from
        its address, its network or in all drop an older one instead (``core.net.host.admission``).
        A TCP connection starts TLS only once its first bytes arrive (``core.net.host.first_bytes``);
        the whole handshake, silence included, has ``handshake_timeout``.
        """
        return self.inbound.accept(transport, relayed_via=relayed_via)

    def _new_connection(
        self, *, initiator: bool, transport: asyncio.Transport, relayed_via: PeerID | None = None
    ) -> Connection:
        size = self.config.socket_buffer_bytes
        sock = transport.get_extra_info("socket")
        if size and sock is not None and relayed_via is None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
        peername = transport.get_extra_info("peername") if relayed_via is None else None
        # A relayed connection's bytes already cross our connection to the relay, which counts
        # and paces them: counting or pacing them again here would charge them twice.
        relayed = relayed_via is not None
        return Connection(
            config=self.config,
            router=self.router,
            bandwidth=BandwidthLimits() if relayed else self.bandwidth,
            traffic=Traffic() if relayed else self.traffic,
            relayed_via=relayed_via,
            initiator=initiator,
            remote_address=(str(peername[0]), int(peername[1])) if peername else None,
            hello=self._hello_for,
            on_hello=self._learn_addresses,
            on_closed=self._on_closed,
            admit=None if self._access is None else self._access.admit,
        )

    def _hello_for(self, conn: Connection) -> Hello:
        observed = PeerAddress.from_socket_address(conn.remote_address)
        return Hello(
            protocol=PROTOCOL_VERSION,
            agent=AGENT,
            window=self.config.stream_window_bytes,
            listen=[str(address) for address in self.addresses],
            observed=str(observed) if observed else None,
            extensions=dict(self._offers)
            if self.access is None
            else {**self._offers, "pass": self.access.presented()},
        )

    def _spawn(self, name: str, coro: Coroutine[Any, Any, None]) -> None:
        if not self._closed:
            self._tasks.spawn(name, coro)
        else:
            coro.close()

    def _register(self, conn: Connection) -> None:
        assert conn.peer is not None
        if conn.is_closed:
            return
        if self._closed:
            conn.abort("the host is closing", level=logging.DEBUG)
            return
        if not self._make_room():
            conn.abort(
                f"refused: all {self.config.max_connections} connections are busy",
                level=logging.WARNING,
            )
            return
        self._connections.setdefault(conn.peer, []).append(conn)
        log.debug("connected to %r", conn)
        for listener in self._connection_listeners:
            listener(conn)

    def _make_room(self) -> bool:
        """Below ``max_connections``, or made so by closing the connection idle longest."""
        conns = self.connections()
        if len(conns) < self.config.max_connections:
            return True
        now = asyncio.get_running_loop().time()
        idle = [conn for conn in conns if not conn.active_calls and not conn.closing]
        if not idle:
            return False
        oldest = max(idle, key=lambda conn: conn.idle_for(now))
        self._tasks.spawn(
            f"close-for-room-{oldest.peer}", oldest.close("making room for a new peer")
        )
        self._on_closed(oldest)  # it no longer counts, though its goodbye takes a moment
        return True

    def _learn_addresses(self, conn: Connection) -> None:
        """The peer's hello says where it listens: remember it for dialing it by PeerID later."""
        assert conn.peer is not None
        assert conn.remote_hello is not None
        learned = PeerAddress.of_peer(conn.peer, conn.remote_hello.listen)
        if learned:
            self.add_addresses(conn.peer, learned)

    def _on_closed(self, conn: Connection) -> None:
        self._closes += 1
        if conn.peer is None:
            return
        conns = self._connections.get(conn.peer)
        if conns and conn in conns:
            conns.remove(conn)
            if not conns:
                del self._connections[conn.peer]

    async def _sweep_idle(self) -> None:
        limit = self.config.idle_timeout
        interval = max(0.05, min(limit / 4, 5.0))
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            now = loop.time()
            for conn in self.connections():
                if conn.is_usable and conn.idle_for(now) >= limit:
                    self._tasks.spawn(f"close-idle-{conn.peer}", conn.close("idle"))
            # connections come and go (newcomers, a flood): hand the memory they took back to the OS
            # in a task of its own, so that neither the loop nor this sweep waits for the trim (the
            # task starts before this sweep's next turn, and is not due again until it ends)
            churn = self._closes + self.inbound.admission.dropped
            if self._release.due(churn, now):
                self._tasks.spawn("release-memory", self._release.release(churn, now))
