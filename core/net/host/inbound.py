"""The Host's inbound half: its listening sockets, and the way of every connection it accepts.

A new TCP connection is first offered to the claims (hole punching takes its own), then admitted
within the handshake bounds (``admission``), waits for its first bytes (``first_bytes``), runs TLS as
the server, proves who it is and exchanges hellos under one deadline, and is handed to the Host's
registry. Nothing here knows about calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import ssl
import time
from collections.abc import Callable, Sequence

from core.net.config import NetConfig
from core.net.errors import AddressError, ConnectionClosedError, HandshakeError, NetError
from core.net.host.address import PeerAddress
from core.net.host.admission import Admission, Attempt
from core.net.host.first_bytes import when_readable
from core.net.host.tls import authenticated_peer
from core.net.host.transport_cycles import forget_callbacks
from core.net.wire.connection import Connection
from core.trust.peer_id import PeerID
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)

CROWDING_LOG_INTERVAL = 10.0
"""Seconds between warnings about dropped handshakes (a flood would otherwise flood the log too)."""
INBOUND_WARNINGS = 10
"""Failed inbound handshakes logged one by one per ``CROWDING_LOG_INTERVAL``; then one summary."""

LISTEN_BACKLOG = 1024
"""Connections the kernel queues before we accept them (capped by the OS, ``somaxconn``): during a
flood of connection attempts a short queue would drop legitimate ones before we ever see them."""

# Linux and macOS have SO_REUSEPORT; Windows has not (a punching socket there binds with
# SO_REUSEADDR alone, and asyncio refuses reuse_port)
_REUSE_PORT = True if hasattr(socket, "SO_REUSEPORT") else None
_NO_IPV6 = {errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT}

NewConnection = Callable[..., Connection]
"""The Host's factory: ``(initiator=, transport=, relayed_via=)`` to an unattached Connection."""


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


class Unwrapped(asyncio.Protocol):
    """Holds a fresh TCP connection, not reading, until TLS takes it over."""

    def __init__(self, inbound: Inbound | None = None) -> None:
        self._inbound = inbound
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        transport.pause_reading()  # the ClientHello must wait in the socket for start_tls
        if self._inbound is not None:
            self._inbound.arrived(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        # closed before TLS took it over (start_tls replaces this protocol)
        if self._transport is not None:
            forget_callbacks(self._transport)
            self._transport = None


class Inbound:
    """Listens, and takes each accepted connection through admission, TLS and the hello."""

    def __init__(
        self,
        *,
        peer_id: PeerID,
        config: NetConfig,
        server_ctx: ssl.SSLContext,
        tasks: BackgroundTasks,
        new_connection: NewConnection,
        register: Callable[[Connection], None],
    ) -> None:
        self._peer_id = peer_id
        self._config = config
        self._server_ctx = server_ctx
        self._tasks = tasks
        self._new_connection = new_connection
        self._register = register
        self._servers: list[asyncio.Server] = []
        self._claims: list[Callable[[asyncio.Transport], bool]] = []
        self.admission = Admission(
            total=config.max_pending_handshakes,
            per_source=config.max_pending_per_ip,
            per_prefix=config.max_pending_per_prefix,
        )
        self._crowding_logged = -CROWDING_LOG_INTERVAL
        self._window, self._warned = -CROWDING_LOG_INTERVAL, 0
        self.closed = False
        self.listen_addresses: list[PeerAddress] = []
        """Where our listeners are bound, as bound (wildcards included): ours, not for others."""

    # ---- listening -------------------------------------------------------------------------------

    async def listen(self, listen: Sequence[str], *, port_fallback: bool) -> None:
        """Listen on each address (port 0 picks a free port), sharing one port; see ``Host.start``."""
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
                # SO_REUSEPORT lets a hole-punching socket bind our listening port
                # (core.net.punch.puncher)
                server = await loop.create_server(
                    lambda: Unwrapped(self),
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
                self.listen_addresses.append(PeerAddress.tcp(host, bound_port, self._peer_id))

    def _close_listeners(self) -> None:
        for server in self._servers:
            server.close()
        self._servers.clear()
        self.listen_addresses.clear()

    def stop(self) -> None:
        """Refuse every new connection from now on and stop listening."""
        self.closed = True
        for server in self._servers:
            server.close()

    async def wait_closed(self) -> None:
        for server in self._servers:
            await server.wait_closed()

    # ---- accepting -------------------------------------------------------------------------------

    def claim(self, claim: Callable[[asyncio.Transport], bool]) -> None:
        self._claims.append(claim)

    def release(self, claim: Callable[[asyncio.Transport], bool]) -> None:
        with contextlib.suppress(ValueError):
            self._claims.remove(claim)

    def arrived(self, transport: asyncio.Transport) -> None:
        """A new TCP connection on one of our listeners: a claim's, or ours to accept."""
        if not self.closed and any(claim(transport) for claim in self._claims):
            return
        self.accept(transport)

    def accept(self, transport: asyncio.Transport, *, relayed_via: PeerID | None = None) -> bool:
        """Serve TLS over a new inbound byte stream; see ``Host.accept_transport``."""
        if self.closed:
            transport.abort()
            return False
        peername = transport.get_extra_info("peername")
        source = f"relay:{relayed_via}" if relayed_via is not None or not peername else peername[0]
        dropped_before = self.admission.dropped
        attempt = self.admission.admit(str(source))
        if self.admission.dropped != dropped_before:
            self._note_crowding(attempt.prefix)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._config.handshake_timeout
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
                self.admission.release(attempt)

        def stays_silent() -> None:
            self._warn(
                "dropped a connection from %s: TLS handshake failed: it sent nothing within %g s",
                where,
                self._config.handshake_timeout,
            )
            drop()
            self.admission.release(attempt)

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
        self.admission.spoke(attempt)
        where = transport.get_extra_info("peername") or f"relay-{relayed_via}"
        task = self._tasks.spawn(f"accept-{where}", self._accept(transport, relayed_via, deadline))

        def drop() -> None:
            transport.abort()
            task.cancel()

        attempt.drop = drop
        task.add_done_callback(lambda _: self.admission.release(attempt))

    def _warn(self, text: str, *args: object) -> None:
        """A warning about one failed inbound handshake, at most a few per interval (floods)."""
        now = time.monotonic()
        if now - self._window >= CROWDING_LOG_INTERVAL:
            self._window, self._warned = now, 0
        self._warned += 1
        if self._warned <= INBOUND_WARNINGS:
            log.warning(text, *args)
        elif self._warned == INBOUND_WARNINGS + 1:
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
                self.admission.pending,
                prefix,
                self.admission.dropped,
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
                    if peer == self._peer_id:
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
            reason = f"{late} within {self._config.handshake_timeout:g} s"
            self._warn("dropped a connection from %s: %s", where, reason)
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
                ssl_handshake_timeout=self._config.handshake_timeout,
                ssl_shutdown_timeout=self._config.close_grace,
            )
        except (OSError, ssl.SSLError) as exc:
            self._warn("dropped a connection from %s: TLS handshake failed: %s", where, exc)
            transport.abort()
            return None
        except BaseException:
            transport.abort()
            raise
        assert tls is not None
        return tls
