"""Streams: ordered messages and raw data flowing both ways inside one call.

Flow control is by credit: each side may have at most the peer's window of unacknowledged bytes in
flight on a stream; the receiver grants more (``CREDIT``) as its reader consumes data. A slow reader
therefore slows its sender down instead of filling memory, and other calls on the same connection
keep flowing.

``send_data`` cuts a buffer into chunk-sized frames and hands them to TLS without copying (the data is
encrypted before ``write`` returns). ``recv_data_into`` posts a destination buffer; chunks that arrive
while it is posted are decrypted straight into it. A reader that keeps its own buffers may lend them
(``lend_buffers``): data that arrives while nothing is posted then lands in one of those instead of a
fresh buffer of the connection's.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from core.net.errors import ProtocolViolation, StreamClosedError
from core.net.wire.frames import Frame, Kind
from core.util.msgpack_codec import pack, unpack

if TYPE_CHECKING:
    from typing_extensions import Buffer

    from core.net.wire.link import StreamLink


class EndOfStream(StreamClosedError):
    """The peer ended its side of the stream and everything it sent has been read."""


class StreamUsageError(StreamClosedError):
    """The next item on the stream is not of the kind the reader asked for."""


def as_bytes_view(data: Buffer) -> memoryview:
    """A flat byte view of any C-contiguous buffer (bytes, numpy arrays, tensors' ``.numpy()``)."""
    view = memoryview(data)
    if not view.c_contiguous:
        raise ValueError("stream data must be a C-contiguous buffer")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


class Stream:
    """One side of a bidirectional stream. Reading and writing may happen in different tasks."""

    def __init__(self, link: StreamLink, call_id: int, *, send_window: int) -> None:
        self._conn = link
        self.call_id = call_id
        self._chunk = link.config.stream_chunk_bytes
        self._recv_window = link.config.stream_window_bytes
        self._inbox: deque[tuple[Kind, Any]] = deque()
        self._inbox_bytes = 0
        self._unacked = 0
        self._reader: asyncio.Future[None] | None = None
        self._send_credit = send_window
        self._send_window = send_window
        self._credit_waiter: asyncio.Future[None] | None = None
        self._posted: memoryview | None = None
        self._posted_reserved = 0
        self._posted_done = 0
        self._lender: Callable[[int], memoryview | None] | None = None
        self._lent: deque[memoryview] = deque()
        """Buffers lent for frames still arriving, in the order the frames come."""
        self._sent_end = False
        self._error: BaseException | None = None

    # ---- sending -------------------------------------------------------------------------------

    async def send(self, message: Any) -> None:
        """Send one msgpack-able value."""
        payload = pack(message)
        await self._acquire(len(payload))
        self._conn.write_frame(Kind.MSG, self.call_id, payload)
        await self._conn.drain()

    async def send_data(self, data: Buffer) -> None:
        """Send raw bytes of any C-contiguous buffer, in chunks, honouring the peer's window."""
        view = as_bytes_view(data)
        chunk = self._chunk
        for offset in range(0, len(view), chunk):
            piece = view[offset : offset + chunk]
            await self._acquire(len(piece))
            await self._conn.pace_upload(len(piece))
            self._conn.write_data(self.call_id, piece)
            await self._conn.drain()

    def end(self) -> None:
        """Tell the peer nothing more will be sent on this side. Idempotent."""
        if self._sent_end or self._error is not None:
            return
        self._sent_end = True
        self._conn.write_frame(Kind.END, self.call_id)

    async def _acquire(self, n: int) -> None:
        if self._sent_end:
            raise StreamClosedError("this side of the stream was already ended")
        need = min(n, self._send_window)
        while self._send_credit < need:
            self._raise_if_failed()
            self._credit_waiter = asyncio.get_running_loop().create_future()
            try:
                await self._credit_waiter
            finally:
                self._credit_waiter = None
        self._raise_if_failed()
        self._send_credit -= n

    # ---- receiving -----------------------------------------------------------------------------

    async def recv_message(self) -> Any:
        """The next msgpack value; ``EndOfStream`` once the peer has ended its side."""
        kind, item = await self._next_item()
        if kind is not Kind.MSG:
            raise StreamUsageError("expected a message on the stream, but raw data came next")
        self._inbox.popleft()
        self._consumed(len(item))
        return unpack(item)

    async def next_is_data(self) -> bool:
        """Wait for the next item: True when it is raw data, False for a message (nothing is read);
        ``EndOfStream`` once the peer has ended its side."""
        kind, _ = await self._next_item()
        return kind is Kind.DATA

    async def recv_data(self) -> memoryview:
        """The next chunk of raw data, as it arrived."""
        kind, item = await self._next_item()
        if kind is not Kind.DATA:
            raise StreamUsageError("expected raw data on the stream, but a message came next")
        self._inbox.popleft()
        self._consumed(len(item))
        return item  # type: ignore[no-any-return]

    async def recv_data_into(self, destination: Buffer) -> None:
        """Fill ``destination`` exactly with the next raw bytes of the stream."""
        dest = as_bytes_view(destination)
        if dest.readonly:
            raise ValueError("recv_data_into needs a writable buffer")
        filled = 0
        while filled < len(dest):
            if self._inbox:
                kind, item = self._inbox[0]
                if kind is not Kind.DATA:
                    what = "the stream ended" if kind is Kind.END else "a message came"
                    raise StreamUsageError(f"{what} after {filled} of {len(dest)} expected bytes")
                n = min(len(item), len(dest) - filled)
                dest[filled : filled + n] = item[:n]
                filled += n
                if n == len(item):
                    self._inbox.popleft()
                else:
                    self._inbox[0] = (kind, item[n:])
                self._consumed(n)
                continue
            if self._error is not None:
                if type(self._error) is StreamClosedError:  # the call ended normally
                    raise StreamUsageError(
                        f"the call finished after {filled} of {len(dest)} expected bytes"
                    )
                raise self._error
            # nothing queued: post the rest of the destination for direct delivery
            self._posted = dest[filled:]
            self._posted_reserved = self._posted_done = 0
            try:
                await self._wait()
            finally:
                filled += self._posted_done
                self._posted = None

    async def recv_data_or_message(self, destination: Buffer) -> tuple[bool, Any]:
        """Fill ``destination`` with the next raw bytes, unless a message comes first.

        Returns ``(True, None)`` once the data is in ``destination`` (received straight into it when
        nothing was queued), or ``(False, message)`` when a message came before any data.
        """
        dest = as_bytes_view(destination)
        if not self._inbox:
            self._posted = dest
            self._posted_reserved = self._posted_done = 0
            try:
                while not self._inbox and self._posted_done < len(dest):
                    self._raise_if_failed()
                    await self._wait()
            finally:
                done = self._posted_done
                self._posted = None
            if done == len(dest):
                return True, None
            if done:
                raise StreamUsageError(f"a message came after {done} of {len(dest)} bytes")
        kind, item = await self._next_item()
        if kind is Kind.MSG:
            self._inbox.popleft()
            self._consumed(len(item))
            return False, unpack(item)
        await self.recv_data_into(dest)
        return True, None

    async def _next_item(self) -> tuple[Kind, Any]:
        while not self._inbox:
            self._raise_if_failed()
            await self._wait()
        kind, item = self._inbox[0]
        if kind is Kind.END:
            raise EndOfStream("the peer ended the stream")
        return kind, item

    async def _wait(self) -> None:
        self._reader = asyncio.get_running_loop().create_future()
        try:
            await self._reader
        finally:
            self._reader = None

    def _wake(self) -> None:
        if self._reader is not None and not self._reader.done():
            self._reader.set_result(None)

    def _consumed(self, n: int) -> None:
        self._inbox_bytes -= n
        self._grant(n)

    def _grant(self, n: int) -> None:
        self._unacked += n
        if self._unacked >= self._recv_window // 4 and self._error is None:
            self._conn.send_if_open(Kind.CREDIT, self.call_id, pack(self._unacked))
            self._unacked = 0

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def lend_buffers(self, lender: Callable[[int], memoryview | None] | None) -> None:
        """Data frames that arrive while no destination is posted land in ``lender(length)``, a
        writable buffer of exactly ``length`` bytes (or, when it gives None, in the connection's
        own), and ``recv_data`` returns that buffer as it is. The frames are queued as any others:
        only the memory they land in changes (a reader that recycles its buffers saves the page
        faults of a fresh one per frame). None stops lending."""
        self._lender = lender

    # ---- called by the connection --------------------------------------------------------------

    def direct_target(self, length: int) -> memoryview | None:
        """Where an incoming data frame of ``length`` bytes may land directly, if anywhere."""
        posted = self._posted
        if posted is None or self._inbox or len(posted) - self._posted_reserved < length:
            return self._borrow(length)
        start = self._posted_reserved
        self._posted_reserved += length
        return posted[start : start + length]

    def _borrow(self, length: int) -> memoryview | None:
        if self._lender is None or self._error is not None:
            return None
        buffer = self._lender(length)
        if buffer is not None:
            if len(buffer) != length or buffer.readonly:
                raise ValueError("a lent buffer must be writable and exactly the frame's length")
            self._lent.append(buffer)
        return buffer

    def on_frame(self, frame: Frame) -> None:
        kind = frame.kind
        if kind is Kind.CREDIT:
            granted = unpack(frame.payload)
            if not isinstance(granted, int) or granted <= 0:
                raise ProtocolViolation(f"invalid credit grant {granted!r}")
            self._send_credit += granted
            if self._credit_waiter is not None and not self._credit_waiter.done():
                self._credit_waiter.set_result(None)
            return
        if kind is Kind.END:
            self._inbox.append((kind, None))
            self._wake()
            return
        size = len(frame.payload)
        if frame.direct and self._lent and frame.payload is self._lent[0]:
            self._lent.popleft()  # it landed in a lent buffer: queued below like any other frame
        elif frame.direct:
            self._posted_done += size
            self._grant(size)
            if self._posted is not None and self._posted_done >= len(self._posted):
                self._wake()
            return
        payload = frame.payload
        posted = self._posted
        if kind is Kind.DATA and posted is not None and not self._inbox:
            # A frame that started before the reader posted its buffer: copy it in now, so the inbox
            # stays empty and the frames after it can land directly.
            start = self._posted_reserved
            n = min(size, len(posted) - start)
            posted[start : start + n] = payload[:n]
            self._posted_reserved += n
            self._posted_done += n
            self._grant(n)
            if self._posted_done >= len(posted):
                self._wake()
            if n == size:
                return
            payload, size = payload[n:], size - n
        self._inbox_bytes += size
        if self._inbox_bytes > self._recv_window + self._conn.config.max_frame_bytes:
            raise ProtocolViolation("the peer sent more stream data than its window allows")
        self._inbox.append((kind, payload))
        self._wake()

    def widen(self, window: int) -> None:
        """The peer's real window became known (it was assumed to be one chunk until then)."""
        extra = window - self._send_window
        if extra > 0:
            self._send_window = window
            self._send_credit += extra
            if self._credit_waiter is not None and not self._credit_waiter.done():
                self._credit_waiter.set_result(None)

    def fail(self, error: BaseException) -> None:
        """The call is over (finished, cancelled or the connection died): wake everyone."""
        if self._error is None:
            self._error = error
        self._wake()
        if self._credit_waiter is not None and not self._credit_waiter.done():
            self._credit_waiter.set_result(None)

    @property
    def failed(self) -> bool:
        return self._error is not None

    @property
    def queued_bytes(self) -> int:
        """Bytes received and not read yet: at most our window plus one frame (more is a violation)."""
        return self._inbox_bytes
