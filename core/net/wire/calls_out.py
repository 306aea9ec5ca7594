"""The calls we open on a connection: ids, deadlines, cancellation and their outcomes.

Every call ends exactly once: with the peer's result, a typed error from the peer, our own deadline,
our own cancellation (which tells the peer to cancel its handler), or the connection's loss.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.net.errors import (
    CallCancelledError,
    ConnectionClosedError,
    DeadlineExceededError,
    FrameTooLargeError,
    ProtocolViolation,
    RpcError,
    StreamClosedError,
    error_from_code,
)
from core.net.wire.calls_in import FLAG_STREAM
from core.net.wire.frames import MAX_CALL_ID, Frame, Kind
from core.net.wire.stream import Stream
from core.util.msgpack_codec import pack, unpack

if TYPE_CHECKING:
    from core.net.wire.link import Link


class CallStream(Stream):
    """The caller's side of a streaming call: a ``Stream`` plus the call's final result."""

    def __init__(self, calls: OutgoingCalls, call_id: int, *, send_window: int) -> None:
        super().__init__(calls.link, call_id, send_window=send_window)
        self._calls = calls
        self.result_future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    async def result(self) -> Any:
        """Wait for the handler's response (raises the call's error, if it failed)."""
        return await asyncio.shield(self.result_future)

    def cancel(self) -> None:
        """Give up on the call; the remote handler is cancelled."""
        self._calls.abandon(self.call_id, CallCancelledError("cancelled by the caller"))

    @property
    def done(self) -> bool:
        return self.result_future.done()


@dataclass(slots=True)
class _Outgoing:
    method: str
    future: asyncio.Future[Any]
    stream: CallStream | None
    timer: asyncio.TimerHandle | None


class OutgoingCalls:
    """Tracks the calls we made on one connection until each one ends."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self._calls: dict[int, _Outgoing] = {}
        self._next_id = 1 if link.initiator else 2
        self.exhausted = False

    def __len__(self) -> int:
        return len(self._calls)

    def stream_for(self, call_id: int) -> Stream | None:
        outgoing = self._calls.get(call_id)
        return outgoing.stream if outgoing is not None else None

    def _open(self, method: str, request: Any, timeout: float, streaming: bool) -> int:
        conn = self.link
        if not conn.is_usable:
            why = f": {conn.close_reason}" if conn.close_reason else ""
            raise ConnectionClosedError(
                f"connection to {conn.describe()} is not accepting calls{why}"
            )
        payload = pack([method, timeout, FLAG_STREAM if streaming else 0, request])
        if len(payload) > conn.config.max_frame_bytes:
            raise FrameTooLargeError(
                f"the request to {method} ({len(payload)} bytes) exceeds the frame limit of "
                f"{conn.config.max_frame_bytes}; send large data on a stream"
            )
        call_id = self._next_id
        self._next_id += 2
        if self._next_id > MAX_CALL_ID:
            self.exhausted = True  # finish what runs; new calls go to a new connection
        conn.write_frame(Kind.OPEN, call_id, payload)
        return call_id

    def _register(
        self,
        call_id: int,
        method: str,
        timeout: float,
        stream: CallStream | None,
        deadline: float | None,
    ) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future = stream.result_future if stream is not None else loop.create_future()
        named = timeout if deadline is None else deadline
        timer = loop.call_later(timeout, self._on_deadline, call_id, named)
        self._calls[call_id] = _Outgoing(method, future, stream, timer)
        self.link.calls_changed()
        return future

    async def call(
        self, method: str, request: Any, timeout: float, deadline: float | None = None
    ) -> Any:
        """``deadline``: the caller's whole deadline, which the error names when ``timeout``
        passes (what dialing left of it is ``timeout``); None: ``timeout``."""
        call_id = self._open(method, request, timeout, streaming=False)
        future = self._register(call_id, method, timeout, None, deadline)
        try:
            return await future
        except asyncio.CancelledError:
            self.abandon(call_id, CallCancelledError("cancelled by the caller"))
            raise

    def open_stream(
        self, method: str, request: Any, timeout: float, deadline: float | None = None
    ) -> CallStream:
        """As ``call``, streaming."""
        call_id = self._open(method, request, timeout, streaming=True)
        stream = CallStream(self, call_id, send_window=self.link.peer_window)
        self._register(call_id, method, timeout, stream, deadline)
        return stream

    def on_reply(self, frame: Frame) -> None:
        call_id = frame.call_id
        if not self.link.is_ours(call_id) or call_id not in self._calls:
            return  # the caller already gave up on it
        value = unpack(frame.payload)
        if frame.kind is Kind.RESULT:
            self.finish(call_id, None, value)
            return
        well_formed = isinstance(value, list) and len(value) == 2
        if not (well_formed and all(isinstance(v, str) for v in value)):
            raise ProtocolViolation("malformed ERROR frame")
        self.finish(call_id, error_from_code(value[0], value[1], self.link.peer))

    def _on_deadline(self, call_id: int, timeout: float) -> None:
        outgoing = self._calls.get(call_id)
        if outgoing is None:
            return
        outgoing.timer = None
        where = self.link.describe()
        error = DeadlineExceededError(
            f"{outgoing.method} on {where} did not finish within {timeout:.3g} s"
        )
        self.abandon(call_id, error)

    def abandon(self, call_id: int, error: RpcError) -> None:
        """Stop waiting for a call we made and tell the peer to cancel its handler."""
        if call_id in self._calls:
            self.finish(call_id, error)
            self.link.send_if_open(Kind.CANCEL, call_id)

    def finish(self, call_id: int, error: BaseException | None, value: Any = None) -> None:
        outgoing = self._calls.pop(call_id, None)
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
        self.link.calls_changed()

    def peer_window_known(self, window: int) -> None:
        """The peer's hello arrived: streams opened before it may use its whole window."""
        for outgoing in self._calls.values():
            if outgoing.stream is not None:
                outgoing.stream.widen(window)

    def fail_all(self, error: RpcError) -> None:
        for call_id in list(self._calls):
            self.finish(call_id, error)
