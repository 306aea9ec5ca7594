"""One member's side of a butterfly all-reduce (reduce-scatter, then all-gather), chunk by chunk.

The concatenated vector is cut into one part per member, sized by the load-balancing program; member j
reduces part j. Every member with data opens one stream to each other reducer (the sender always dials,
so members behind NAT take part) and sends that reducer its chunks of the part; on the same stream the
reducer returns each averaged chunk as soon as it is ready, so reducing one chunk overlaps receiving the
next. Members that reduce nothing (client mode) or have no data (auxiliary) follow the same rules with
a zero share or a zero weight.

Nothing is copied on the way out: chunks are views of the caller's tensors. Uncompressed chunks coming
in land in arrays lent to the stream and recycled (a reducer's inputs once their chunk is aggregated,
results once copied into the tensors): a fresh buffer per chunk cost more in page faults than the copy.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from core.averaging.config import AveragerConfig
from core.averaging.messages import (
    REDUCE,
    GroupSpec,
    InputCommitment,
    ReduceRequest,
    ReduceSummary,
)
from core.averaging.result import AveragingResult
from core.averaging.round.load_balancing import PeerCapacity, PlanCache, split
from core.averaging.round.reducer import PartReducer, Spares
from core.averaging.round.tensors import Span, TensorSet, layout, schema_hash
from core.averaging.verified.verified_round import RoundVerification
from core.codecs import NONE
from core.codecs.arrays import F32
from core.codecs.chunks import decode, encode, encoded_size
from core.net.errors import InvalidRequestError, NetError, PermissionDeniedError
from core.net.wire.stream import Stream
from core.util.errors import ConfigError, WireFormatError
from core.util.tasks import BackgroundTasks

if TYPE_CHECKING:
    from core.net.host.host import Host
    from core.net.wire.rpc import CallContext

log = logging.getLogger(__name__)


PIPELINE_FILL_SECONDS = 0.05
MIN_CHUNK_BYTES = 64 * 1024


def chunk_elements(
    config: AveragerConfig, capacities: Sequence[PeerCapacity] = (), reducers: int = 1
) -> int:
    """Values per chunk: ``config.chunk_bytes``, smaller when a member announced a slow link.

    Until a reducer has every member's first chunk, nothing comes back, and after the last one the
    last averages still have to travel; a slow member feeds all reducers at once, so each of its
    streams moves at its link speed over the number of reducers. On a 2.5 MB/s link a 1 MiB chunk
    costs 0.4 s of waiting per round; chunks that take ~50 ms on each stream of the slowest announced
    link keep that short. Every member computes the same size from the same group list.
    """
    size = config.chunk_bytes
    links = [min(c.upload, c.download) for c in capacities if c.upload > 0 and c.download > 0]
    if links:
        per_stream = min(links) / max(1, reducers)
        size = min(size, max(MIN_CHUNK_BYTES, int(per_stream * PIPELINE_FILL_SECONDS)))
    return max(1024, size // 4)


class AllReduce:
    """A round, from this member's point of view."""

    def __init__(
        self,
        host: Host,
        group: GroupSpec,
        index: int,
        tensors: TensorSet,
        *,
        weight: float,
        config: AveragerConfig,
        plans: PlanCache | None = None,
        feedback: TensorSet | None = None,
    ) -> None:
        """``feedback``: shaped like ``tensors``; receives, for every chunk we send (our own part
        included), what the codec left out of it (error feedback: the caller adds it to what it
        averages next time), and zero where nothing was sent."""
        self.host = host
        self.group = group
        self.index = index
        self.tensors = tensors
        self.me = group.members[index]
        self.weight = 0.0 if self.me.auxiliary else float(weight)
        self.config = config
        self.codec = config.codec
        members = group.members
        capacities = [m.capacity() for m in members]
        wire_bytes = (
            encoded_size(self.codec.resolve(tensors.total), tensors.total) if tensors.total else 0
        )
        self.plan = (plans or PlanCache()).plan(capacities, wire_bytes)
        self.parts = split(tensors.total, self.plan.shares)
        self.chunk = chunk_elements(config, capacities, sum(1 for p in self.parts if p > 0))
        if self.codec.sparse and config.verification.enabled:
            raise ConfigError(
                f"codec {self.codec.name}: reducers cannot be verified (the mean goes back in "
                "another codec); turn verification off or use another codec"
            )
        self.spans = layout(tensors.sizes, self.parts, self.chunk, self.codec, len(members))
        self.schema = schema_hash(tensors.sizes, self.codec, self.chunk)
        if config.verification.enabled:
            # verifiers recompute with their own settings: members that differ in them must not
            # meet, or honest reducers would be accused
            settings = repr(config.aggregation).encode()
            self.schema = hashlib.sha256(self.schema + settings).digest()[: len(self.schema)]
        self.feedback = feedback
        if feedback is not None:
            if feedback.sizes != tensors.sizes:
                raise ValueError("feedback tensors must have the shapes of the averaged ones")
            for view in feedback.views:
                view[:] = 0.0
        self.receivers = [i for i, m in enumerate(members) if not m.auxiliary]
        self.reducer: PartReducer | None = None
        if self.parts[index] > 0:
            self.reducer = PartReducer(
                self.spans[index],
                set(self.receivers),
                len(self.receivers),
                config.sender_timeout,
                aggregation=config.aggregation,
                peers=[m.peer for m in members],
                part=index,
            )
        self.result = AveragingResult(
            group.group_id, [m.peer for m in members], index, tensors.total, parts=list(self.parts)
        )
        self._tasks = BackgroundTasks(f"allreduce-{group.group_id.hex()[:8]}")
        self._results = Spares()
        """Arrays the reducers' results land in before they are copied into the tensors."""
        self._lent: dict[Stream, deque[tuple[memoryview, F32]]] = {}
        """The arrays lent to each reducer's stream and not yet received into, in order."""
        self._averaged: list[tuple[int, int]] = []
        self.verification: RoundVerification | None = None
        if config.verification.enabled:
            self.verification = RoundVerification(
                host,
                group,
                index,
                self.spans,
                weight=self.weight,
                config=config.verification,
                aggregation=config.aggregation,
            )

    # ---- running ---------------------------------------------------------------------------------

    async def run(self) -> AveragingResult:
        started = time.monotonic()
        work = []
        for part, spans in enumerate(self.spans):
            if not spans:
                continue
            if part == self.index:
                work.append(self._local_part())
            elif not self.me.auxiliary:
                work.append(self._remote_part(part))
        try:
            async with asyncio.timeout(self.config.allreduce_timeout):
                await asyncio.gather(*work)
                if self.reducer is not None:
                    await self._reducer_served()
        except TimeoutError:
            self.result.errors.append(
                f"the all-reduce did not finish within {self.config.allreduce_timeout:g} s"
            )
        finally:
            if self.reducer is not None:
                self.reducer.fail("the round is over")
                for sender, reason in self.reducer.excluded.items():
                    self.result.excluded.setdefault(self.group.members[sender].peer, reason)
                self.result.weights = {
                    self.group.members[sender].peer: weight
                    for sender, weight in self.reducer.weights.items()
                    if sender not in self.reducer.excluded
                }
                self.result.findings.extend(self.reducer.findings)
            await self._tasks.close()
        if self.verification is not None:
            await self._verify(self.verification)
        if not self.me.auxiliary:
            self._account_missing()
            self.tensors.commit()
        else:
            self.result.averaged_elements = self.result.total_elements
        self.result.seconds = time.monotonic() - started
        return self.result

    async def _reducer_served(self) -> None:
        """Wait until every chunk of our part is finished (its receivers are served by the handler)."""
        assert self.reducer is not None
        await self.reducer.wait_finished()

    async def _local_part(self) -> None:
        """Our own part: contribute our data directly, then take the averages like everyone."""
        reducer = self.reducer
        assert reducer is not None
        spans = self.spans[self.index]
        verification = self.verification
        if self.me.auxiliary or self.weight <= 0:
            reducer.contributes_nothing(self.index)
        else:
            for i, span in enumerate(spans):
                if verification is not None:
                    verification.own_input(i, self.tensors.view(span), self.weight)
                values = self.tensors.view(span)
                if span.codec.sparse:
                    # our own contribution as sparse as everyone's: the mean then fits the codec
                    # it goes back in, and what is left out waits for the next round like theirs
                    values = self._sent(span, encode(span.codec, values))
                reducer.contribute(self.index, i, values, self.weight)
        if self.me.auxiliary and verification is None:
            return
        for i, span in enumerate(spans):
            if self.me.auxiliary:
                await self._seal_chunk(i)
                continue
            outcome = await reducer.result(i)
            if verification is not None:
                verification.own_result(i, outcome.values, outcome.inputs)
            self._apply(span, outcome.weight, outcome.values)
            reducer.taken(i)

    async def _seal_chunk(self, index: int) -> None:
        """An auxiliary reducer takes no results, but seals them (when verification is on)."""
        assert self.reducer is not None
        assert self.verification is not None
        try:
            outcome = await self.reducer.result(index)
        except RuntimeError:
            return  # every receiver took it already, and the first to take it sealed it
        self.verification.own_result(index, outcome.values, outcome.inputs)

    async def _remote_part(self, part: int) -> None:
        reducer_info = self.group.members[part]
        spans = self.spans[part]
        request = ReduceRequest(
            self.group.group_id,
            self.index,
            part,
            self.weight,
            self.schema,
            self.verification is not None,
        )
        received = 0
        try:
            async with self.host.open_stream(
                reducer_info.peer, REDUCE, request, timeout=self.config.allreduce_timeout
            ) as call:
                lent = self._lent[call.stream] = deque()
                call.stream.lend_buffers(_lender(self._results.take, spans, lent))
                sending = None
                if self.weight > 0:
                    sending = self._tasks.spawn(
                        f"send-{part}", self._send_part(call.stream, part, spans), awaited=True
                    )
                try:
                    for i, span in enumerate(spans):
                        async with asyncio.timeout(self.config.reducer_timeout):
                            weight, included = await self._receive_chunk(call.stream, i, span)
                        if weight > 0 and not included and self.weight > 0:
                            # told per chunk: known even if the reducer dies before its summary
                            self.result.excluded.setdefault(
                                self.me.peer, f"reducer {part} averaged chunk {i} without our data"
                            )
                        self._apply(span, weight, None)
                        received = i + 1
                    # The summary first: a reducer that left us out closes the stream while we may
                    # still be sending, and what it says about us matters more than that error.
                    summary = await call.result()
                finally:
                    if sending is not None and not sending.done():
                        sending.cancel()
                    call.stream.lend_buffers(None)
                    del self._lent[call.stream]
                for sender, reason in summary.excluded.items():
                    if 0 <= sender < len(self.group.members):
                        self.result.excluded.setdefault(self.group.members[sender].peer, reason)
                if self.verification is not None:
                    self.verification.take_seal(part, summary.seal)
        except (NetError, TimeoutError) as exc:
            reason = "timed out" if isinstance(exc, TimeoutError) else str(exc)
            self.result.errors.append(
                f"part {part} (reducer {reducer_info.peer.short()}): {reason}"
            )
            self.result.failed_reducers.append(reducer_info.peer)
            log.info(
                "averaging part %d with %s failed after %d chunks: %s",
                part,
                reducer_info.peer,
                received,
                reason,
            )

    async def _send_part(self, stream: Stream, part: int, spans: list[Span]) -> None:
        verification = self.verification
        for i, span in enumerate(spans):
            data = encode(span.codec, self.tensors.view(span))
            if self.feedback is not None and span.codec is not NONE:
                self._sent(span, data)
            if verification is not None:
                # signed before the reducer has it: what it aggregates is what we vouch for
                await stream.send(verification.commit(part, i, data).to_wire())
            await stream.send_data(data)
            self.result.bytes_sent += len(data)

    def _sent(self, span: Span, data: bytes | memoryview) -> F32:
        """What the reducer gets of this chunk (decoded); the rest goes to ``feedback``."""
        sent = decode(span.codec, data, span.count)
        if self.feedback is not None:
            np.subtract(self.tensors.view(span), sent, out=self.feedback.view(span))
        return sent

    async def _receive_chunk(self, stream: Stream, index: int, span: Span) -> tuple[float, bool]:
        """An averaged chunk: data, then ``[index, weight, whether our data is in it]``; no data and
        weight 0 if the chunk was not averaged.

        Uncompressed data is copied into the tensor from the array it landed in, lent from
        ``_results`` and given back at once (posting the tensor itself for it rarely won the race
        with the next frame, and a fresh buffer per chunk costs page faults).
        """
        view = self.tensors.view(span)
        codec = span.returned
        raw = codec is NONE
        buffer = bytearray(0 if raw else encoded_size(codec, span.count))
        if raw:
            got_data = await stream.next_is_data()
            if got_data:
                data = await _receive_exactly(stream, encoded_size(codec, span.count))
                view[:] = np.frombuffer(data, dtype=np.float32)
                landed = _taken_back(self._lent.get(stream, deque()), data)
                if landed is not None:
                    self._results.give([landed])
            trailer = await stream.recv_message()
        else:
            got_data, trailer = await stream.recv_data_or_message(buffer)
            if got_data:
                trailer = await stream.recv_message()
        if not (
            isinstance(trailer, list)
            and len(trailer) == 3
            and trailer[0] == index
            and isinstance(trailer[1], (int, float))
            and isinstance(trailer[2], bool)
        ):
            raise InvalidRequestError(f"unexpected chunk trailer {trailer!r}")
        weight = float(trailer[1])
        if got_data != (weight > 0):
            raise InvalidRequestError("a chunk's data and its weight disagree")
        if got_data and not raw:
            decode(codec, buffer, span.count, out=view)
        return weight, trailer[2]

    def _apply(self, span: Span, weight: float, values: np.ndarray | None) -> None:
        """Record a chunk's outcome (and copy the reducer's own values in, for our own part)."""
        if weight <= 0:
            return  # nothing averaged: the local values stay, and _account_missing reports the range
        if values is not None:
            self.tensors.view(span)[:] = values
        self.result.averaged_elements += span.count
        self._averaged.append((span.start, span.end))
        low = self.result.group_weight
        self.result.group_weight = weight if low == 0 else min(low, weight)
        by_weight = self.result.values_by_weight
        by_weight[weight] = by_weight.get(weight, 0) + span.count

    async def _verify(self, verification: RoundVerification) -> None:
        verification.seal_now()
        # before the caller gets its tensors back: a verifier compares the values it received
        failed = frozenset(self.result.failed_members())
        self.result.findings.extend(await verification.verify(self.tensors.view, failed))
        if not self.me.auxiliary:
            self._undo_lies()

    def _undo_lies(self) -> None:
        """Put back what a reducer we caught lying sent us: the aggregate we recomputed, or our own
        input (the part then counts as not averaged, as when its reducer fails)."""
        assert self.verification is not None
        verification = self.verification
        kept: dict[int, int] = {}
        stuck: dict[int, int] = {}
        for repair in verification.repairs():
            span = self.spans[repair.part][repair.chunk]
            if repair.values is None:
                stuck[repair.part] = stuck.get(repair.part, 0) + span.count
                continue
            self.tensors.view(span)[:] = repair.values
            if not repair.averaged and (span.start, span.end) in self._averaged:
                self._averaged.remove((span.start, span.end))
                self.result.averaged_elements -= span.count
                kept[repair.part] = kept.get(repair.part, 0) + span.count
        for part in verification.distrusted():
            peer = self.group.members[part].peer
            if peer not in self.result.failed_reducers:
                self.result.failed_reducers.append(peer)
            said = f"part {part} (reducer {peer.short()}): caught lying, its values were not used"
            if kept.get(part):
                said += f"; {kept[part]} values kept our own"
            if stuck.get(part):
                said += (
                    f"; {stuck[part]} values stay as it sent them (we had no input to go back to)"
                )
            self.result.errors.append(said)

    def _account_missing(self) -> None:
        covered = sorted(self._averaged)
        missing = []
        position = 0
        for start, end in covered:
            if start > position:
                missing.append((position, start))
            position = max(position, end)
        if position < self.tensors.total:
            missing.append((position, self.tensors.total))
        self.result.missing = _merge(missing)

    # ---- serving our part to the others ----------------------------------------------------------

    async def serve(
        self, ctx: CallContext, request: ReduceRequest, stream: Stream
    ) -> ReduceSummary:
        """A member's stream of its chunks of our part: reduce them and send the averages back."""
        reducer = self.reducer
        members = self.group.members
        if reducer is None or request.part != self.index:
            raise InvalidRequestError("this peer reduces no such part in that group")
        if not 0 <= request.sender < len(members) or members[request.sender].peer != ctx.peer:
            raise PermissionDeniedError("the caller is not that member of the group")
        if request.schema != self.schema:
            raise InvalidRequestError(
                "tensor shapes, codec, chunk size or aggregation settings differ from this peer's"
            )
        if request.commit != (self.verification is not None):
            raise InvalidRequestError("one of us verifies reducers and the other does not")
        sender = request.sender
        spans = self.spans[self.index]
        if members[sender].auxiliary or request.weight <= 0:
            reducer.contributes_nothing(sender)
        else:
            self._tasks.spawn(f"take-{sender}", self._take(stream, sender, spans, request.weight))
        if not members[sender].auxiliary:
            for i in range(len(spans)):
                outcome = await reducer.result(i)
                if self.verification is not None:
                    self.verification.own_result(i, outcome.values, outcome.inputs)
                if outcome.weight > 0:
                    await stream.send_data(outcome.data)
                    self.result.bytes_sent += len(outcome.data)
                await stream.send([i, outcome.weight, sender in outcome.included])
                reducer.taken(i)
        seal = None if self.verification is None else await self.verification.own_seal()
        return ReduceSummary(len(spans), dict(reducer.excluded), seal)

    async def _take(self, stream: Stream, sender: int, spans: list[Span], weight: float) -> None:
        reducer = self.reducer
        assert reducer is not None
        verification = self.verification
        lent: deque[tuple[memoryview, F32]] = deque()
        if verification is None:  # a verifier may still read what it accepted after aggregation
            stream.lend_buffers(_lender(reducer.spare, spans, lent))
        try:
            for i, span in enumerate(spans):
                commitment = None
                if verification is not None:
                    commitment = InputCommitment.from_wire(await stream.recv_message())
                data = await _receive_exactly(stream, encoded_size(span.codec, span.count))
                if verification is not None and commitment is not None:
                    refused = verification.accept(sender, weight, commitment, data)
                    if refused is not None:
                        reducer.exclude(sender, refused)
                        return
                received = _taken_back(lent, data)
                if span.codec is not NONE:
                    reducer.contribute_encoded(sender, i, data, span.codec, weight)
                elif received is not None:
                    reducer.contribute_received(sender, i, received, weight)
                else:
                    reducer.contribute(sender, i, np.frombuffer(data, dtype=np.float32), weight)
        except (NetError, ValueError, WireFormatError) as exc:
            reducer.exclude(sender, f"its stream failed: {exc}")
        finally:
            stream.lend_buffers(None)


def _lender(
    take: Callable[[int], F32], spans: list[Span], lent: deque[tuple[memoryview, F32]]
) -> Callable[[int], memoryview | None]:
    """Lends arrays from ``take`` (recycled ones) for uncompressed chunks, each frame of a whole
    chunk's length (the usual frame: a chunk is at most one stream chunk): a fresh 1 MiB buffer
    per chunk cost more in page faults than adding the chunk up."""
    whole = {encoded_size(s.codec, s.count) for s in spans if s.returned is NONE}

    def lend(length: int) -> memoryview | None:
        if length not in whole:
            return None
        array = take(length // 4)
        view = array.data.cast("B")
        lent.append((view, array))
        return view

    return lend


def _taken_back(lent: deque[tuple[memoryview, F32]], data: memoryview) -> F32 | None:
    """The spare array ``data`` was received into, if it was lent (what was lent before it and not
    returned went into a chunk of several frames, which ``_receive_exactly`` copied)."""
    if not any(view is data for view, _ in lent):
        return None
    while True:
        view, array = lent.popleft()
        if view is data:
            return array


async def _receive_exactly(stream: Stream, size: int) -> memoryview:
    """The next ``size`` bytes: the frame's own buffer when one frame holds them (no copy)."""
    first = await stream.recv_data()
    if len(first) == size:
        return first
    buffer = bytearray(size)
    buffer[: len(first)] = first
    filled = len(first)
    while filled < size:
        more = await stream.recv_data()
        if filled + len(more) > size:
            raise InvalidRequestError("a chunk arrived longer than its span")
        buffer[filled : filled + len(more)] = more
        filled += len(more)
    return memoryview(buffer)


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        elif end > start:
            merged.append((start, end))
    return merged
