"""The Host: a peer's presence on the network.

It listens, dials (one connection per peer, reused; concurrent dials to one peer share one attempt),
authenticates every connection, serves the Router's handlers, closes idle connections and, on
``close()``, shuts everything down without leaving tasks or sockets behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import os
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeAlias

from core.net.address import PeerAddress
from core.net.admission import Admission, Attempt
from core.net.advertise import advertised, interface_ips
from core.net.bandwidth import BandwidthLimits
from core.net.certificate import issue_credentials
from core.net.config import NetConfig
from core.net.connection import CallStream, Connection
from core.net.dialing import DIAL_STAGGER, AllAttemptsFailed, dial_order, first_success
from core.net.errors import (
    AddressError,
    ConnectionClosedError,
    DeadlineExceededError,
    DialError,
    HandshakeError,
    MalformedResponseError,
    NetError,
    PeerIdMismatchError,
)
from core.net.first_bytes import when_readable
from core.net.gate import AccessGate
from core.net.hello import AGENT, PROTOCOL_VERSION, Hello
from core.net.host_access import RENEW_PASS, HostAccess
from core.net.identity import Identity
from core.net.peer_id import PeerID
from core.net.peerstore import PeerStore
from core.net.rpc import Method, Req, Resp, Router, StreamMethod
from core.net.tls import SERVER_NAME, authenticated_peer, client_context, server_context
from core.net.traffic import Traffic
from core.net.transport_cycles import forget_callbacks
from core.util.errors import WireFormatError
from core.util.memory import ReleaseSchedule
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)

Target: TypeAlias = PeerAddress | PeerID | str
RelayDialer: TypeAlias = Callable[[PeerAddress], Awaitable[asyncio.Transport]]
"""Opens a byte stream to a relayed address's peer, through its relay (``core.net.relay_client``)."""

CROWDING_LOG_INTERVAL = 10.0
"""Seconds between warnings about dropped handshakes (a flood would otherwise flood the log too)."""
INBOUND_WARNINGS = 10
"""Failed inbound handshakes logged one by one per ``CROWDING_LOG_INTERVAL``; then one summary."""

LISTEN_BACKLOG = 1024
"""Connections the kernel queues before we accept them (capped by the OS, ``somaxconn``): during a
flood of connection attempts a short queue would drop legitimate ones before we ever see them."""

INTERFACES_TTL = 30.0
"""Seconds the list of our interface addresses is reused before it is read again (laptops move)."""


# Linux and macOS have SO_REUSEPORT; Windows has not (a punching socket there binds with
# SO_REUSEADDR alone, and asyncio refuses reuse_port)
_REUSE_PORT = True if hasattr(socket, "SO_REUSEPORT") else None
_NO_IPV6 = {errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT}


class _PortTaken(Exception):
    def __init__(self, address: PeerAddress) -> None:
        super().__init__(str(address))
        self.address = address


def _check_port_free(address: PeerAddress) -> None:
    """Raise EADDRINUSE when someone listens on that port already.

    Needed because our listeners set SO_REUSEPORT: a second process of the same user could then
    bind the same port too and silently receive half of our connections. A socket bound without
    it collides with any listener there.
    """
    if not address.port:
        return
    assert address.host is not None
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        if os.name != "nt":  # POSIX: reuse a port whose old connections linger in TIME_WAIT
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        probe.bind((address.host, address.port))


class _Unwrapped(asyncio.Protocol):
    """Holds a fresh TCP connection, not reading, until TLS takes it over."""

    def __init__(self, host: Host | None = None) -> None:
        self._host = host
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        transport.pause_reading()  # the ClientHello must wait in the socket for start_tls
        if self._host is not None:
            self._host._on_inbound(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        # closed before TLS took it over (start_tls replaces this protocol)
        if self._transport is not None:
            forget_callbacks(self._transport)
            self._transport = None


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
        self._server_ctx = server_context(credentials)
        self._client_ctx = client_context(credentials)
        self._connections: dict[PeerID, list[Connection]] = {}
        self._dials: dict[PeerID, asyncio.Task[Connection]] = {}
        self._tasks = BackgroundTasks(f"host-{self.peer_id.short()}")
        self._servers: list[asyncio.Server] = []
        self._admission = Admission(
            total=self.config.max_pending_handshakes,
            per_source=self.config.max_pending_per_ip,
            per_prefix=self.config.max_pending_per_prefix,
        )
        self._closes = 0  # connections closed since the start: churn, for ``_release``
        self._release = ReleaseSchedule()
        self._crowding_logged = -CROWDING_LOG_INTERVAL
        self._inbound_window, self._inbound_warned = -CROWDING_LOG_INTERVAL, 0
        self._closed = False
        self.listen_addresses: list[PeerAddress] = []
        """Where our listeners are bound, as bound (wildcards included): ours, not for others."""
        self._interfaces: tuple[float, list[str]] | None = None
        self.confirmed_addresses: list[PeerAddress] = []
        """Public addresses a reachability check proved others can dial (set by its owner)."""
        self.relay_addresses: list[PeerAddress] = []
        """``relay:<relay>/<us>`` addresses while relays hold reservations for us."""
        self.relay_dialer: RelayDialer | None = None
        """Set by the relay client; without it relayed addresses cannot be dialed."""
        self.peerstore = PeerStore(lambda peer: bool(self._connections.get(peer)))
        self._offers: dict[str, object] = {}
        self._connection_listeners: list[Callable[[Connection], None]] = []
        self._inbound_claims: list[Callable[[asyncio.Transport], bool]] = []
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
        addresses = [PeerAddress.parse(text) for text in listen]
        for address in addresses:
            if address.is_relayed or address.host is None or address.port is None:
                raise AddressError(f"cannot listen on {address}: not a host and port")
        try:
            await self._listen_all(addresses)
        except _PortTaken as taken:
            if not port_fallback:
                raise NetError(f"cannot listen on {taken.address}: the port is taken") from None
            self._close_listeners()
            log.warning(
                "port %s is taken (another peer on this computer?): listening on a free port instead",
                taken.address.port,
            )
            await self._listen_all([a.with_port(0) for a in addresses])
        self._tasks.spawn("idle-sweeper", self._sweep_idle())
        if self._access is not None:
            self._access.start()

    async def _listen_all(self, addresses: Sequence[PeerAddress]) -> None:
        loop = asyncio.get_running_loop()
        # every listener shares the first one's port (port 0 picks it once)
        port: int | None = None
        for given in addresses:
            address = given.with_port(port) if port is not None and given.port == 0 else given
            assert address.host is not None
            assert address.port is not None
            wildcard_v6 = address.host == "::"
            try:
                _check_port_free(address)
                # SO_REUSEPORT lets a hole-punching socket bind our listening port (core.net.punch)
                server = await loop.create_server(
                    lambda: _Unwrapped(self),
                    address.host,
                    address.port,
                    reuse_port=_REUSE_PORT,
                    backlog=LISTEN_BACKLOG,
                )
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise _PortTaken(address) from None
                if wildcard_v6 and self._servers and exc.errno in _NO_IPV6:
                    log.debug("no IPv6 on this computer: listening on IPv4 only (%s)", exc)
                    continue
                raise NetError(f"cannot listen on {address}: {exc.strerror or exc}") from None
            self._servers.append(server)
            for sock in server.sockets:
                host, bound_port = sock.getsockname()[:2]
                port = bound_port if port is None else port
                self.listen_addresses.append(PeerAddress.tcp(host, bound_port, self.peer_id))

    def _close_listeners(self) -> None:
        for server in self._servers:
            server.close()
        self._servers.clear()
        self.listen_addresses.clear()

    async def close(self) -> None:
        """Stop listening, close every connection, and wait until nothing of ours is left."""
        if self._closed:
            return
        self._closed = True
        if self._access is not None:
            self._access.stop()
        for server in self._servers:
            server.close()
        await self._tasks.close()
        connections = [conn for conns in self._connections.values() for conn in conns]
        await asyncio.gather(
            *(conn.close("the peer is shutting down") for conn in connections),
            return_exceptions=True,
        )
        for server in self._servers:
            await server.wait_closed()

    async def __aenter__(self) -> Host:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def addresses(self) -> list[PeerAddress]:
        """Where others can dial us, best first, each ending in our PeerID (``core.net.advertise``).

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
        the punch fixed for us, which may be the client's (``core.net.punch``).
        """
        self._inbound_claims.append(claim)

    def release_inbound(self, claim: Callable[[asyncio.Transport], bool]) -> None:
        with contextlib.suppress(ValueError):
            self._inbound_claims.remove(claim)

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
        return await conn.call(method, request, timeout=max(1e-3, timeout - (loop.time() - start)))

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
        stream = conn.open_stream(method.name, request.to_wire(), timeout=remaining)
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
        peer, addresses = self._resolve(target)
        usable = [conn for conn in self._connections.get(peer, ()) if conn.is_usable]
        if usable:  # a direct connection before one through a relay
            return min(usable, key=lambda conn: conn.relayed_via is not None)
        if self._closed:
            raise DialError("this host is closed")
        dial = self._dials.get(peer)
        # a finished dial whose done-callback has not run yet is over: its failure (or its
        # connection, no longer usable above) must not answer a new attempt
        if dial is None or dial.done():
            dial = self._tasks.spawn(
                f"dial-{peer.short()}", self._dial_any(peer, addresses), awaited=True
            )
            self._dials[peer] = dial
            dial.add_done_callback(functools.partial(self._dial_done, peer))
        # shielded: a caller that gives up must not cancel a dial others are waiting for
        return await asyncio.shield(dial)

    def _dial_done(self, peer: PeerID, dial: asyncio.Task[Connection]) -> None:
        if self._dials.get(peer) is dial:  # not a newer dial to that peer, started meanwhile
            del self._dials[peer]

    def _resolve(self, target: Target) -> tuple[PeerID, list[PeerAddress]]:
        if isinstance(target, str):
            target = PeerAddress.parse(target)
        if isinstance(target, PeerID):
            peer = target
            addresses = list(self.peerstore.get(peer, ()))
        else:
            peer = target.require_peer()
            addresses = [target] + [a for a in self.peerstore.get(peer, ()) if a != target]
        if peer == self.peer_id:
            raise DialError("a peer cannot dial itself")
        if not addresses and not self._connections.get(peer):
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
        transport = await self._open_transport(address)
        where = "through relay " + str(address.relay_id) if address.is_relayed else None
        return await self.secure_outbound(
            transport, expected, where=where, relayed_via=address.relay_id
        )

    async def _open_transport(self, address: PeerAddress) -> asyncio.Transport:
        """A byte stream to ``address``: a TCP connection, or a circuit through a relay."""
        if address.is_relayed:
            if self.relay_dialer is None:
                raise DialError("this peer does not use relays")
            return await self.relay_dialer(address)
        if address.host is None or address.port is None:
            raise DialError("not a host and port")
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.config.dial_timeout):
                transport, _ = await loop.create_connection(_Unwrapped, address.host, address.port)
        except TimeoutError:
            raise DialError(f"no answer within {self.config.dial_timeout:g} s") from None
        except OSError as exc:
            raise DialError(exc.strerror or str(exc)) from None
        assert isinstance(transport, asyncio.Transport)
        return transport

    async def dial_fresh(self, address: PeerAddress, expected: PeerID) -> Connection:
        """A new connection to ``address`` that no call of ours will reuse; the caller closes it.

        For checks that must not ride on an existing connection (a reachability dial-back).
        """
        transport = await self._open_transport(address)
        return await self.secure_outbound(transport, expected, register=False)

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
        loop = asyncio.get_running_loop()
        conn = self._new_connection(initiator=True, transport=transport, relayed_via=relayed_via)
        try:
            tls = await loop.start_tls(
                transport,
                conn,
                self._client_ctx,
                server_hostname=SERVER_NAME,
                ssl_handshake_timeout=self.config.handshake_timeout,
                ssl_shutdown_timeout=self.config.close_grace,
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
            if self.access is not None:
                await conn.wait_ready()
        except BaseException:
            conn.abort("the dial was given up", level=logging.DEBUG)
            raise
        if register:
            self._register(conn)
        return conn

    def _on_inbound(self, transport: asyncio.Transport) -> None:
        if not self._closed and any(claim(transport) for claim in self._inbound_claims):
            return
        self.accept_transport(transport)

    def accept_transport(
        self, transport: asyncio.Transport, *, relayed_via: PeerID | None = None
    ) -> bool:
        """Serve TLS over a new inbound byte stream (a TCP connection or a relay's circuit).

        False when it was refused at once (the host is closing). Too many handshakes at once from
        its address, its network or in all drop an older one instead (``core.net.admission``). A
        TCP connection starts TLS only once its first bytes arrive (``core.net.first_bytes``); the
        whole handshake, silence included, has ``handshake_timeout``.
        """
        if self._closed:
            transport.abort()
            return False
        peername = transport.get_extra_info("peername")
        source = f"relay:{relayed_via}" if relayed_via is not None or not peername else peername[0]
        dropped_before = self._admission.dropped
        attempt = self._admission.admit(str(source))
        if self._admission.dropped != dropped_before:
            self._note_crowding(attempt.prefix)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.handshake_timeout
        where = peername or f"relay-{relayed_via}"
        if relayed_via is not None:
            self._handshake(attempt, transport, relayed_via, deadline)
            return True

        def speaks(spoke: bool) -> None:
            timer.cancel()
            if spoke:
                self._handshake(attempt, transport, relayed_via, deadline)
            else:  # it hung up without a word: no TLS to start, nothing to log
                transport.abort()
                self._admission.release(attempt)

        def stays_silent() -> None:
            self._warn_inbound(
                "dropped a connection from %s: TLS handshake failed: it sent nothing within %g s",
                where,
                self.config.handshake_timeout,
            )
            drop()
            self._admission.release(attempt)

        waiting = when_readable(transport, speaks)
        if waiting is None:
            self._handshake(attempt, transport, relayed_via, deadline)
            return True
        timer = loop.call_at(deadline, stays_silent)

        def drop() -> None:
            timer.cancel()
            waiting.stop()
            transport.abort()

        attempt.drop = drop
        attempt.spoken = waiting.spoken
        return True

    def _handshake(
        self,
        attempt: Attempt,
        transport: asyncio.Transport,
        relayed_via: PeerID | None,
        deadline: float,
    ) -> None:
        """Run TLS and the hello for an admitted attempt that has spoken (or cannot be watched)."""
        self._admission.spoke(attempt)
        where = transport.get_extra_info("peername") or f"relay-{relayed_via}"
        task = self._tasks.spawn(f"accept-{where}", self._accept(transport, relayed_via, deadline))

        def drop() -> None:
            transport.abort()
            task.cancel()

        attempt.drop = drop
        task.add_done_callback(lambda _: self._admission.release(attempt))

    def _warn_inbound(self, text: str, *args: object) -> None:
        """A warning about one failed inbound handshake, at most a few per interval (floods)."""
        now = time.monotonic()
        if now - self._inbound_window >= CROWDING_LOG_INTERVAL:
            self._inbound_window, self._inbound_warned = now, 0
        self._inbound_warned += 1
        if self._inbound_warned <= INBOUND_WARNINGS:
            log.warning(text, *args)
        elif self._inbound_warned == INBOUND_WARNINGS + 1:
            log.warning(
                "more inbound connections are failing their handshake: not logging each for %g s",
                CROWDING_LOG_INTERVAL,
            )

    def _note_crowding(self, prefix: str) -> None:
        # at most one line per interval: during a flood this runs for every connection
        now = time.monotonic()
        if now - self._crowding_logged >= CROWDING_LOG_INTERVAL:
            self._crowding_logged = now
            log.warning(
                "too many handshakes at once (%d pending, the latest from %s): dropping the oldest "
                "of the most crowded source; %d dropped so far",
                self._admission.pending,
                prefix,
                self._admission.dropped,
            )

    async def _accept(
        self, transport: asyncio.Transport, relayed_via: PeerID | None, deadline: float
    ) -> None:
        where = transport.get_extra_info("peername") or f"relay {relayed_via}"
        conn = self._new_connection(initiator=False, transport=transport, relayed_via=relayed_via)
        # one deadline for TLS and the hello together: a stranger cannot hold a slot for longer
        try:
            async with asyncio.timeout_at(deadline):
                tls = await self._accept_tls(transport, conn, where)
                if tls is None:
                    return
                try:
                    peer = authenticated_peer(tls.get_extra_info("ssl_object"))
                    if peer == self.peer_id:
                        raise HandshakeError("it is ourselves (our own address, dialed back)")
                except HandshakeError as exc:
                    conn.abort(f"identity check failed: {exc}", transport=tls)
                    return
                try:
                    conn.attach(tls, peer)
                    await conn.wait_ready()
                except HandshakeError:
                    return  # wait_ready logged and closed it
                except ConnectionClosedError as exc:
                    # the dialer hung up mid-handshake (a dial-back prober that had its answer, a
                    # lost race in parallel dialing): nothing of ours failed
                    log.debug(
                        "inbound connection from %s ended in its handshake: %s", peer.short(), exc
                    )
                    return
                except BaseException:
                    conn.abort("the host is closing", level=logging.DEBUG, transport=tls)
                    raise
        except TimeoutError:
            late = "no hello" if conn.peer is not None else "TLS handshake failed: no handshake"
            reason = f"{late} within {self.config.handshake_timeout:g} s"
            self._warn_inbound("dropped a connection from %s: %s", where, reason)
            conn.abort(reason, level=logging.DEBUG, transport=transport)
            return
        self._register(conn)

    async def _accept_tls(
        self, transport: asyncio.Transport, conn: Connection, where: object
    ) -> asyncio.Transport | None:
        loop = asyncio.get_running_loop()
        try:
            tls = await loop.start_tls(
                transport,
                conn,
                self._server_ctx,
                server_side=True,
                ssl_handshake_timeout=self.config.handshake_timeout,
                ssl_shutdown_timeout=self.config.close_grace,
            )
        except (OSError, ssl.SSLError) as exc:
            self._warn_inbound("dropped a connection from %s: TLS handshake failed: %s", where, exc)
            transport.abort()
            return None
        except BaseException:
            transport.abort()
            raise
        assert tls is not None
        return tls

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
            churn = self._closes + self._admission.dropped
            if self._release.due(churn, now):
                self._release.release(churn, now)
