"""The calls a peer opens on a connection: checked, run as named tasks, answered once.

A call is refused with a typed error (unknown method, busy, closing, unary-versus-stream mismatch)
without harming the connection. A running handler is cancelled when the caller cancels or its deadline
passes, and its exceptions become typed errors for the caller, never tracebacks.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.net.errors import (
    CallCancelledError,
    DeadlineExceededError,
    InvalidRequestError,
    ProtocolViolation,
    ResourceExhaustedError,
    RpcError,
    StreamClosedError,
    UnavailableError,
    UnknownMethodError,
)
from core.net.wire.frames import Frame, Kind
from core.net.wire.rpc import CallContext, Handler, Router
from core.net.wire.stream import Stream
from core.util.errors import WireFormatError
from core.util.msgpack_codec import pack, unpack
from core.util.tasks import BackgroundTasks

if TYPE_CHECKING:
    from core.net.wire.link import Link

log = logging.getLogger(__name__)

FLAG_STREAM = 1


@dataclass(slots=True)
class _Incoming:
    method: str
    stream: Stream | None
    task: asyncio.Task[None] | None = None
    cancelled_by_peer: bool = False


class IncomingCalls:
    """Serves the calls the peer opens on one connection."""

    def __init__(self, link: Link, router: Router) -> None:
        self._conn = link
        self._router = router
        self._calls: dict[int, _Incoming] = {}
        self.handlers = BackgroundTasks(f"calls-{'out' if link.initiator else 'in'}")

    def __len__(self) -> int:
        return len(self._calls)

    def stream_for(self, call_id: int) -> Stream | None:
        incoming = self._calls.get(call_id)
        return incoming.stream if incoming is not None else None

    def on_open(self, frame: Frame) -> None:
        conn, call_id = self._conn, frame.call_id
        if conn.is_ours(call_id) or call_id == 0 or call_id in self._calls:
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
        refusal = self._refusal(method, handler, streaming)
        if refusal is not None or handler is None:
            self._reply_error(call_id, refusal or UnknownMethodError(method))
            return
        stream = None
        if streaming:
            stream = Stream(conn, call_id, send_window=conn.peer_window)
        incoming = _Incoming(method, stream)
        self._calls[call_id] = incoming
        conn.calls_changed()
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + float(timeout)
        incoming.task = self.handlers.spawn(
            f"{method}#{call_id}", self._serve(call_id, incoming, handler, request, deadline)
        )

    def _refusal(self, method: str, handler: Handler | None, streaming: bool) -> RpcError | None:
        limit = self._conn.config.max_concurrent_calls
        if self._conn.closing:
            return UnavailableError("the peer is closing this connection")
        if len(self._calls) >= limit:
            return ResourceExhaustedError(f"too many concurrent calls (limit {limit})")
        if handler is None:
            return UnknownMethodError(f"no method named {method!r}")
        if handler.streaming != streaming:
            kind = "a streaming" if handler.streaming else "a unary"
            return InvalidRequestError(f"{method!r} is {kind} method")
        return None

    async def _serve(
        self,
        call_id: int,
        incoming: _Incoming,
        handler: Handler,
        request: Any,
        deadline: float | None,
    ) -> None:
        conn = self._conn
        assert conn.peer is not None
        ctx = CallContext(conn.peer, incoming.method, conn, deadline)
        scope = asyncio.timeout_at(deadline)
        try:
            async with scope:
                if handler.stream is not None:
                    assert incoming.stream is not None
                    result = await handler.stream(ctx, request, incoming.stream)
                else:
                    assert handler.unary is not None
                    result = await handler.unary(ctx, request)
            conn.send_if_open(Kind.RESULT, call_id, self._encode_result(result))
        except asyncio.CancelledError:
            if not incoming.cancelled_by_peer:
                raise
        except Exception as exc:
            self._reply_error(call_id, self._as_rpc_error(exc, incoming.method, scope.expired()))
        finally:
            self.drop(call_id, StreamClosedError("the call has finished"))

    def on_cancel(self, frame: Frame) -> None:
        incoming = self._calls.get(frame.call_id)
        if incoming is not None and incoming.task is not None:
            incoming.cancelled_by_peer = True
            incoming.task.cancel()
            # a task cancelled before its first step never runs its finally: clean up here
            self.drop(frame.call_id, CallCancelledError("cancelled by the caller"))

    def drop(self, call_id: int, error: RpcError) -> None:
        incoming = self._calls.pop(call_id, None)
        if incoming is not None:
            if incoming.stream is not None:
                incoming.stream.fail(error)
            self._conn.calls_changed()

    def fail_all(self, error: RpcError) -> None:
        for call_id in list(self._calls):
            self.drop(call_id, error)
        self.handlers.cancel_all()

    def _reply_error(self, call_id: int, error: RpcError) -> None:
        self._conn.send_if_open(Kind.ERROR, call_id, pack([error.code, error.message]))

    def _encode_result(self, result: Any) -> bytes:
        try:
            payload = pack(result)
        except (TypeError, ValueError, OverflowError) as exc:
            raise RpcError(f"the handler returned a value that cannot be sent: {exc}") from None
        if len(payload) > self._conn.config.max_frame_bytes:
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
        log.warning("handler %s failed for %s", method, self._conn.describe(), exc_info=exc)
        return RpcError(f"{method} failed: {type(exc).__name__}: {exc}")
