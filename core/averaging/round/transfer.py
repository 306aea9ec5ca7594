"""Transfer: carrying out a round's plan, chunk by chunk (reduce-scatter, then all-gather).

Member j reduces part j. Every member that takes the averages back opens one stream to each other
reducer (the sender always dials, so members behind NAT take part) and, when it has weight, sends
that reducer its chunks of the part; on the same stream the reducer returns each averaged chunk as
soon as it is ready, so reducing one chunk overlaps receiving the next. Our own part goes straight
into our ``PartReducer``.

The transfer does what its ``RoundPlan`` says and calls its ``RoundHooks`` at fixed points; what it
sends of each chunk is ``Outgoing``'s. So it knows nothing of verification or error feedback, which
are wrapped around it.

Nothing is copied on the way out: chunks are views of the caller's tensors. Uncompressed chunks coming
in land in arrays lent to the stream and recycled (a reducer's inputs once their chunk is aggregated,
results once copied into the tensors): a fresh buffer per chunk cost more in page faults than the copy.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from core.averaging.config import AveragerConfig
from core.averaging.messages import REDUCE, ReduceRequest, ReduceSummary
from core.averaging.result import AveragingResult
from core.averaging.robust.alignment import Alignment
from core.averaging.round.columns import Columns
from core.averaging.round.hooks import RoundHooks
from core.averaging.round.outgoing import Outgoing
from core.averaging.round.plan import RoundPlan
from core.averaging.round.reducer import PartReducer, Spares
from core.averaging.round.tensors import Span, TensorSet
from core.codecs import NONE
from core.codecs.arrays import F32
from core.codecs.chunks import decode, encoded_size
from core.net.errors import InvalidRequestError, NetError, PermissionDeniedError
from core.net.wire.stream import Stream
from core.util.errors import WireFormatError
from core.util.tasks import BackgroundTasks

if TYPE_CHECKING:
    from core.net.host.host import Host
    from core.net.wire.rpc import CallContext

log = logging.getLogger(__name__)


class Transfer:
    """One round's bytes, from this member's point of view."""

    def __init__(
        self,
        host: Host,
        plan: RoundPlan,
        tensors: TensorSet,
        config: AveragerConfig,
        *,
        outgoing: Outgoing | None = None,
        hooks: RoundHooks | None = None,
        columns: Columns | None = None,
    ) -> None:
        """``columns``: the round has several groups, and the plan deals slots
        (``round.columns``)."""
        self.host = host
        self.plan = plan
        self.tensors = tensors
        self.config = config
        self.outgoing = outgoing or Outgoing(tensors)
        self.hooks = hooks or RoundHooks()
        index = plan.index
        self.columns = columns if plan.slots else None
        self._tasks = BackgroundTasks(f"allreduce-{plan.group_id.hex()[:8]}")
        self.reducer: PartReducer | None = None
        if plan.parts[index] > 0:
            self.reducer = PartReducer(
                plan.spans[index],
                set(plan.senders),
                len(plan.receivers),
                config.sender_timeout,
                aggregation=config.aggregation,
                peers=plan.peers,
                part=index,
                columns=self.columns,
                slots=plan.slots[index] if plan.slots else (),
                spawn=self._tasks.spawn,
            )
        self.result = AveragingResult(
            plan.group_id, plan.peers, index, tensors.total, parts=list(plan.parts)
        )
        self._results = Spares()
        """Arrays the reducers' results land in before they are copied into the tensors."""
        self._lent: dict[Stream, deque[tuple[memoryview, F32]]] = {}
        """The arrays lent to each reducer's stream and not yet received into, in order."""
        self._averaged: list[tuple[int, int]] = []

    # ---- running ---------------------------------------------------------------------------------

    async def exchange(self) -> None:
        """Send, reduce and receive every part, until done or the round's time is up."""
        plan = self.plan
        work = []
        for part, spans in enumerate(plan.spans):
            if not spans:
                continue
            if part == plan.index:
                work.append(self._local_part())
            elif plan.index in plan.receivers:
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
                    self.result.excluded.setdefault(plan.members[sender].peer, reason)
                self.result.weights = {
                    plan.members[sender].peer: weight
                    for sender, weight in self.reducer.weights.items()
                    if sender not in self.reducer.excluded
                }
                self.result.capped = {
                    plan.members[sender].peer: weight
                    for sender, weight in self.reducer.capped.items()
                    if sender not in self.reducer.excluded
                }
                self.result.alignments = {
                    plan.members[sender].peer: Alignment(
                        weight, *self.reducer.along.get(sender, (0.0, 0.0, 0.0))
                    )
                    for sender, weight in self.reducer.weights.items()
                }
                self.result.findings.extend(self.reducer.findings)
                self.result.column_groups = self.reducer.column_groups
                self.result.bytes_sent += self.reducer.column_bytes[0]
                self.result.bytes_received += self.reducer.column_bytes[1]
            await self._tasks.close()

    def land(self) -> AveragingResult:
        """The round is over: say which ranges were averaged, and write the values back into
        tensors that had to be copied."""
        if self.plan.index in self.plan.receivers:
            self._account_missing()
            self.tensors.commit()
        else:
            self.result.averaged_elements = self.result.total_elements
        return self.result

    def overwrite(self, span: Span, values: F32, *, averaged: bool) -> bool:
        """Put ``values`` in place of what a chunk received; unless they are ``averaged``, the chunk
        then counts as not averaged. True if that took back a chunk counted as averaged."""
        self.tensors.view(span)[:] = values
        if averaged or (span.start, span.end) not in self._averaged:
            return False
        self._averaged.remove((span.start, span.end))
        self.result.averaged_elements -= span.count
        return True

    async def _reducer_served(self) -> None:
        """Wait until every chunk of our part is finished (its receivers are served by the handler)."""
        assert self.reducer is not None
        await self.reducer.wait_finished()

    async def _local_part(self) -> None:
        """Our own part: contribute our data directly, then take the averages like everyone."""
        reducer = self.reducer
        assert reducer is not None
        plan = self.plan
        spans = plan.spans[plan.index]
        if plan.weight <= 0:
            reducer.contributes_nothing(plan.index)
        else:
            for i, span in enumerate(spans):
                # committed as the reducer takes it (a sparse codec's own input is sparse too)
                own = self.outgoing.own(span)
                self.hooks.own_input(i, own, plan.weight)
                reducer.contribute(plan.index, i, own, plan.weight)
        for i, span in enumerate(spans):
            if plan.index not in plan.receivers:
                await self._watch_chunk(i)
                continue
            outcome = await reducer.result(i)
            self.hooks.reduced(i, outcome)
            included = plan.index in outcome.included
            if outcome.values is not None and plan.lands(outcome.weight):
                screened = plan.index in outcome.screened
                self.outgoing.landing(span, outcome.values, included, screened)
            self._apply(span, outcome.weight, outcome.values, included)
            reducer.taken(i)

    async def _watch_chunk(self, index: int) -> None:
        """A reducer that takes no results still tells the hooks when each chunk is finished."""
        assert self.reducer is not None
        try:
            outcome = await self.reducer.result(index)
        except RuntimeError:
            return  # every receiver took it already, and the first to take it told the hooks
        self.hooks.reduced(index, outcome)

    async def _remote_part(self, part: int) -> None:
        plan = self.plan
        reducer_info = plan.members[part]
        spans = plan.spans[part]
        request = ReduceRequest(
            plan.group_id, plan.index, part, plan.weight, plan.schema, self.hooks.commits
        )
        received = 0
        try:
            async with self.host.open_stream(
                reducer_info.peer, REDUCE, request, timeout=self.config.allreduce_timeout
            ) as call:
                lent = self._lent[call.stream] = deque()
                call.stream.lend_buffers(_lender(self._results.take, spans, lent))
                sending = None
                if plan.weight > 0:
                    sending = self._tasks.spawn(
                        f"send-{part}", self._send_part(call.stream, part, spans), awaited=True
                    )
                waits = self._waits(part)
                try:
                    for i, span in enumerate(spans):
                        async with asyncio.timeout(waits[i]):
                            weight, included = await self._receive_chunk(call.stream, i, span)
                        if weight > 0 and not included and plan.weight > 0:
                            # told per chunk: known even if the reducer dies before its summary
                            self.result.excluded.setdefault(
                                plan.me.peer, f"reducer {part} averaged chunk {i} without our data"
                            )
                        self._apply(span, weight, None, included)
                        received = i + 1
                    # The summary first: a reducer that left us out closes the stream while we may
                    # still be sending, and what it says about us matters more than that error.
                    summary = await call.result()
                finally:
                    if sending is not None:
                        # the reducer answered every chunk, or the part is over: the rest is of no use
                        sending.cancel()
                        await asyncio.wait([sending])
                        self._sent(part, sending)
                    call.stream.lend_buffers(None)
                    del self._lent[call.stream]
                for sender, reason in summary.excluded.items():
                    if 0 <= sender < len(plan.members):
                        self.result.excluded.setdefault(plan.members[sender].peer, reason)
                self.hooks.summarized(part, summary)
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

    def _waits(self, part: int) -> list[float]:
        """How long to wait for each chunk of ``part``'s means: a reducer's timeout, and before
        the first chunk of each slot, the time its column may take too."""
        spans = self.plan.spans[part]
        base = self.config.reducer_timeout
        if self.columns is None:
            return [base] * len(spans)
        slots = self.plan.slots[part]
        return [
            base + (self.columns.seconds if i == 0 or slots[i] != slots[i - 1] else 0.0)
            for i in range(len(spans))
        ]

    def _sent(self, part: int, sending: asyncio.Task[None]) -> None:
        """Report how sending our chunks of ``part`` ended, once it has.

        A network error is the stream's, and its receiving side reports it (or the reducer's
        answers say whether our data got in); any other error is ours, and nothing else would tell.
        """
        if sending.cancelled() or (exc := sending.exception()) is None:
            return
        peer = self.plan.members[part].peer
        if isinstance(exc, NetError):
            log.info("sending part %d to %s stopped: %s", part, peer, exc)
            return
        self.result.errors.append(
            f"part {part} (reducer {peer.short()}): sending failed: {type(exc).__name__}: {exc}"
        )
        log.error("sending part %d to %s failed", part, peer, exc_info=exc)

    async def _send_part(self, stream: Stream, part: int, spans: Sequence[Span]) -> None:
        for i, span in enumerate(spans):
            data = self.outgoing.encoded(span)
            await self.hooks.before_send(stream, part, i, data)
            await stream.send_data(data)
            self.result.bytes_sent += len(data)

    async def _receive_chunk(self, stream: Stream, index: int, span: Span) -> tuple[float, bool]:
        """An averaged chunk: data, then its trailer (``_trailer``); no data and weight 0 if the
        chunk was not averaged. The data goes into the tensor if the plan lets the
        chunk land.

        Uncompressed data is copied into the tensor from the array it landed in, lent from
        ``_results`` and given back at once (posting the tensor itself for it rarely won the race
        with the next frame, and a fresh buffer per chunk costs page faults).
        """
        view = self.tensors.view(span)
        codec = span.returned
        raw = codec is NONE
        buffer = bytearray(0 if raw else encoded_size(codec, span.count))
        data = None
        if raw:
            got_data = await stream.next_is_data()
            if got_data:
                data = await _receive_exactly(stream, encoded_size(codec, span.count))
            trailer = await stream.recv_message()
        else:
            got_data, trailer = await stream.recv_data_or_message(buffer)
            if got_data:
                trailer = await stream.recv_message()
        weight, included, screened = _trailer(trailer, index)
        if got_data != (weight > 0):
            raise InvalidRequestError("a chunk's data and its weight disagree")
        if not got_data:
            return weight, included
        self.result.bytes_received += encoded_size(codec, span.count)
        if data is not None:
            if self.plan.lands(weight):
                self._land(span, np.frombuffer(data, dtype=np.float32), included, screened)
            landed = _taken_back(self._lent.get(stream, deque()), data)
            if landed is not None:
                self._results.give([landed])
        elif self.plan.lands(weight):
            if self.outgoing.settles:
                self._land(span, decode(codec, buffer, span.count), included, screened)
            else:
                decode(codec, buffer, span.count, out=view)
        return weight, included

    def _land(self, span: Span, mean: F32, included: bool, screened: bool) -> None:
        """A chunk's mean replaces our values, once what it lacks of ours is kept aside."""
        self.outgoing.landing(span, mean, included, screened)
        self.tensors.view(span)[:] = mean

    def _apply(self, span: Span, weight: float, values: np.ndarray | None, included: bool) -> None:
        """Record a chunk's outcome (and copy the reducer's own values in, for our own part)."""
        if not self.plan.lands(weight):
            return  # nothing averaged: the local values stay, and _account_missing reports the range
        if values is not None:
            self.tensors.view(span)[:] = values
        self.result.averaged_elements += span.count
        if included:
            self.result.included_elements += span.count
        else:
            self.result.left_out.append((span.start, span.end))
        self._averaged.append((span.start, span.end))
        low = self.result.group_weight
        self.result.group_weight = weight if low == 0 else min(low, weight)
        by_weight = self.result.values_by_weight
        by_weight[weight] = by_weight.get(weight, 0) + span.count

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
        plan = self.plan
        members = plan.members
        if reducer is None or request.part != plan.index:
            raise InvalidRequestError("this peer reduces no such part in that group")
        if not 0 <= request.sender < len(members) or members[request.sender].peer != ctx.peer:
            raise PermissionDeniedError("the caller is not that member of the group")
        if request.schema != plan.schema:
            raise InvalidRequestError(
                "tensor shapes, codec, chunk size or aggregation settings differ from this peer's"
            )
        if request.commit != self.hooks.commits:
            raise InvalidRequestError("one of us verifies reducers and the other does not")
        sender = request.sender
        spans = plan.spans[plan.index]
        weight = plan.weight_of(sender, request.weight)
        if weight <= 0:
            reducer.contributes_nothing(sender)
        else:
            self._tasks.spawn(f"take-{sender}", self._take(stream, sender, spans, weight))
        if sender in plan.receivers:
            for i in range(len(spans)):
                outcome = await reducer.result(i)
                self.hooks.reduced(i, outcome)
                if outcome.weight > 0:
                    await stream.send_data(outcome.data)
                    self.result.bytes_sent += len(outcome.data)
                await stream.send(
                    [i, outcome.weight, sender in outcome.included, sender in outcome.screened]
                )
                reducer.taken(i)
        return ReduceSummary(len(spans), dict(reducer.excluded), await self.hooks.seal())

    async def _take(
        self, stream: Stream, sender: int, spans: Sequence[Span], weight: float
    ) -> None:
        reducer = self.reducer
        assert reducer is not None
        hooks = self.hooks
        lent: deque[tuple[memoryview, F32]] = deque()
        if not hooks.commits:  # else a verifier may still read what was accepted, after aggregation
            stream.lend_buffers(_lender(reducer.spare, spans, lent))
        try:
            for i, span in enumerate(spans):
                commitment = await hooks.before_take(stream)
                data = await _receive_exactly(stream, encoded_size(span.codec, span.count))
                self.result.bytes_received += len(data)
                refused = hooks.accept(sender, weight, commitment, data)
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


def _trailer(trailer: object, index: int) -> tuple[float, bool, bool]:
    """A chunk's trailer, ``[index, weight, whether our data is in it, whether the screens left
    it out]``, checked (a reducer that does not say the last is read as not screening)."""
    if not (
        isinstance(trailer, list)
        and len(trailer) in (3, 4)
        and trailer[0] == index
        and isinstance(trailer[1], (int, float))
        and all(isinstance(flag, bool) for flag in trailer[2:])
    ):
        raise InvalidRequestError(f"unexpected chunk trailer {trailer!r}")
    screened = len(trailer) == 4 and trailer[3]
    if screened and trailer[2]:
        raise InvalidRequestError(f"a chunk trailer both includes and screens us: {trailer!r}")
    return float(trailer[1]), trailer[2], screened


def _lender(
    take: Callable[[int], F32], spans: Sequence[Span], lent: deque[tuple[memoryview, F32]]
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
