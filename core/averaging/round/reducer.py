"""Aggregating one part of the vector: chunk by chunk, weighted by samples, over the senders that delivered.

Each chunk is finished as soon as every expected sender has delivered it; a sender that has not
delivered the current chunk after ``sender_timeout`` seconds in which this reducer was listening is left
out of that chunk and every later one, and the reason is recorded. The time is counted in steps, and a
step that ends far too late (the event loop was held up: a garbage-collection pause, a starved process,
a long computation) does not count: data that arrived meanwhile is still unread in our sockets, and when
the loop runs again, an expired timer would run before it is read and leave out senders that were on
time (at most ``sender_timeout`` of such stalls are forgiven per chunk). A chunk's inputs are held until
it is complete and then aggregated at once (``aggregation.aggregate_chunk``): the screening checks need
every sender's chunk before they can say which to trust. A sender whose chunk the checks reject is left
out of that chunk and every later one, like a sender that timed out, and a ``Finding`` records why; so
does a sender that CenteredClip had to clip hard (it stays in). The aggregate is encoded once and sent
to every receiver; the reducer keeps ``decode(encode(aggregate))`` for itself, so every member ends with
the same values even when the codec is lossy. A chunk's inputs are released as soon as it is aggregated,
its result once every receiver has taken it: memory is at most senders x chunk for each chunk received
but not finished.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from core.averaging.result import Finding
from core.averaging.robust.aggregation import (
    CLIP_WEIGHT,
    AggregationConfig,
    Workspace,
    aggregate_chunk,
)
from core.averaging.round.columns import Columns, column_outcome
from core.averaging.round.tensors import Span
from core.codecs import NONE, Codec
from core.codecs.arrays import F32
from core.codecs.chunks import decode, encode
from core.trust.peer_id import PeerID
from core.util.errors import BarnraiseError

log = logging.getLogger(__name__)

WEIGHT = "weight"
STEPS = 8
"""``sender_timeout`` is waited in this many steps, so that a stall anywhere in it is noticed."""


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
    inputs: frozenset[int] = frozenset()
    """Every sender whose chunk went into ``aggregate_chunk`` (the included and the screened): what
    a verifier recomputes the chunk from (``verifier``)."""
    screened: frozenset[int] = frozenset()
    """The senders whose data the screens left out (each receiver is told whether it was one:
    what it sent of the chunk is then dropped, not sent again, ``feedback``)."""


@dataclass
class _Chunk:
    index: int
    span: Span
    aggregate: ChunkResult | None = None
    """With columns: the group's mean, held until its slot's column has averaged it."""
    inputs: dict[int, F32] = field(default_factory=dict)
    """Each sender's values, held until the chunk is complete (released when it is aggregated)."""
    weights: dict[int, float] = field(default_factory=dict)
    decoded: list[F32] = field(default_factory=list)
    """The arrays of ``Spares`` that this chunk's inputs were decoded into."""
    got: set[int] = field(default_factory=set)
    done: asyncio.Future[ChunkResult] | None = None
    takers: int = 0


class Spares:
    """Arrays to decode chunks into, reused once their chunk is aggregated: holding every sender's
    chunk means several fresh arrays per chunk, and a fresh page costs a fault on first touch."""

    def __init__(self) -> None:
        self._free: dict[int, list[F32]] = {}

    def take(self, count: int) -> F32:
        free = self._free.get(count)
        return free.pop() if free else np.empty(count, dtype=np.float32)

    def give(self, arrays: list[F32]) -> None:
        for array in arrays:
            self._free.setdefault(array.size, []).append(array)


class PartReducer:
    def __init__(
        self,
        spans: Sequence[Span],
        expected: set[int],
        receivers: int,
        sender_timeout: float,
        *,
        aggregation: AggregationConfig | None = None,
        peers: Sequence[PeerID] = (),
        part: int = 0,
        columns: Columns | None = None,
        slots: Sequence[int] = (),
        spawn: Callable[[str, Coroutine[Any, Any, None]], object] | None = None,
    ) -> None:
        """``peers`` are the group's members in order (findings name them); ``part`` is ours.
        With ``columns`` (a round of several groups), each chunk's mean waits until every chunk of
        its slot (``slots``: the slot of each chunk) is aggregated, and goes back as its column's
        mean, averaged over the other groups in a task ``spawn`` starts (``round.columns``)."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self.spans = spans
        self.active = set(expected)
        """Senders whose data is still expected."""
        self.excluded: dict[int, str] = {}
        self.findings: list[Finding] = []
        """What the checks found against senders (see ``result.Finding``), in the order found."""
        self.weights: dict[int, float] = {}
        """The weight each sender claimed with its first chunk to us (its samples: what the
        backbone credits a member that is gone before its record says the round landed)."""
        self.capped: dict[int, float] = {}
        """Sender -> the least weight it counted with in a chunk, where its claim was above the
        bound (``aggregation.bounded_weights``)."""
        self.along: dict[int, tuple[float, float, float]] = {}
        """Sender -> its chunks' sums along the others' mean (``ChunkAggregate.along``), added
        up over the chunks it was included in."""
        self._aggregation = aggregation or AggregationConfig()
        self._workspace = Workspace()
        self._spares = Spares()
        self._peers = list(peers)
        self._part = part
        self._receivers = receivers
        self._timeout = sender_timeout
        self._chunks = [_Chunk(i, span, done=loop.create_future()) for i, span in enumerate(spans)]
        self._columns = columns if columns is not None and spawn is not None else None
        self.column_groups = 0
        """The most groups a column of ours averaged over (0: none formed, or no columns)."""
        self.column_bytes = [0, 0]
        """Chunk bytes our columns sent and received."""
        self._slots = list(slots)
        self._spawn = spawn
        if self._columns is not None and len(self._slots) != len(self._chunks):
            raise ValueError("with columns, every chunk needs its slot")
        self._timer: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._heard = 0
        """Steps of the current chunk's wait in which the loop was free to read the senders' data."""
        self._stalled = 0
        """Steps of it that the loop was held up through (forgiven up to ``STEPS``)."""
        self._current = 0
        self._all_done = asyncio.Event()
        self._arm()

    @property
    def finished(self) -> bool:
        return self._current >= len(self._chunks)

    def contributes_nothing(self, sender: int) -> None:
        """The sender has weight 0 (or only reduces): it only receives results."""
        if sender in self.active:
            self.active.discard(sender)
            self._advance()

    def exclude(self, sender: int, reason: str) -> None:
        if self._leave_out(sender, reason):
            self._advance()

    def _leave_out(self, sender: int, reason: str) -> bool:
        """Stop expecting the sender and drop what it sent ahead; False if it was not expected."""
        if sender not in self.active:
            return False
        self.active.discard(sender)
        self.excluded[sender] = reason
        for chunk in self._chunks[self._current :]:
            chunk.inputs.pop(sender, None)
            chunk.weights.pop(sender, None)
        return True

    def _wants(self, sender: int, chunk: _Chunk) -> bool:
        """The sender is still expected and has not delivered this chunk, which is still open."""
        return (
            sender in self.active
            and sender not in chunk.got
            and chunk.done is not None
            and not chunk.done.done()
        )

    def contribute(self, sender: int, index: int, values: F32, weight: float) -> None:
        """Hold a sender's (decoded) values for chunk ``index``; late or unexpected data is ignored.

        The reducer keeps a reference, not a copy: ``values`` must not change until the chunk is
        finished (a received frame's own buffer, or our own tensor, which only the result writes).
        """
        chunk = self._chunks[index]
        if not self._wants(sender, chunk):
            return
        if not (math.isfinite(weight) and weight > 0):
            # a weight is the sender's own claim: NaN or infinity would poison every average
            reason = f"its weight {weight} is not a finite positive number"
            self._record(sender, index, WEIGHT, weight, reason)
            self.exclude(sender, reason)
            return
        chunk.inputs[sender] = values
        chunk.weights[sender] = weight
        self.weights.setdefault(sender, weight)
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
        """Decode into an array of the chunk's own (held until the chunk is finished)."""
        chunk = self._chunks[index]
        if not self._wants(sender, chunk):
            return
        values = decode(codec, data, chunk.span.count, out=self._spares.take(chunk.span.count))
        chunk.decoded.append(values)
        self.contribute(sender, index, values, weight)

    def spare(self, count: int) -> F32:
        """An array of ``count`` values to receive a sender's chunk into (``contribute_received``):
        one given back by an aggregated chunk when there is one, its pages already mapped."""
        return self._spares.take(count)

    def contribute_received(self, sender: int, index: int, values: F32, weight: float) -> None:
        """``contribute`` for values received into an array from ``spare``; the array goes back to
        the spares with the chunk's others once the chunk is aggregated."""
        chunk = self._chunks[index]
        if not self._wants(sender, chunk):
            return
        chunk.decoded.append(values)
        self.contribute(sender, index, values, weight)

    async def result(self, index: int) -> ChunkResult:
        future = self._chunks[index].done
        if future is None:
            raise RuntimeError(f"chunk {index} was already taken by every receiver")
        return await asyncio.shield(future)

    async def wait_finished(self) -> None:
        """Until every chunk is averaged (or given up on), over its column too with columns."""
        await self._all_done.wait()
        if self._columns is not None:
            pending = [c.done for c in self._chunks if c.done is not None and not c.done.done()]
            if pending:
                await asyncio.wait([asyncio.ensure_future(asyncio.shield(f)) for f in pending])

    def taken(self, index: int) -> None:
        """One receiver has the chunk; after the last one its buffers are released."""
        chunk = self._chunks[index]
        chunk.takers += 1
        if chunk.takers >= self._receivers and chunk.done is not None and chunk.done.done():
            chunk.done = None

    def fail(self, reason: str) -> None:
        """Give up (the round timed out): unfinished chunks are reported as not averaged."""
        for chunk in self._chunks:
            chunk.inputs.clear()
            chunk.weights.clear()
            chunk.decoded.clear()
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
        inputs, weights, decoded = chunk.inputs, chunk.weights, chunk.decoded
        chunk.inputs, chunk.weights, chunk.decoded = {}, {}, []
        if not inputs:
            self._spares.give(decoded)
            self._done(chunk, ChunkResult(0.0, b"", None, frozenset()))
            return
        outcome = aggregate_chunk(inputs, weights, self._aggregation, self._workspace)
        # the senders' buffers go now, not when the receivers are served (the aggregate is new)
        del inputs, weights
        self._spares.give(decoded)
        for sender, (statistic, value, why) in outcome.screened.items():
            reason = f"chunk {chunk.index} was screened out: {why}"
            if sender not in outcome.unattributed:
                self._record(sender, chunk.index, statistic, value, reason)
            # not exclude(): _advance() is what called us, and it goes on with one sender fewer
            self._leave_out(sender, reason)
        for sender, counted in outcome.capped.items():
            self.capped[sender] = min(counted, self.capped.get(sender, counted))
        for sender, sums in outcome.along.items():
            kept = self.along.get(sender, (0.0, 0.0, 0.0))
            self.along[sender] = (kept[0] + sums[0], kept[1] + sums[1], kept[2] + sums[2])
        for sender, factor in outcome.clipped.items():
            self._record(
                sender,
                chunk.index,
                CLIP_WEIGHT,
                factor,
                f"CenteredClip gave its chunk {chunk.index} {factor:.3g} of its weight",
            )
        if outcome.values is None or outcome.weight <= 0:
            self._done(chunk, ChunkResult(0.0, b"", None, frozenset()))
            return
        screened = frozenset(outcome.screened)
        inputs_used = outcome.included | screened
        mean = ChunkResult(
            outcome.weight, b"", outcome.values, outcome.included, inputs_used, screened
        )
        if self._columns is not None:
            self._done(chunk, mean)
            return
        chunk.done.set_result(_encoded(chunk.span, mean))

    def _done(self, chunk: _Chunk, mean: ChunkResult) -> None:
        """The group's ``mean`` of ``chunk`` (raw: nothing encoded yet with columns)."""
        assert chunk.done is not None
        if self._columns is None:
            chunk.done.set_result(mean)
            return
        chunk.aggregate = mean
        slot = self._slots[chunk.index]
        members = [c for c in self._chunks if self._slots[c.index] == slot]
        if all(c.aggregate is not None for c in members):
            assert self._spawn is not None
            self._spawn(f"column-{slot}", self._combine(slot, members))

    async def _combine(self, slot: int, chunks: list[_Chunk]) -> None:
        """Average the slot's group means over its column, then send them back (each chunk's
        future); whatever goes wrong, every future is answered."""
        assert self._columns is not None
        means = [c.aggregate for c in chunks if c.aggregate is not None]
        finals: list[ChunkResult] = [ChunkResult(0.0, b"", None, frozenset()) for _ in chunks]
        try:
            finals = await self._column(slot, chunks, means)
        except (BarnraiseError, OSError) as exc:
            log.info("the column of slot %d failed: %s", slot, exc)
        finally:
            for chunk, final in zip(chunks, finals, strict=True):
                chunk.aggregate = None
                if chunk.done is not None and not chunk.done.done():
                    chunk.done.set_result(final)

    async def _column(
        self, slot: int, chunks: list[_Chunk], means: list[ChunkResult]
    ) -> list[ChunkResult]:
        assert self._columns is not None
        if len(means) != len(chunks) or any(m.values is None or m.weight <= 0 for m in means):
            # a chunk of the group averaged over nothing: its zeros would drag the column's
            # mean down, so the group's own means stand for this slot
            return [
                _encoded(c.span, m)
                if m.values is not None and m.weight > 0
                else ChunkResult(0.0, b"", None, frozenset())
                for c, m in zip(chunks, means, strict=True)
            ]
        arrays = [m.values for m in means if m.values is not None]
        weight = max(m.weight for m in means)
        # the group's mean travels whole (a sparse one with every value of its members): what
        # the column's mean then leaves out, it leaves out for everyone, and they all see it.
        # Sized for a full group, not ours: every reducer of the column must send in one codec,
        # and a round of several groups has groups of fewer members than others
        codec = chunks[0].span.codec.for_whole_sum(self._columns.slots)
        result = await self._columns.combine(slot, arrays, weight, codec)
        if result is not None:
            self.column_groups = max(self.column_groups, len(result.members))
            self.column_bytes[0] += result.bytes_sent
            self.column_bytes[1] += result.bytes_received
        column = column_outcome(result, [c.span.count for c in chunks], weight)
        finals = []
        for chunk, mean, array, fate in zip(chunks, means, arrays, column.chunks, strict=True):
            if not fate.landed:
                finals.append(ChunkResult(0.0, b"", None, frozenset()))
                continue
            included = mean.included if fate.ours else frozenset()
            landed = replace(mean, values=array, weight=column.weight, included=included)
            finals.append(_encoded(chunk.span, landed))
        return finals

    def _record(self, sender: int, index: int, statistic: str, value: float, reason: str) -> None:
        # our own chunk screened out stays out, but a peer does not accuse itself
        if 0 <= sender < len(self._peers) and sender != self._part:
            peer = self._peers[sender]
            self.findings.append(Finding(peer, self._part, index, statistic, value, reason))

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._current < len(self._chunks):
            self._heard = self._stalled = 0
            self._step(self._current)
        else:
            self._all_done.set()

    def _step(self, index: int) -> None:
        self._due = self._loop.time() + self._timeout / STEPS
        self._timer = self._loop.call_at(self._due, self._expire, index)

    def _expire(self, index: int) -> None:
        """One step of the wait for the current chunk is over: after ``STEPS`` of them in which the
        loop was free, the senders still missing are left out."""
        self._timer = None
        if index != self._current:
            return
        # more than a step late: the loop was held up, and what came meanwhile is still unread
        late = self._loop.time() - self._due
        if late < self._timeout / STEPS or self._stalled >= STEPS:
            self._heard += 1
        else:
            self._stalled += 1
        if self._heard < STEPS:
            self._step(index)
            return
        chunk = self._chunks[index]
        for sender in sorted(self.active - chunk.got):
            self.exclude(sender, f"no data for chunk {index} within {self._timeout:g} s")
        self._advance()


def _encoded(span: Span, mean: ChunkResult) -> ChunkResult:
    """A ``mean`` as it goes back (its values raw, no data yet): encoded once, and decoded for the
    reducer itself so that it takes the same values as every receiver even when the codec is
    lossy."""
    assert mean.values is not None
    codec = span.returned
    data = encode(codec, mean.values)
    kept = mean.values if codec is NONE else decode(codec, data, span.count)
    return replace(mean, data=data, values=kept)
