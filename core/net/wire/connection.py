"""One authenticated, multiplexed connection to a peer.

A ``Connection`` is the asyncio protocol under the TLS transport. It parses frames and routes them: calls
the peer opens go to ``IncomingCalls`` (``calls_in``), answers to our calls to ``OutgoingCalls``
(``calls_out``), stream frames to their ``Stream``. Every failure of the peer (bad frame, oversized frame,
broken protocol) closes only this connection, with the reason logged; calls in flight on it fail with
``ConnectionClosedError`` naming that reason.

Its life is one ``Phase`` (``lifecycle``): every change goes through ``_advance``, and ``is_usable``,
``closing`` and ``is_closed`` are read from it. The calls and streams it carries see it as a ``Link``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from core.net.errors import (
    ConnectionClosedError,
    HandshakeError,
    ProtocolViolation,
)
from core.net.wire.bandwidth import BandwidthLimits
from core.net.wire.calls_in import IncomingCalls
from core.net.wire.calls_out import CallStream, OutgoingCalls
from core.net.wire.frames import HEADER, Frame, FrameDecoder, Kind
from core.net.wire.hello import PROTOCOL_VERSION, Hello
from core.net.wire.lifecycle import Event, Phase, accepts_new_calls, advance
from core.net.wire.pings import Pings
from core.net.wire.rpc import Router
from core.net.wire.stream import Stream
from core.net.wire.traffic import Traffic
from core.trust.passes import AccessDenied, AccessPass
from core.util.errors import WireFormatError
from core.util.msgpack_codec import pack, unpack

if TYPE_CHECKING:
    from core.net.config import NetConfig
    from core.trust.peer_id import PeerID

log = logging.getLogger(__name__)

HELLO_MAX_BYTES = 64 * 1024
"""The largest frame accepted before the peer's hello (a hello is a few hundred bytes)."""

__all__ = ["CallStream", "Connection"]


class Connection(asyncio.BufferedProtocol):
    """A TLS connection to one authenticated peer, carrying any number of concurrent calls."""

    def __init__(
        self,
        *,
        config: NetConfig,
        router: Router,
        bandwidth: BandwidthLimits | None = None,
        traffic: Traffic | None = None,
        initiator: bool,
        remote_address: tuple[str, int] | None,
        relayed_via: PeerID | None = None,
        hello: Callable[[Connection], Hello],
        on_hello: Callable[[Connection], None],
        on_closed: Callable[[Connection], None],
        admit: Callable[[Connection, Hello], None] | None = None,
    ) -> None:
        self.config = config
        self.bandwidth = bandwidth or BandwidthLimits()
        self.traffic = traffic or Traffic()
        self._read_paused_until = 0.0
        self.initiator = initiator
        self.remote_address = remote_address
        self.relayed_via = relayed_via
        """The relay whose circuit carries this connection (None: a direct connection)."""
        self.punched = False
        """A direct connection opened by hole punching (``core.net.punch.puncher``), for diagnostics."""
        self.peer: PeerID | None = None
        self.remote_hello: Hello | None = None
        self._make_hello = hello
        self._on_hello_received = on_hello
        self._on_closed = on_closed
        self._admit = admit
        self.remote_pass: AccessPass | None = None
        """The access pass the peer showed (moderated projects only)."""
        self._hello_timer: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()
        # Until the peer's hello arrives only a hello may: a stranger that completes TLS and then
        # announces a huge frame is refused at the header (``_on_frame`` lifts the cap).
        self._decoder = FrameDecoder(
            min(HELLO_MAX_BYTES, config.max_frame_bytes), self._on_frame, allocate=self._allocate
        )
        self._hello_seen = False
        self._transport: asyncio.Transport | None = None
        self._early: list[Frame] = []  # frames that arrived before the peer was authenticated
        self.incoming = IncomingCalls(self, router)
        self.outgoing = OutgoingCalls(self)
        self._hello_future: asyncio.Future[Hello] = self._loop.create_future()
        self._closed_future: asyncio.Future[None] = self._loop.create_future()
        self._no_calls = asyncio.Event()
        self._no_calls.set()
        self.pings = Pings(self)
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._phase = Phase.HANDSHAKE
        self._close_reason: str | None = None
        self._close_level = logging.INFO
        self.last_activity = self._loop.time()
        self._control: dict[Kind, Callable[[Frame], None]] = {
            Kind.HELLO: self._on_hello,
            Kind.OPEN: self.incoming.on_open,
            Kind.RESULT: self.outgoing.on_reply,
            Kind.ERROR: self.outgoing.on_reply,
            Kind.CANCEL: self.incoming.on_cancel,
            Kind.PING: self.pings.on_ping,
            Kind.PONG: self.pings.on_pong,
            Kind.GOAWAY: self._on_goaway,
        }

    # ---- identity and state ----------------------------------------------------------------------

    def __repr__(self) -> str:
        peer = self.peer.short() if self.peer else "?"
        where = f"{self.remote_address[0]}:{self.remote_address[1]}" if self.remote_address else "?"
        return f"<Connection {peer} at {where} {'out' if self.initiator else 'in'}>"

    @property
    def phase(self) -> Phase:
        """Where the connection is in its life (the one state behind the views below)."""
        return self._phase

    def _advance(self, event: Event) -> Phase:
        """Move the phase on ``event`` (the only place it changes); an impossible event raises."""
        self._phase = advance(self._phase, event)
        return self._phase

    @property
    def cipher(self) -> tuple[str, str, int] | None:
        """The TLS cipher the connection runs on, as ``ssl`` names it (name, protocol version,
        secret bits); None before its transport is attached, or where the transport has none."""
        found = self._transport.get_extra_info("cipher") if self._transport is not None else None
        return None if found is None else (str(found[0]), str(found[1]), int(found[2]))

    @property
    def is_usable(self) -> bool:
        """True while new calls may be opened on this connection.

        The dialing side may call before the peer's hello arrives: the peer reads our hello first,
        so requests can follow it at once, saving a round trip on every new connection.
        """
        return (
            accepts_new_calls(self._phase, initiator=self.initiator) and not self.outgoing.exhausted
        )

    @property
    def close_reason(self) -> str | None:
        """Why the connection is closing or closed, once that is known."""
        return self._close_reason

    @property
    def closing(self) -> bool:
        """No new calls are accepted in either direction."""
        return self._phase.closing

    @property
    def is_closed(self) -> bool:
        """The transport is gone."""
        return self._phase is Phase.CLOSED

    @property
    def active_calls(self) -> int:
        return len(self.outgoing) + len(self.incoming)

    def idle_for(self, now: float) -> float:
        """Seconds without calls or traffic (0 while a call is open)."""
        return 0.0 if self.active_calls else now - self.last_activity

    def is_ours(self, call_id: int) -> bool:
        """Whether we opened that call (odd ids belong to the dialing side)."""
        return (call_id & 1) == (1 if self.initiator else 0)

    def calls_changed(self) -> None:
        if self.active_calls:
            self._no_calls.clear()
        else:
            self._no_calls.set()

    @property
    def peer_window(self) -> int:
        """Stream bytes the peer accepts before granting more: one chunk until its hello tells."""
        if self.remote_hello is not None:
            return self.remote_hello.window
        return self.config.stream_chunk_bytes

    def describe(self) -> str:
        peer = str(self.peer) if self.peer else "an unauthenticated peer"
        if self.relayed_via is not None:
            return f"{peer} (through relay {self.relayed_via.short()})"
        if self.remote_address:
            return f"{peer} ({self.remote_address[0]}:{self.remote_address[1]})"
        return peer

    # ---- calls ------------------------------------------------------------------------------------

    async def call(
        self,
        method: str,
        request: Any,
        *,
        timeout: float | None = None,
        deadline: float | None = None,
    ) -> Any:
        """Call ``method`` on the peer with a msgpack-able request; return its raw response
        (``deadline``: the caller's, named when ``timeout`` passes; ``calls_out``)."""
        timeout = timeout or self.config.call_timeout
        return await self.outgoing.call(method, request, timeout, deadline)

    def open_stream(
        self,
        method: str,
        request: Any,
        *,
        timeout: float | None = None,
        deadline: float | None = None,
    ) -> CallStream:
        """Open a streaming call; the returned stream also gives the final ``result()``."""
        timeout = timeout or self.config.call_timeout
        return self.outgoing.open_stream(method, request, timeout, deadline)

    async def ping(self, timeout: float = 5.0) -> float:
        """Round-trip time to the peer in seconds."""
        return await self.pings.ping(timeout)

    # ---- asyncio protocol ------------------------------------------------------------------------

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._phase.deaf:  # after a violation the decoder's state is meaningless
            return memoryview(bytearray(max(sizehint, 4096)))
        return self._decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        if self._phase.deaf:
            return
        try:
            self.traffic.received += nbytes
            self._decoder.buffer_updated(nbytes)
        except (ProtocolViolation, WireFormatError) as exc:
            self.abort(f"protocol violation: {exc}", level=logging.WARNING)
            return
        wait = self.bandwidth.download.take(nbytes)
        if wait > 0 and self._transport is not None and not self._read_paused_until:
            # Over the download limit: stop reading until the debt is repaid (TCP slows the sender).
            self._read_paused_until = self._loop.time() + wait
            self._transport.pause_reading()
            self._loop.call_later(wait, self._resume_reading)

    def _resume_reading(self) -> None:
        self._read_paused_until = 0.0
        transport = self._transport
        if transport is not None and not self.is_closed and not transport.is_closing():
            transport.resume_reading()

    def eof_received(self) -> bool | None:
        self._set_reason("the peer closed the connection", logging.DEBUG)
        return None

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.is_closed:
            return
        self._advance(Event.LOST)
        if exc is not None:
            self._set_reason(f"connection lost: {exc}", logging.INFO)
        reason = self._close_reason or "the peer closed the connection"
        log.log(self._close_level, "connection to %s closed: %s", self.describe(), reason)
        error = ConnectionClosedError(f"connection to {self.describe()} closed: {reason}")
        error.peer = self.peer
        self.outgoing.fail_all(error)
        self.incoming.fail_all(error)
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_exception(error)
        self._drain_waiters.clear()
        self.pings.fail_all(error)
        if self._hello_timer is not None:
            self._hello_timer.cancel()
            self._hello_timer = None
        if not self._hello_future.done():
            self._hello_future.set_exception(HandshakeError(f"handshake failed: {reason}"))
            self._hello_future.exception()  # retrieved here; wait_ready re-raises it if anyone waits
        self._closed_future.set_result(None)
        self._on_closed(self)

    # ---- start -----------------------------------------------------------------------------------

    def attach(self, transport: asyncio.Transport, peer: PeerID) -> None:
        """Start talking on an authenticated TLS transport."""
        self._transport = transport
        self.peer = peer
        if self._advance(Event.ATTACHED) is Phase.ABORTED:
            transport.abort()  # the peer broke the protocol before we finished checking who it is
            return
        chunk = self.config.stream_chunk_bytes
        transport.set_write_buffer_limits(high=4 * chunk, low=chunk)
        self.write_frame(Kind.HELLO, 0, pack(self._make_hello(self).to_wire()))
        if self.initiator:  # the accepting side waits for our hello in wait_ready(); we use a timer
            self._hello_timer = self._loop.call_later(
                self.config.handshake_timeout, self._hello_overdue
            )
        early, self._early = self._early, []
        for frame in early:
            if self._phase.deaf:
                return
            try:
                self._dispatch(frame)
            except (ProtocolViolation, WireFormatError) as exc:
                self.abort(f"protocol violation: {exc}", level=logging.WARNING)

    def _hello_overdue(self) -> None:
        self._hello_timer = None
        if self.remote_hello is None and not self.is_closed:
            self.abort(f"no hello within {self.config.handshake_timeout:g} s")

    async def wait_ready(self) -> Hello:
        """Wait for the peer's hello; closes the connection if it does not come in time."""
        try:
            async with asyncio.timeout(self.config.handshake_timeout):
                return await asyncio.shield(self._hello_future)
        except TimeoutError:
            reason = f"no hello within {self.config.handshake_timeout:g} s"
            self.abort(reason, level=logging.WARNING)
            raise HandshakeError(f"{self.describe()}: {reason}") from None

    # ---- frames in -------------------------------------------------------------------------------

    def _allocate(self, kind: Kind, call_id: int, length: int) -> memoryview | None:
        if kind is Kind.DATA and self.peer is not None:
            stream = self._stream_for(call_id)
            if stream is not None:
                return stream.direct_target(length)
        return None

    def _on_frame(self, frame: Frame) -> None:
        if self._phase.deaf:  # nothing after a refusal may reach a handler
            return
        if not self._hello_seen:
            if frame.kind is not Kind.HELLO:
                raise ProtocolViolation(f"expected a hello first, got {frame.kind.name}")
            self._hello_seen = True
            self._decoder.max_frame_bytes = self.config.max_frame_bytes
        if self.peer is None:
            self._early.append(frame)
            return
        self._dispatch(frame)

    def _dispatch(self, frame: Frame) -> None:
        self.last_activity = self._loop.time()
        kind = frame.kind
        if self.remote_hello is None and kind is not Kind.HELLO:
            raise ProtocolViolation(f"expected a hello first, got {kind.name}")
        if kind is Kind.DATA or kind is Kind.MSG or kind is Kind.END or kind is Kind.CREDIT:
            stream = self._stream_for(frame.call_id)
            if stream is not None:  # frames for a call that just ended are dropped
                stream.on_frame(frame)
            return
        self._control[kind](frame)

    def _on_goaway(self, frame: Frame) -> None:
        self._advance(Event.GOAWAY)
        reason = unpack(frame.payload)
        if isinstance(reason, dict) and isinstance(reason.get("refused"), str):
            self._set_reason(f"{self.describe()} refused us: {reason['refused']}", logging.WARNING)
            return
        log.debug("%s is going away: %s", self.describe(), reason)

    def _on_hello(self, frame: Frame) -> None:
        if self.remote_hello is not None:
            raise ProtocolViolation("a second hello")
        hello = Hello.from_wire(unpack(frame.payload))
        if hello.protocol != PROTOCOL_VERSION:
            raise ProtocolViolation(
                f"the peer speaks protocol {hello.protocol}, we speak {PROTOCOL_VERSION} "
                f"(its agent is {hello.agent!r}; one of you should update Barnraise)"
            )
        if hello.window < self.config.stream_chunk_bytes:
            raise ProtocolViolation(f"stream window {hello.window} is smaller than one chunk")
        if self._admit is not None:
            try:
                self._admit(self, hello)
            except AccessDenied as exc:
                self.refuse(str(exc))
                return
        self.remote_hello = hello
        self._advance(Event.HELLO)
        self._hello_future.set_result(hello)
        if self._hello_timer is not None:
            self._hello_timer.cancel()
            self._hello_timer = None
        self.outgoing.peer_window_known(hello.window)
        self._on_hello_received(self)

    def _stream_for(self, call_id: int) -> Stream | None:
        if self.is_ours(call_id):
            return self.outgoing.stream_for(call_id)
        return self.incoming.stream_for(call_id)

    # ---- frames out ------------------------------------------------------------------------------

    def write_frame(self, kind: Kind, call_id: int, payload: bytes = b"") -> None:
        transport = self._transport
        if transport is None or self._phase is Phase.CLOSED or transport.is_closing():
            raise ConnectionClosedError(f"connection to {self.describe()} is closed")
        transport.write(HEADER.pack(len(payload), kind, call_id) + payload)
        self.traffic.sent += HEADER.size + len(payload)
        self.last_activity = self._loop.time()
        # Replies and control frames do not wait for the peer to read; a peer that never reads
        # would otherwise make us buffer without limit. (Stream data waits in drain() instead.)
        if transport.get_write_buffer_size() > self.config.max_unsent_bytes:
            self.abort(
                f"the peer is not reading: over {self.config.max_unsent_bytes} bytes waiting to be sent"
            )

    async def pace_upload(self, size: int) -> None:
        """Wait as long as the upload limit requires before ``size`` bytes of stream data go out."""
        await self.bandwidth.upload.acquire(size)

    def write_data(self, call_id: int, data: memoryview) -> None:
        transport = self._transport
        if transport is None or self._phase is Phase.CLOSED or transport.is_closing():
            raise ConnectionClosedError(f"connection to {self.describe()} is closed")
        # TLS encrypts ``data`` inside this call, so the caller may reuse its buffer afterwards
        transport.writelines((HEADER.pack(len(data), Kind.DATA, call_id), data))
        self.traffic.sent += HEADER.size + len(data)
        self.last_activity = self._loop.time()

    def send_if_open(self, kind: Kind, call_id: int, payload: bytes = b"") -> None:
        transport = self._transport
        if self._phase is not Phase.CLOSED and transport is not None and not transport.is_closing():
            self.write_frame(kind, call_id, payload)

    async def drain(self) -> None:
        """Wait while the transport's send buffer is above its high-water mark."""
        if self.is_closed:
            raise ConnectionClosedError(f"connection to {self.describe()} is closed")
        if not self._write_paused:
            return
        waiter = self._loop.create_future()
        self._drain_waiters.append(waiter)
        await waiter

    # ---- closing ---------------------------------------------------------------------------------

    def _set_reason(self, reason: str, level: int) -> None:
        if self._close_reason is None:
            self._close_reason, self._close_level = reason, level

    def abort(
        self,
        reason: str,
        *,
        level: int = logging.WARNING,
        transport: asyncio.Transport | None = None,
    ) -> None:
        """Drop the connection now. ``transport`` is for one not attached yet (failed checks)."""
        self._set_reason(reason, level)
        self._advance(Event.ABORT)
        for candidate in (self._transport, transport):
            if candidate is not None:
                candidate.abort()

    def refuse(self, reason: str) -> None:
        """Tell the peer why it may not talk to us, then drop the connection (access control)."""
        if self._phase.deaf:
            return
        self._set_reason(f"access refused: {reason}", logging.WARNING)
        with contextlib.suppress(ConnectionClosedError):
            self.send_if_open(Kind.GOAWAY, 0, pack({"refused": reason}))
        self._advance(Event.ABORT)
        if not self._hello_future.done():
            self._hello_future.set_exception(HandshakeError(f"access refused: {reason}"))
            self._hello_future.exception()
        if self._transport is not None:
            self._transport.close()  # close, not abort: the GOAWAY above should reach the peer

    async def close(self, reason: str = "closed", *, grace: float | None = None) -> None:
        """Say goodbye, let running calls finish for a moment, then close."""
        grace = self.config.close_grace if grace is None else grace
        if not self.is_closed:
            self._set_reason(reason, logging.DEBUG)
            if self._phase is Phase.OPEN or self._phase is Phase.PEER_LEAVING:
                self.send_if_open(Kind.GOAWAY, 0, pack(reason))  # the peer knows us: say goodbye
            self._advance(Event.CLOSE)
            if self.active_calls:
                try:
                    async with asyncio.timeout(grace):
                        await self._no_calls.wait()
                except TimeoutError:
                    pass
            if self._transport is not None:
                self._transport.close()
            try:
                async with asyncio.timeout(grace + 1.0):
                    await asyncio.shield(self._closed_future)
            except TimeoutError:
                if self._transport is not None:
                    self._transport.abort()
        await self.wait_closed()

    async def wait_closed(self) -> None:
        """Wait until the transport is gone and every handler task has finished."""
        await asyncio.shield(self._closed_future)
        await self.incoming.handlers.close()
