"""RoundReplayer: a trainer replays a member's round when the backbone asks it to.

Alone, the backbone replays one member-round for every round of its own compute it spends on
checks, so the more members, the rarer each one's check, and a swarm that many newcomers join at
once waits for their first. A trainer the backbone trusts (its own rounds passed their replays)
can replay for it: the backbone sends ``ROUND_REPLAY`` with the member, the round's receipt (it
fetched it from the member and checked its claims) and the blocks of the work it drew; the trainer
replays the round from the anchors it kept as its own rounds began (``Anchors``: every member of
a round began it at the same anchor), on the member's batches, which the backbone relays
(``ROUND_RELAY``: it fetched them from the member once for every replayer; each must still be the
one the receipt names), on a replica of its own (float32, fresh moments, as the
backbone's), and answers a sketch of those blocks of its replay under the key the backbone drew
(``sketch``). The backbone compares it with the same sketch of the member's blocks itself
(``checker.RoundChecker``): a replayer computes, it never judges.

A replay takes the trainer's compute from its own rounds: it gives way to the trainer's own
exchange (``give_way``), runs one at a time, and stops being offered once the replays took
``SHARE`` of the trainer's time (``budget.Budget``), answering "busy" (``UnavailableError``) until
the share has filled again. Only the backbone asks (``asks``); a round this trainer cannot replay
(no anchor of its epoch kept, or another outer state) or whose batches do not come as the
receipt names them is answered "not found" or "invalid": the backbone then checks the round
itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import numpy as np

from core.net.errors import (
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
)
from core.net.host.host import Host
from core.net.wire.rpc import CallContext
from core.training.credit.checks.budget import Budget
from core.training.credit.checks.receipts import SampledBatch
from core.training.credit.checks.verdict import Caught
from core.training.diloco.checks.anchors import Anchors, Elsewhere, Unheld
from core.training.diloco.checks.fetch import round_batches
from core.training.diloco.checks.receipts import (
    ROUND_RELAY,
    ROUND_REPLAY,
    RelayRequest,
    ReplayedSketch,
    ReplayRequest,
    StepRequest,
    work_block_bytes,
)
from core.training.diloco.checks.replay import LossFn, replay
from core.training.diloco.checks.sketch import sketch
from core.training.diloco.state import DilocoState
from core.trust.peer_id import PeerID
from core.util.clock import SYSTEM_CLOCK, Clock
from core.util.msgpack_codec import pack
from core.worker.bridge import TrainingBridge

log = logging.getLogger(__name__)

SHARE = 0.05
"""Of a trainer's time, what replays for the backbone may take."""
KEPT_ANCHORS = 4
"""Anchors a replayer keeps: the rounds the backbone draws as they land, and with overlap the one
before each (``checker.STARTS``)."""
CALL_TIMEOUT = 10.0


class RoundReplayer:
    def __init__(
        self,
        replica: DilocoState,
        host: Host,
        *,
        bridge: TrainingBridge,
        loss: LossFn,
        share: float = SHARE,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """``replica``: the replayer's own, built like a member's (float32, no overlap, fresh
        moments). Its trainer says who may ask and what to give way to (``asks``,
        ``give_way``: ``DilocoOptimizer.replay_for_backbone``)."""
        if replica.overlap or not replica.fresh_moments:
            raise ValueError("a replayer's replica replays rounds: no overlap, fresh moments")
        self.replica = replica
        self._host = host
        self.bridge = bridge
        self.loss = loss
        self.asks: Callable[[PeerID], bool] = lambda _: False
        """Whether a caller is the backbone, the one peer that may ask (nobody until told)."""
        self.give_way: Callable[[], float] = lambda: 0.0
        """Called before each inner step of a replay: waits while the trainer's own round is
        exchanged, and says for how many seconds."""
        self.budget = Budget(share, clock)
        self.anchors = Anchors(KEPT_ANCHORS)
        self.replayed = 0
        """Rounds replayed for the backbone."""
        self.seconds = 0.0
        """Seconds of compute they took."""
        self.received = 0
        """Bytes received for them: the backbone's requests and the rounds' batches it relays."""
        self.sent = 0
        """Bytes sent for them: the sketches of the replayed blocks."""
        self._replaying = asyncio.Lock()

    def serve(self) -> None:
        self._host.router.add(ROUND_REPLAY, self._on_replay)

    def began(self, epoch: int, state: str, anchor: list[np.ndarray]) -> None:
        """A round begins at ``epoch`` from this anchor (copied: the trainer's moves on)."""
        self.anchors.began(epoch, state, anchor)

    async def _on_replay(self, ctx: CallContext, request: ReplayRequest) -> ReplayedSketch:
        if not self.asks(ctx.peer):
            raise PermissionDeniedError("only the backbone asks for replays")
        if self._replaying.locked() or not self.budget.allows():
            raise UnavailableError("busy: replaying, or past its share of replays")
        async with self._replaying:
            return await self._replay(request, ctx.peer)

    async def _replay(self, request: ReplayRequest, backbone: PeerID) -> ReplayedSketch:
        receipt = request.receipt
        try:
            start = self.anchors.start(receipt)
        except (Unheld, Elsewhere) as exc:
            raise NotFoundError(
                f"cannot replay the round of epoch {receipt.epoch}: {exc}"
            ) from None
        size, block_bytes = start.size, work_block_bytes(start.size)
        if -(-size * 4 // block_bytes) != len(receipt.work):
            raise InvalidRequestError("the receipt's work is not cut as this model's")
        fetched = 0

        async def ask(step: StepRequest) -> SampledBatch:
            nonlocal fetched
            relayed = RelayRequest(request.member, step.epoch, step.index)
            batch = await self._host.call(backbone, ROUND_RELAY, relayed, timeout=CALL_TIMEOUT)
            fetched += len(pack(batch.to_wire()))
            return batch

        try:
            batches = await round_batches(ask, receipt)
        except Caught as caught:
            raise InvalidRequestError(f"the round's batches: {caught.reason}") from None
        waited = 0.0

        def give_way() -> None:  # on the replay's thread: the time it waits is not its cost
            nonlocal waited
            waited += self.give_way()

        began = time.perf_counter()
        replayed = await self.bridge.run(replay, self.replica, start, batches, self.loss, give_way)
        spent = time.perf_counter() - began - waited
        self.budget.spend(spent)
        self.replayed += 1
        self.seconds += spent
        log.info("replayed %s's round of epoch %d for the backbone in %.1f s",
                 request.member[:12], receipt.epoch, spent)  # fmt: skip
        per_block = block_bytes // 4
        drawn = [replayed[i * per_block : (i + 1) * per_block] for i in request.blocks]
        answer = ReplayedSketch(sketch(np.concatenate(drawn), request.key).astype("<f4").tobytes(),
                                fetched)  # fmt: skip
        self.received += fetched + len(pack(request.to_wire()))
        self.sent += len(pack(answer.to_wire()))
        return answer
