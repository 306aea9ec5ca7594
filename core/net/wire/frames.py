"""The frame format, without any I/O (so it can be fuzzed byte by byte).

A frame is a 9-byte header ``>IBI`` (payload length, kind, call id) and the payload. Control payloads are
msgpack; ``DATA`` payloads are raw bytes. Odd call ids are opened by the dialing side, even ones by the
accepting side, so both can open calls on one connection without clashing. Call id 0 is the connection.

``FrameDecoder`` follows asyncio's buffered-protocol shape: ``get_buffer()`` says where the next bytes
should land and ``buffer_updated(n)`` reports how many did. Small frames are parsed out of a scratch
buffer; the payload of a large frame is received straight into a buffer from ``allocate`` when the
receiver has one waiting (stream data into its destination, so big tensors are not copied on the way
in). Otherwise the payload's buffer grows as its bytes arrive, doubling from ``GROW_FROM``: a header
that announces 8 MiB and is followed by one byte costs the receiver ``GROW_FROM``, not 8 MiB, so the
memory a sender can pin is what it actually sent (times two at most). Each frame is handed to
``on_frame`` as soon as it is complete, before the next header is read, so that ``allocate`` always
sees the effect of every earlier frame.

The scratch buffer is made on the first read: a connection that never gets past its TLS handshake
costs nothing here.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from dataclasses import dataclass

from core.net.errors import FrameTooLargeError, ProtocolViolation

HEADER = struct.Struct(">IBI")
HEADER_SIZE = HEADER.size
MAX_CALL_ID = 0xFFFFFFFF


class Kind(enum.IntEnum):
    HELLO = 1  # call 0: msgpack map, the first frame each side sends
    PING = 2  # call 0: opaque bytes, answered by PONG with the same bytes
    PONG = 3
    GOAWAY = 4  # call 0: msgpack reason; no new calls will be accepted
    OPEN = 16  # msgpack [method, timeout, flags, request]
    MSG = 17  # msgpack value on a stream
    DATA = 18  # raw bytes on a stream
    END = 19  # the sender will send nothing more on this stream
    RESULT = 20  # msgpack response; the call is over
    ERROR = 21  # msgpack [code, message]; the call is over
    CANCEL = 22  # the caller gave up
    CREDIT = 23  # msgpack int: bytes the receiver consumed, so the sender may send that much more


_KINDS = frozenset(int(kind) for kind in Kind)


@dataclass(slots=True)
class Frame:
    kind: Kind
    call_id: int
    payload: memoryview
    direct: bool = False
    """True when the payload was received straight into a buffer from ``allocate``."""


def encode_header(kind: Kind, call_id: int, length: int) -> bytes:
    return HEADER.pack(length, kind, call_id)


def encode_frame(kind: Kind, call_id: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(len(payload), kind, call_id) + payload


OnFrame = Callable[[Frame], None]
Allocate = Callable[[Kind, int, int], memoryview | None]
"""(kind, call id, length) -> the receiver's destination of exactly ``length`` bytes, or None."""

GROW_FROM = 64 * 1024
"""First size of a growing payload buffer (it doubles as bytes arrive, up to the frame's length)."""


def _no_destination(kind: Kind, call_id: int, length: int) -> memoryview | None:
    return None


class FrameDecoder:
    """Incremental frame parser. Raises ``ProtocolViolation`` on the first malformed byte."""

    def __init__(
        self,
        max_frame_bytes: int,
        on_frame: OnFrame,
        *,
        scratch_bytes: int = 64 * 1024,
        allocate: Allocate = _no_destination,
    ) -> None:
        self.max_frame_bytes = max_frame_bytes
        """Longest payload accepted; the owner may change it between frames (tighter before hello)."""
        self._on_frame = on_frame
        self._scratch_bytes = scratch_bytes
        self._view = memoryview(b"")  # the scratch buffer, made on the first read
        self._start = 0  # first unparsed byte in scratch
        self._end = 0  # one past the last received byte in scratch
        self._allocate = allocate
        # a large payload being received into its own buffer: ``_big`` is a destination of the
        # payload's exact length, ``_growing`` a buffer that grows with it; the first
        # ``_big_filled`` bytes of either count
        self._big: memoryview | None = None
        self._growing: bytearray | None = None
        self._big_filled = 0
        self._big_frame: Frame | None = None
        self._big_length = 0
        self._small_limit = scratch_bytes - HEADER_SIZE

    @property
    def held_bytes(self) -> int:
        """Bytes of buffer this decoder holds now (scratch plus a large payload being received)."""
        big = self._big if self._big is not None else self._growing
        return len(self._view) + (len(big) if big is not None else 0)

    def get_buffer(self) -> memoryview:
        if self._big is not None:
            return self._big[self._big_filled :]
        if self._growing is not None:
            if self._big_filled == len(self._growing):
                self._grow()
            # a view made for this read only: the buffer can then grow in place before the next
            return memoryview(self._growing)[self._big_filled :]
        if not self._view:
            self._view = memoryview(bytearray(self._scratch_bytes))
        if self._start:
            # move the unparsed tail to the front; it is shorter than one header plus a small payload
            leftover = self._end - self._start
            self._view[:leftover] = self._view[self._start : self._end]
            self._start, self._end = 0, leftover
        return self._view[self._end :]

    def buffer_updated(self, n: int) -> None:
        """Account for ``n`` new bytes, handing each completed frame to ``on_frame``."""
        if self._big is not None or self._growing is not None:
            self._big_filled += n
            if self._big_filled == self._big_length:
                frame = self._big_frame
                assert frame is not None
                if self._growing is not None:
                    frame.payload = memoryview(self._growing)
                self._big = self._growing = self._big_frame = None
                self._on_frame(frame)
            return
        self._end += n
        self._parse()

    def _parse(self) -> None:
        view = self._view
        while self._end - self._start >= HEADER_SIZE:
            length, kind_value, call_id = HEADER.unpack_from(view, self._start)
            if kind_value not in _KINDS:
                raise ProtocolViolation(f"unknown frame kind {kind_value}")
            if length > self.max_frame_bytes:
                raise FrameTooLargeError(
                    f"frame of {length} bytes exceeds the limit of {self.max_frame_bytes}"
                )
            kind = Kind(kind_value)
            body = self._start + HEADER_SIZE
            available = self._end - body
            if length <= self._small_limit:
                if available < length:
                    return
                payload = bytes(view[body : body + length])
                self._start = body + length
                self._on_frame(Frame(kind, call_id, memoryview(payload)))
                continue
            # a large payload: it gets its own buffer; copy in what already arrived
            taken = min(available, length)
            destination = self._allocate(kind, call_id, length)
            if destination is not None and len(destination) != length:
                raise RuntimeError("allocate() returned a buffer of the wrong size")
            growing = None
            if destination is None:
                # no view of it is kept until it is complete, so that it can grow in place
                growing = bytearray(min(max(taken, GROW_FROM), length))
                growing[:taken] = view[body : body + taken]
                frame = Frame(kind, call_id, memoryview(b""))
            else:
                destination[:taken] = view[body : body + taken]
                frame = Frame(kind, call_id, destination, True)
            self._start = body + taken
            if taken == length:
                if growing is not None:
                    frame.payload = memoryview(growing)
                self._on_frame(frame)
                continue
            self._big, self._growing = destination, growing
            self._big_filled, self._big_frame = taken, frame
            self._big_length = length
            self._start = self._end = 0
            return
        if self._start == self._end:
            self._start = self._end = 0

    def _grow(self) -> None:
        """Double the buffer (up to the payload's length), in place when nothing holds a view of it:
        a fresh buffer at each doubling, with a copy of what had arrived, took eight times as long
        as receiving into one buffer of the payload's length (1 MiB frames, the all-reduce's)."""
        growing = self._growing
        assert growing is not None
        size = len(growing)
        extra = min(size, self._big_length - size)
        try:
            if extra == size:
                growing *= 2  # one reallocation; the copy it makes lands where data will go anyway
            else:
                growing += bytes(extra)
        except BufferError:  # a view of it is still alive (a transport that kept its last target)
            grown = bytearray(size + extra)
            grown[:size] = growing
            self._growing = grown

    def feed(self, data: bytes | memoryview) -> None:
        """Push bytes through ``get_buffer``/``buffer_updated`` (tests; transports without buffers)."""
        data = memoryview(data)
        while data:
            target = self.get_buffer()
            n = min(len(target), len(data))
            target[:n] = data[:n]
            del target  # released before the next get_buffer, as a transport's read target is
            data = data[n:]
            self.buffer_updated(n)
