"""Averaging one part of the vector: chunk by chunk, weighted by samples, over the senders that delivered.

Each chunk is finished as soon as every expected sender has delivered it; a sender that has not
delivered the current chunk ``sender_timeout`` seconds after it became current is left out of that chunk
and every later one, and the reason is recorded. The average is encoded once and sent to every receiver;
the reducer keeps ``decode(encode(average))`` for itself, so every member ends with the same values even
when the codec is lossy. A chunk's buffers are released once every receiver has taken it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np

from core.averaging.codecs import F32, Codec, decode, encode
from core.averaging.tensors import Span


@dataclass
class ChunkResult:
    weight: float
    """Total weight of the senders included; 0 means nothing was averaged for this chunk."""
    data: bytes | memoryview
    """The encoded average (empty when ``weight`` is 0)."""
    values: F32 | None
    """The average as the reducer applies it to itself (decoded, so identical to what others get)."""
    included: frozenset[int]
    """The senders whose data went into the average (each receiver is told whether it was one)."""


@dataclass
class _Chunk:
    span: Span
    sum: F32 | None = None
    weight: float = 0.0
    got: set[int] = field(default_factory=set)
    done: asyncio.Future[ChunkResult] | None = None
    takers: int = 0


class _Scratch:
    """A reusable float32 buffer, grown on demand (no allocation per chunk)."""

    def __init__(self) -> None:
        self._buffer = np.empty(0, dtype=np.float32)

    def get(self, count: int) -> F32:
        if self._buffer.size < count:
            self._buffer = np.empty(count, dtype=np.float32)
        return self._buffer[:count]


class PartReducer:
    def __init__(
        self, spans: list[Span], expected: set[int], receivers: int, sender_timeout: float
    ) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self.spans = spans
        self.active = set(expected)
        """Senders whose data is still expected."""
        self.excluded: dict[int, str] = {}
        self._receivers = receivers
        self._timeout = sender_timeout
        self._chunks = [_Chunk(span, done=loop.create_future()) for span in spans]
        self._timer: asyncio.TimerHandle | None = None
        self._current = 0
        self._weighting = _Scratch()
        self._decoding = _Scratch()
        self._all_done = asyncio.Event()
        self._arm()

    @property
    def finished(self) -> bool:
        return self._current >= len(self._chunks)

    def contributes_nothing(self, sender: int) -> None:
        """The sender has weight 0 (or is auxiliary): it only receives results."""
        if sender in self.active:
            self.active.discard(sender)
            self._advance()

    def exclude(self, sender: int, reason: str) -> None:
        if sender in self.active:
            self.active.discard(sender)
            self.excluded[sender] = reason
            self._advance()

    def contribute(self, sender: int, index: int, values: F32, weight: float) -> None:
        """Add a sender's (decoded) values for chunk ``index``; late or unexpected data is ignored."""
        chunk = self._chunks[index]
        if (
            sender not in self.active
            or sender in chunk.got
            or chunk.done is None
            or chunk.done.done()
        ):
            return
        if chunk.sum is None:
            chunk.sum = np.zeros(chunk.span.count, dtype=np.float32)
        if weight == 1.0:
            chunk.sum += values
        else:
            scratch = self._weighting.get(values.size)
            np.multiply(values, np.float32(weight), out=scratch)
            chunk.sum += scratch
        chunk.weight += weight
        chunk.got.add(sender)
        self._advance()

    def contribute_encoded(
        self,
        sender: int,
        index: int,
        data: bytes | bytearray | memoryview,
        codec: Codec,
        weight: float,
    ) -> None:
        span = self._chunks[index].span
        values = decode(codec, data, span.count, out=self._decoding.get(span.count))
        self.contribute(sender, index, values, weight)

    async def result(self, index: int) -> ChunkResult:
        future = self._chunks[index].done
        if future is None:
            raise RuntimeError(f"chunk {index} was already taken by every receiver")
        return await asyncio.shield(future)

    async def wait_finished(self) -> None:
        """Until every chunk is averaged (or given up on)."""
        await self._all_done.wait()

    def taken(self, index: int) -> None:
        """One receiver has the chunk; after the last one its buffers are released."""
        chunk = self._chunks[index]
        chunk.takers += 1
        if chunk.takers >= self._receivers and chunk.done is not None and chunk.done.done():
            chunk.done = None
            chunk.sum = None

    def fail(self, reason: str) -> None:
        """Give up (the round timed out): unfinished chunks are reported as not averaged."""
        for chunk in self._chunks:
            if chunk.done is not None and not chunk.done.done():
                chunk.done.set_result(ChunkResult(0.0, b"", None, frozenset()))
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._current = len(self._chunks)
        self._all_done.set()

    def _advance(self) -> None:
        """Finish every chunk, in order, that has all the data it is still waiting for."""
        moved = False
        while self._current < len(self._chunks):
            chunk = self._chunks[self._current]
            if not self.active.issubset(chunk.got):
                break
            self._finish(chunk)
            self._current += 1
            moved = True
        if moved:
            self._arm()

    def _finish(self, chunk: _Chunk) -> None:
        assert chunk.done is not None
        weight = chunk.weight
        if weight <= 0 or chunk.sum is None:
            chunk.done.set_result(ChunkResult(0.0, b"", None, frozenset()))
            return
        average = chunk.sum
        average /= np.float32(weight)
        codec = chunk.span.codec
        data = encode(codec, average)
        values = average if codec is Codec.NONE else decode(codec, data, average.size)
        chunk.done.set_result(ChunkResult(weight, data, values, frozenset(chunk.got)))

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._current < len(self._chunks):
            self._timer = self._loop.call_later(self._timeout, self._expire, self._current)
        else:
            self._all_done.set()

    def _expire(self, index: int) -> None:
        self._timer = None
        if index != self._current:
            return
        chunk = self._chunks[index]
        for sender in sorted(self.active - chunk.got):
            self.exclude(sender, f"no data for chunk {index} within {self._timeout:g} s")
        self._advance()
