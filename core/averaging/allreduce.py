"""AllReduce: one round of averaging, composed from its plan, its transfer and what wraps the transfer.

The plan (``round.plan``) decides the round before any byte moves; the transfer (``round.transfer``)
carries it out; error feedback rides on what the transfer sends (``round.feedback``), a round of several
groups averages each slot over its column (``round.columns``), and when the plan
says so, the verified round (``verified``) is the transfer's hooks and checks the reducers after it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from core.averaging.config import AveragerConfig
from core.averaging.messages import GroupSpec, ReduceRequest, ReduceSummary
from core.averaging.result import AveragingResult
from core.averaging.round.columns import Columns
from core.averaging.round.feedback import FeedbackOutgoing
from core.averaging.round.load_balancing import PlanCache
from core.averaging.round.outgoing import Outgoing
from core.averaging.round.plan import plan_round
from core.averaging.round.reducer import PartReducer
from core.averaging.round.tensors import TensorSet
from core.averaging.round.transfer import Transfer
from core.averaging.verified.verified_round import RoundVerification
from core.net.wire.stream import Stream

if TYPE_CHECKING:
    from core.net.host.host import Host
    from core.net.wire.rpc import CallContext


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
        columns: Columns | None = None,
    ) -> None:
        """``feedback``: shaped like ``tensors``; receives, for every chunk we send (our own part
        included), what the codec left out of it (error feedback: the caller adds it to what it
        averages next time), and zero where nothing was sent."""
        self.host = host
        self.plan = plan_round(
            group, index, tensors.sizes, weight=weight, config=config, plans=plans,
            slots=group.slots,
        )  # fmt: skip
        outgoing = Outgoing(tensors) if feedback is None else FeedbackOutgoing(tensors, feedback)
        self.verification: RoundVerification | None = None
        if self.plan.verified:
            self.verification = RoundVerification(
                host, self.plan, config=config.verification, aggregation=config.aggregation
            )
        self.transfer = Transfer(
            host, self.plan, tensors, config, outgoing=outgoing, hooks=self.verification,
            columns=columns,
        )  # fmt: skip

    @property
    def reducer(self) -> PartReducer | None:
        """Our part's reducer (None when we reduce nothing); it may be replaced before the round
        runs (the demo's lying reducer, ``core.swarm.byzantine``)."""
        return self.transfer.reducer

    @reducer.setter
    def reducer(self, reducer: PartReducer | None) -> None:
        self.transfer.reducer = reducer

    async def run(self) -> AveragingResult:
        started = time.monotonic()
        await self.transfer.exchange()
        if self.verification is not None:
            await self.verification.conclude(self.transfer)
        result = self.transfer.land()
        result.seconds = time.monotonic() - started
        return result

    async def serve(
        self, ctx: CallContext, request: ReduceRequest, stream: Stream
    ) -> ReduceSummary:
        """A member's stream of its chunks of our part (the averager's handler brings it here)."""
        return await self.transfer.serve(ctx, request, stream)
