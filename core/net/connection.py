"""One authenticated, multiplexed connection to a peer.

A ``Connection`` is the asyncio protocol under the TLS transport. It parses frames, runs handlers for the
calls the peer opens, completes the calls we open, and routes stream frames. Every failure of the peer
(bad frame, oversized frame, broken protocol) closes only this connection, with the reason logged; calls
in flight on it fail with ``ConnectionClosedError`` naming that reason.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.net.errors import (
    CallCancelledError,
    ConnectionClosedError,
    DeadlineExceededError,
    FrameTooLargeError,
    HandshakeError,
    InvalidRequestError,
    ProtocolViolation,
    ResourceExhaustedError,
    RpcError,
    StreamClosedError,
    UnavailableError,
    UnknownMethodError,
    error_from_code,
)
from core.net.frames import HEADER, MAX_CALL_ID, Frame, FrameDecoder, Kind
from core.net.hello import PROTOCOL_VERSION, Hello
from core.net.rpc import CallContext, Handler, Router
from core.net.stream import Stream
from core.util.errors import WireFormatError
from core.util.msgpack_codec import pack, unpack
from core.util.tasks import BackgroundTasks

if TYPE_CHECKING:
    from core.net.config import NetConfig
    from core.net.peer_id import PeerID

log = logging.getLogger(__name__)

FLAG_STREAM = 1
PING_BYTES = 8


class CallStream(Stream):
    """The caller's side of a streaming call: a ``Stream`` plus the call's final result."""

    def __init__(self, connection: Connection, call_id: int, *, send_window: int) -> None:
        super().__init__(connection, call_id, send_window=send_window)
        self.result_future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    async def result(self) -> Any:
        """Wait for the handler's response (raises the call's error, if it failed)."""
        return await asyncio.shield(self.result_future)

    def cancel(self) -> None:
        """Give up on the call; the remote handler is cancelled."""
        self._conn._abandon_call(self.call_id, CallCancelledError("cancelled by the caller"))

    @property
    def done(self) -> bool:
        return self.result_future.done()


@dataclass(slots=True)
class _Outgoing:
    method: str
    future: asyncio.Future[Any]
    stream: CallStream | None
    timer: asyncio.TimerHandle | None


@dataclass(slots=True)
class _Incoming:
    method: str
    stream: Stream | None
    task: asyncio.Task[None] | None = None
    cancelled_by_peer: bool = False


class Connection(asyncio.BufferedProtocol):
    """A TLS connection to one authenticated peer, carrying any number of concurrent calls."""

    def __init__(
        self,
        *,
        config: NetConfig,
        router: Router,
        initiator: bool,
        remote_address: tuple[str, int] | None,
        hello: Callable[[Connection], Hello],
        on_closed: Callable[[Connection], None],
    ) -> None:
        self.config = config
        self.initiator = initiator
        self.remote_address = remote_address
        self.peer: PeerID | None = None
        self.remote_hello: Hello | None = None
        self._router = router
        self._make_hello = hello
        self._on_closed = on_closed
        self._loop = asyncio.get_running_loop()
        self._decoder = FrameDecoder(
            config.max_frame_bytes, self._on_frame, allocate=self._allocate
        )
        self._transport: asyncio.Transport | None = None
        self._early: list[Frame] = []  # frames that arrived before the peer was authenticated
        self._next_id = 1 if initiator else 2
        self._outgoing: dict[int, _Outgoing] = {}
        self._incoming: dict[int, _Incoming] = {}
        self._handlers = BackgroundTasks(f"conn-{'out' if initiator else 'in'}")
        self._hello_future: asyncio.Future[Hello] = self._loop.create_future()
        self._closed_future: asyncio.Future[None] = self._loop.create_future()
        self._no_calls = asyncio.Event()
        self._no_calls.set()
        self._pings: dict[bytes, asyncio.Future[None]] = {}
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._closing = False  # no new calls either way
        self._aborted = False  # dropped without goodbye; input is ignored from now on
        self._lost = False
        self._close_reason: str | None = None
        self._close_level = logging.INFO
        self.remote_going_away = False
        self.last_activity = self._loop.time()
        self._control: dict[Kind, Callable[[Frame], None]] = {
            Kind.HELLO: self._on_hello,
            Kind.OPEN: self._on_open,
            Kind.RESULT: self._on_reply,
            Kind.ERROR: self._on_reply,
            Kind.CANCEL: self._on_cancel,
            Kind.PING: self._on_ping,
            Kind.PONG: self._on_pong,
            Kind.GOAWAY: self._on_goaway,
        }

    # ---- identity and state ----------------------------------------------------------------------

    def __repr__(self) -> str:
        peer = self.peer.short() if self.peer else "?"
        where = f"{self.remote_address[0]}:{self.remote_address[1]}" if self.remote_address else "?"
        return f"<Connection {peer} at {where} {'out' if self.initiator else 'in'}>"

    @property
    def is_usable(self) -> bool:
        """True while new calls may be opened on this connection."""
        return (
            self.remote_hello is not None
            and not self._closing
            and not self._lost
            and not self.remote_going_away
        )

    @property
    def is_closed(self) -> bool:
        return self._lost

    @property
    def active_calls(self) -> int:
        return len(self._outgoing) + len(self._incoming)

    def idle_for(self, now: float) -> float:
        """Seconds without calls or traffic (0 while a call is open)."""
        return 0.0 if self.active_calls else now - self.last_activity

    # ---- asyncio protocol ------------------------------------------------------------------------

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._aborted:  # after a violation the decoder's state is meaningless: discard input
            return memoryview(bytearray(max(sizehint, 4096)))
        return self._decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        if self._aborted:
            return
        try:
            self._decoder.buffer_updated(nbytes)
        except (ProtocolViolation, WireFormatError) as exc:
            self.abort(f"protocol violation: {exc}", level=logging.WARNING)

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
        if self._lost:
            return
        self._lost = True
        self._closing = True
        if exc is not None:
            self._set_reason(f"connection lost: {exc}", logging.INFO)
        reason = self._close_reason or "the peer closed the connection"
        log.log(self._close_level, "connection to %s closed: %s", self._describe(), reason)
        error = ConnectionClosedError(f"connection to {self._describe()} closed: {reason}")
        error.peer = self.peer
        for call_id in list(self._outgoing):
            self._finish_outgoing(call_id, error)
        for call_id in list(self._incoming):
            self._drop_incoming(call_id, error)
        self._handlers.cancel_all()
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_exception(error)
        self._drain_waiters.clear()
        for ping in self._pings.values():
            if not ping.done():
                ping.set_exception(error)
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
        if self._aborted:  # the peer broke the protocol before we finished checking who it is
            transport.abort()
            return
        chunk = self.config.stream_chunk_bytes
        transport.set_write_buffer_limits(high=4 * chunk, low=chunk)
        self._write_frame(Kind.HELLO, 0, pack(self._make_hello(self).to_wire()))
        early, self._early = self._early, []
        for frame in early:
            if self._lost:
                return
            try:
                self._dispatch(frame)
            except (ProtocolViolation, WireFormatError) as exc:
                self.abort(f"protocol violation: {exc}", level=logging.WARNING)

    async def wait_ready(self) -> Hello:
        """Wait for the peer's hello; closes the connection if it does not come in time."""
        try:
            async with asyncio.timeout(self.config.handshake_timeout):
                return await asyncio.shield(self._hello_future)
        except TimeoutError:
            reason = f"no hello within {self.config.handshake_timeout:g} s"
            self.abort(reason, level=logging.WARNING)
            raise HandshakeError(f"{self._describe()}: {reason}") from None

    # ---- frames in -------------------------------------------------------------------------------

    def _allocate(self, kind: Kind, call_id: int, length: int) -> tuple[memoryview, bool]:
        if kind is Kind.DATA and self.peer is not None:
            stream = self._stream_for(call_id)
            if stream is not None:
                target = stream.direct_target(length)
                if target is not None:
                    return target, True
        return memoryview(bytearray(length)), False

    def _on_frame(self, frame: Frame) -> None:
        if self._lost:
            return
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

    def _on_cancel(self, frame: Frame) -> None:
        incoming = self._incoming.get(frame.call_id)
        if incoming is not None and incoming.task is not None:
            incoming.cancelled_by_peer = True
            incoming.task.cancel()
            # a task cancelled before its first step never runs its finally: clean up here
            self._drop_incoming(frame.call_id, CallCancelledError("cancelled by the caller"))

    def _on_ping(self, frame: Frame) -> None:
        if len(frame.payload) != PING_BYTES:  # echoing arbitrary sizes would amplify abuse
            raise ProtocolViolation(f"a ping carries {PING_BYTES} bytes, not {len(frame.payload)}")
        self._send_if_open(Kind.PONG, 0, bytes(frame.payload))

    def _on_pong(self, frame: Frame) -> None:
        waiter = self._pings.pop(bytes(frame.payload), None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _on_goaway(self, frame: Frame) -> None:
        self.remote_going_away = True
        log.debug("%s is going away: %s", self._describe(), unpack(frame.payload))

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
        self.remote_hello = hello
        self._hello_future.set_result(hello)

    def _stream_for(self, call_id: int) -> Stream | None:
        if self._is_ours(call_id):
            outgoing = self._outgoing.get(call_id)
            return outgoing.stream if outgoing is not None else None
        incoming = self._incoming.get(call_id)
        return incoming.stream if incoming is not None else None

    def _is_ours(self, call_id: int) -> bool:
        return (call_id & 1) == (1 if self.initiator else 0)

    def _on_open(self, frame: Frame) -> None:
        call_id = frame.call_id
        if self._is_ours(call_id) or call_id == 0 or call_id in self._incoming:
            raise ProtocolViolation(f"the peer opened call id {call_id}, which it may not use now")
        opened = unpack(frame.payload)
        if not (isinstance(opened, list) and len(opened) == 4):
            raise ProtocolViolation("malformed OPEN frame")
        method, timeout, flags, request = opened
        if not isinstance(method, str) or not isinstance(flags, int):
            raise ProtocolViolation("malformed OPEN frame")
        if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
            raise ProtocolViolation(f"invalid call timeout {timeout!r}")
        streaming = bool(flags & FLAG_STREAM)
        handler = self._router.get(method)
        refusal: RpcError | None = None
        if self._closing:
            refusal = UnavailableError("the peer is closing this connection")
        elif len(self._incoming) >= self.config.max_concurrent_calls:
            refusal = ResourceExhaustedError(
                f"too many concurrent calls (limit {self.config.max_concurrent_calls})"
            )
        elif handler is None:
            refusal = UnknownMethodError(f"no method named {method!r}")
        elif handler.streaming != streaming:
            kind = "a streaming" if handler.streaming else "a unary"
            refusal = InvalidRequestError(f"{method!r} is {kind} method")
        if refusal is not None or handler is None:
            self._reply_error(call_id, refusal or UnknownMethodError(method))
            return
        stream = None
        if streaming:
            assert self.remote_hello is not None
            stream = Stream(self, call_id, send_window=self.remote_hello.window)
        incoming = _Incoming(method, stream)
        self._incoming[call_id] = incoming
        self._no_calls.clear()
        deadline = None if timeout is None else self._loop.time() + float(timeout)
        incoming.task = self._handlers.spawn(
            f"{method}#{call_id}", self._serve(call_id, incoming, handler, request, deadline)
        )

    async def _serve(
        self,
        call_id: int,
        incoming: _Incoming,
        handler: Handler,
        request: Any,
        deadline: float | None,
    ) -> None:
        assert self.peer is not None
        ctx = CallContext(self.peer, incoming.method, self, deadline)
        scope = asyncio.timeout_at(deadline)
        try:
            async with scope:
                if handler.stream is not None:
                    assert incoming.stream is not None
                    result = await handler.stream(ctx, request, incoming.stream)
                else:
                    assert handler.unary is not None
                    result = await handler.unary(ctx, request)
            self._send_if_open(Kind.RESULT, call_id, self._encode_result(result))
        except asyncio.CancelledError:
            if not incoming.cancelled_by_peer:
                raise
        except Exception as exc:
            self._reply_error(call_id, self._as_rpc_error(exc, incoming.method, scope.expired()))
        finally:
            self._drop_incoming(call_id, StreamClosedError("the call has finished"))

    def _drop_incoming(self, call_id: int, error: RpcError) -> None:
        incoming = self._incoming.pop(call_id, None)
        if incoming is not None:
            if incoming.stream is not None:
                incoming.stream.fail(error)
            self._update_no_calls()

    def _encode_result(self, result: Any) -> bytes:
        try:
            payload = pack(result)
        except (TypeError, ValueError, OverflowError) as exc:
            raise RpcError(f"the handler returned a value that cannot be sent: {exc}") from None
        if len(payload) > self.config.max_frame_bytes:
            raise ResourceExhaustedError(
                f"the response ({len(payload)} bytes) exceeds the frame limit; use a stream"
            )
        return payload

    def _as_rpc_error(self, exc: Exception, method: str, deadline_passed: bool) -> RpcError:
        """What the caller is told about a handler that raised ``exc``; never a traceback."""
        if isinstance(exc, TimeoutError) and deadline_passed:
            return DeadlineExceededError("the call's deadline passed")
        if isinstance(exc, RpcError):
            return exc
        if isinstance(exc, WireFormatError):
            return InvalidRequestError(str(exc))
        log.warning("handler %s failed for %s", method, self._describe(), exc_info=exc)
        return RpcError(f"{method} failed: {type(exc).__name__}: {exc}")

    def _on_reply(self, frame: Frame) -> None:
        call_id = frame.call_id
        if not self._is_ours(call_id) or call_id not in self._outgoing:
            return  # the caller already gave up on it
        value = unpack(frame.payload)
        if frame.kind is Kind.RESULT:
            self._finish_outgoing(call_id, None, value)
            return
        if not (
            isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)
        ):
            raise ProtocolViolation("malformed ERROR frame")
        self._finish_outgoing(call_id, error_from_code(value[0], value[1], self.peer))

    # ---- frames out ------------------------------------------------------------------------------

    def _write_frame(self, kind: Kind, call_id: int, payload: bytes = b"") -> None:
        transport = self._transport
        if transport is None or self._lost or transport.is_closing():
            raise ConnectionClosedError(f"connection to {self._describe()} is closed")
        transport.write(HEADER.pack(len(payload), kind, call_id) + payload)
        self.last_activity = self._loop.time()
        # Replies and control frames do not wait for the peer to read; a peer that never reads
        # would otherwise make us buffer without limit. (Stream data waits in drain() instead.)
        if transport.get_write_buffer_size() > self.config.max_unsent_bytes:
            self.abort(
                f"the peer is not reading: over {self.config.max_unsent_bytes} bytes waiting to be sent"
            )

    def _write_data(self, call_id: int, data: memoryview) -> None:
        transport = self._transport
        if transport is None or self._lost or transport.is_closing():
            raise ConnectionClosedError(f"connection to {self._describe()} is closed")
        # TLS encrypts ``data`` inside this call, so the caller may reuse its buffer afterwards
        transport.writelines((HEADER.pack(len(data), Kind.DATA, call_id), data))
        self.last_activity = self._loop.time()

    def _send_if_open(self, kind: Kind, call_id: int, payload: bytes = b"") -> None:
        if not self._lost and self._transport is not None and not self._transport.is_closing():
            self._write_frame(kind, call_id, payload)

    def _reply_error(self, call_id: int, error: RpcError) -> None:
        self._send_if_open(Kind.ERROR, call_id, pack([error.code, error.message]))

    async def drain(self) -> None:
        """Wait while the transport's send buffer is above its high-water mark."""
        if self._lost:
            raise ConnectionClosedError(f"connection to {self._describe()} is closed")
        if not self._write_paused:
            return
        waiter = self._loop.create_future()
        self._drain_waiters.append(waiter)
        await waiter

    # ---- calls we make ---------------------------------------------------------------------------

    def _open(self, method: str, request: Any, timeout: float | None, streaming: bool) -> int:
        if not self.is_usable:
            raise ConnectionClosedError(f"connection to {self._describe()} is not accepting calls")
        payload = pack([method, timeout, FLAG_STREAM if streaming else 0, request])
        if len(payload) > self.config.max_frame_bytes:
            raise FrameTooLargeError(
                f"the request to {method} ({len(payload)} bytes) exceeds the frame limit of "
                f"{self.config.max_frame_bytes}; send large data on a stream"
            )
        call_id = self._next_id
        self._next_id += 2
        if self._next_id > MAX_CALL_ID:
            self._closing = (
                True  # ids exhausted: finish what runs, new calls go to a new connection
            )
        self._write_frame(Kind.OPEN, call_id, payload)
        return call_id

    def _register_outgoing(
        self, call_id: int, method: str, timeout: float | None, stream: CallStream | None
    ) -> asyncio.Future[Any]:
        future = stream.result_future if stream is not None else self._loop.create_future()
        timer = None
        if timeout is not None:
            timer = self._loop.call_later(timeout, self._on_deadline, call_id, timeout)
        self._outgoing[call_id] = _Outgoing(method, future, stream, timer)
        self._no_calls.clear()
        return future

    async def call(self, method: str, request: Any, *, timeout: float | None = None) -> Any:
        """Call ``method`` on the peer with a msgpack-able request; return its raw response."""
        if timeout is None:
            timeout = self.config.call_timeout
        call_id = self._open(method, request, timeout, streaming=False)
        future = self._register_outgoing(call_id, method, timeout, None)
        try:
            return await future
        except asyncio.CancelledError:
            self._abandon_call(call_id, CallCancelledError("cancelled by the caller"))
            raise

    def open_stream(self, method: str, request: Any, *, timeout: float | None = None) -> CallStream:
        """Open a streaming call; the returned stream also gives the final ``result()``."""
        if timeout is None:
            timeout = self.config.call_timeout
        call_id = self._open(method, request, timeout, streaming=True)
        assert self.remote_hello is not None
        stream = CallStream(self, call_id, send_window=self.remote_hello.window)
        self._register_outgoing(call_id, method, timeout, stream)
        return stream

    def _on_deadline(self, call_id: int, timeout: float) -> None:
        outgoing = self._outgoing.get(call_id)
        if outgoing is None:
            return
        outgoing.timer = None
        error = DeadlineExceededError(
            f"{outgoing.method} on {self._describe()} did not finish within {timeout:.3g} s"
        )
        self._abandon_call(call_id, error)

    def _abandon_call(self, call_id: int, error: RpcError) -> None:
        """Stop waiting for a call we made and tell the peer to cancel its handler."""
        if call_id in self._outgoing:
            self._finish_outgoing(call_id, error)
            self._send_if_open(Kind.CANCEL, call_id)

    def _finish_outgoing(
        self, call_id: int, error: BaseException | None, value: Any = None
    ) -> None:
        outgoing = self._outgoing.pop(call_id, None)
        if outgoing is None:
            return
        if outgoing.timer is not None:
            outgoing.timer.cancel()
        if not outgoing.future.done():
            if error is None:
                outgoing.future.set_result(value)
            else:
                outgoing.future.set_exception(error)
                # mark it retrieved: whoever awaits still gets the error, and a caller that already
                # gave up (or a stream user who only reads data) leaves no "never retrieved" warning
                outgoing.future.exception()
        if outgoing.stream is not None:
            outgoing.stream.fail(error or StreamClosedError("the call has finished"))
        self._update_no_calls()

    def _update_no_calls(self) -> None:
        if not self._outgoing and not self._incoming:
            self._no_calls.set()

    async def ping(self, timeout: float = 5.0) -> float:
        """Round-trip time to the peer in seconds."""
        token = os.urandom(PING_BYTES)
        waiter = self._loop.create_future()
        self._pings[token] = waiter
        start = self._loop.time()
        try:
            self._write_frame(Kind.PING, 0, token)
            async with asyncio.timeout(timeout):
                await waiter
        except TimeoutError:
            raise DeadlineExceededError(
                f"no pong from {self._describe()} in {timeout:g} s"
            ) from None
        finally:
            self._pings.pop(token, None)
        return self._loop.time() - start

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
        self._closing = self._aborted = True
        for candidate in (self._transport, transport):
            if candidate is not None:
                candidate.abort()

    async def close(self, reason: str = "closed", *, grace: float | None = None) -> None:
        """Say goodbye, let running calls finish for a moment, then close."""
        grace = self.config.close_grace if grace is None else grace
        if not self._lost:
            self._set_reason(reason, logging.DEBUG)
            if not self._closing and self.remote_hello is not None:
                self._send_if_open(Kind.GOAWAY, 0, pack(reason))
            self._closing = True
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
        await self._handlers.close()

    def _describe(self) -> str:
        peer = str(self.peer) if self.peer else "an unauthenticated peer"
        if self.remote_address:
            return f"{peer} ({self.remote_address[0]}:{self.remote_address[1]})"
        return peer
