"""RoundChecker: the backbone replays diloco members' rounds, and credit follows what the replays
support (``core.training.credit.checks.standing``, the rule dedloc's checks follow too).

When a round that began at epoch E lands, the backbone draws members to check among everyone
the round's plan dealt into its groups, its own and the others (``verdict.Verdicts.draw``: a
newcomer unless a check of it is under way, within half of its time, the one first seen first; a
trusted member at random, within ``budget`` of it). The groups' columns land one mean, so every
member of the round began it at the anchor the backbone holds, whichever group it averaged in (a
group that met no other lands apart, and its members' next rounds are judged neither way).
Nothing a member sent or filed tells it whether it will be drawn: its receipt was sealed before
the round's exchange. For each drawn member the
backbone asks the round's receipt (``receipts``), compares its samples with the weight the member
sent the round with (of another group, whose weight it did not see: the receipt's samples bound
the member's records instead, ``on_backed``, and a receipt not kept bounds them at 0), fetches
every batch (each must match its digest) and ``SAMPLED_BLOCKS`` blocks of the member's work drawn
at random (each must match its digest in the receipt, which bound them before anything was
drawn), all at once while the member keeps the round; then it replays the round on its own
replica from the anchor of E (``replay``; one replay at a time) and judges the blocks against the
replay at the member's precision (``replay.judge``). The replay runs on a thread of its own
and gives way to the backbone's own round: it waits before each inner step while the backbone's
exchange is under way (``give_way``, ``DilocoOptimizer.gate``). A round that carries the
samples of the round before (which landed less than half of its work) is checked with that
round: its receipt must count them, and it is replayed too. A member that no longer keeps what
it was asked for judges nothing (unreached), as one that cannot be reached.

Verdicts, as the dedloc checks give them (``CheckRecord``): ``passed``; ``caught`` (the work is
not its replay, a batch or a block is not what the receipt named, the weight sent is more than
the receipt's samples, or the member refused the check: signed evidence, ``round_*`` or
``work_refused``); ``unreached`` (a dial that failed, a timeout, a busy or closing member, no
receipt filed for a round it did not send); ``apart`` (the round cannot be replayed: it did not
start at the anchor the backbone holds for E, or the member says so, as a round that found no
group and went on in the next does). The last two judge nothing and hold the member's claims. A
replay that could not reach its member is made again at the next landings while the backbone
keeps the round's anchor (``STARTS``), and then expires, withdrawing what the member was paid on
trust since its last passed replay (``Verdicts.again``).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import torch

from core.averaging.sharing.digest import block_digests
from core.net.errors import MalformedResponseError, NotFoundError
from core.net.host.host import Host
from core.net.wire.rpc import Method, Req, Resp
from core.training.credit.book import CREDITED_KEPT
from core.training.credit.checks.fingerprint import batch_digest, unpack_batch
from core.training.credit.checks.standing import Standings
from core.training.credit.checks.verdict import (
    BUDGET,
    Apart,
    Caught,
    CheckRecord,
    Tally,
    Unclaimed,
    Verdicts,
)
from core.training.diloco.checks.ledger import KEPT
from core.training.diloco.checks.receipts import (
    ROUND_BATCH,
    ROUND_RECEIPT,
    ROUND_WORK,
    BlockRequest,
    RoundReceipt,
    RoundRequest,
    StepRequest,
    work_block_bytes,
)
from core.training.diloco.checks.replay import Arrival, LossFn, RoundStart, judge, replay
from core.training.diloco.state import DilocoState
from core.training.moderation.evidence import EvidenceBoard
from core.trust.peer_id import PeerID
from core.util.errors import WireFormatError
from core.util.msgpack_codec import pack
from core.util.tasks import BackgroundTasks
from core.worker.bridge import TrainingBridge

log = logging.getLogger(__name__)

SAMPLED_BLOCKS = 4
"""Blocks of a member's work compared with the replay (``work_block_bytes``: 16,384 parameters
each in the demo's model, a million in a billion-parameter one): a cheat's work lies far from its
replay in every part of the model, since skipping samples or steps changes every coordinate they
touch."""
STARTS = KEPT + 1
"""Epochs whose anchors the backbone keeps to replay rounds from: those of the rounds a member
keeps receipts of, and with overlap the one before (a round began at the anchor before the one
its work is measured from)."""
STATES = CREDITED_KEPT
"""Epochs whose outer state's digest it keeps: what records claim a round began from."""
CALL_TIMEOUT = 10.0
SEALED_WAIT = 5.0
"""Seconds a checker waits for a receipt the member has not filed yet (it seals its round before
the exchange, so one that landed is filed)."""
LATE_WAIT = 30.0
"""Seconds it waits for the receipt of a member of another group, whose exchange it did not see:
that group may have sealed and sent later (a slow member, a loaded machine)."""


@dataclass(frozen=True, slots=True)
class Anchor:
    """What the backbone held when a round began: where a replay starts."""

    state: str
    """The outer state's digest (``DilocoState.digest``)."""
    arrays: list[np.ndarray]

    @property
    def size(self) -> int:
        return sum(a.size for a in self.arrays)


class RoundChecker:
    def __init__(
        self,
        replica: DilocoState,
        host: Host,
        *,
        bridge: TrainingBridge,
        loss: LossFn,
        standings: Standings,
        evidence: EvidenceBoard,
        tasks: BackgroundTasks,
        user_of: Callable[[str], str | None] = lambda _: None,
        on_check: Callable[[CheckRecord], None] | None = None,
        on_backed: Callable[[str, int, int], None] = lambda *_: None,
        on_unreplayable: Callable[[str, int], None] = lambda *_: None,
        give_way: Callable[[], float] = lambda: 0.0,
        budget: float = BUDGET,
        rng: random.Random | None = None,
    ) -> None:
        """``replica``: the checker's own, built like a member's (float32, no overlap, fresh
        moments), never the backbone's outer state; ``host``: the backbone's, which calls the
        members; ``on_backed``: told (member, epoch, samples) what the receipt of a round the
        backbone did not take part in backs (0: none was kept), which bounds its claim;
        ``on_unreplayable``: told (member, epoch) of a round found not replayable from the anchor
        the backbone holds (``credit.RoundCredit.unreplayable``); ``give_way``: called on the
        replay's thread before each inner step, it waits while the backbone's own round is
        exchanged (``DilocoOptimizer.gate``) and says for how many seconds."""
        if replica.overlap or not replica.fresh_moments:
            raise ValueError("a checker's replica replays rounds: no overlap, fresh moments")
        self.replica = replica
        self._host = host
        self.bridge = bridge
        self.loss = loss
        self._tasks = tasks
        self.verdicts = Verdicts(
            "round", standings, evidence, user_of=user_of, on_check=on_check, budget=budget, rng=rng
        )
        self._rng = self.verdicts.rng
        self.on_backed = on_backed
        self.on_unreplayable = on_unreplayable
        self.give_way = give_way
        self._sent: OrderedDict[int, dict[str, float]] = OrderedDict()
        """Each landed round's senders with the samples they sent it with."""
        self._anchors: OrderedDict[int, Anchor] = OrderedDict()
        self._states: OrderedDict[int, str] = OrderedDict()
        """The outer state's digest at each epoch's start, kept as long as claims of it come."""
        self._replaying = asyncio.Lock()
        """One replay at a time: they share the replica."""

    @property
    def standings(self) -> Standings:
        return self.verdicts.standings

    @property
    def records(self) -> list[CheckRecord]:
        """The newest checks (for tests and the benchmark; the log keeps them all)."""
        return self.verdicts.records

    # ---- the backbone's side ---------------------------------------------------------------------

    def began(self, epoch: int, state: str, anchor: list[np.ndarray]) -> None:
        """A round begins at ``epoch`` from this anchor (copied: the backbone's moves on)."""
        self._anchors.pop(epoch, None)
        self._anchors[epoch] = Anchor(state, [np.array(a, np.float32, copy=True) for a in anchor])
        while len(self._anchors) > STARTS:
            self._anchors.popitem(last=False)
        self._states.pop(epoch, None)
        self._states[epoch] = state
        while len(self._states) > STATES:
            self._states.popitem(last=False)

    def state_at(self, epoch: int) -> str | None:
        """The outer state's digest when the round of ``epoch`` began here (None: not held)."""
        return self._states.get(epoch)

    def sent(self, epoch: int, weights: Mapping[str, float]) -> None:
        """The round that began at ``epoch`` landed with these senders and weights."""
        self._sent.pop(epoch, None)
        self._sent[epoch] = dict(weights)
        while len(self._sent) > STARTS:
            self._sent.popitem(last=False)

    def landed(self, epoch: int, weights: Mapping[str, float], others: Iterable[str] = ()) -> None:
        """The round that began at ``epoch`` landed with these senders of the backbone's group
        (and the samples each sent it with), and ``others`` in the round's other groups: check
        those drawn."""
        self.sent(epoch, weights)
        for peer, before in self.verdicts.again(lambda e: self._retries(e, epoch), epoch):
            self._tasks.spawn(f"round-check-{peer[:8]}-{before}", self.check(peer, before))
        if epoch not in self._anchors:
            return  # the backbone did not hold this round's anchor: nothing to replay from
        members = [*weights, *(p for p in others if p not in weights)]
        for peer in self.verdicts.draw(members):
            self._tasks.spawn(f"round-check-{peer[:8]}-{epoch}", self.check(peer, epoch))

    def _retries(self, before: int, newest: int) -> bool:
        """Whether a check of the round of ``before`` that could not reach its member can be made
        again as ``newest`` lands: the backbone keeps its anchor, and the member still keeps its
        receipt (its last ``KEPT``: past them, an honest member would answer that it keeps none,
        and be accused of a round it sent)."""
        return before in self._anchors and newest - before < KEPT

    # ---- one check -------------------------------------------------------------------------------

    async def check(self, peer: str, epoch: int) -> CheckRecord:
        """Check ``peer``'s round that began at ``epoch``, and record what was found."""

        async def body(tally: Tally) -> None:
            receipt = await self._receipt(peer, epoch, tally)
            await self._verify(peer, epoch, receipt, tally)

        return await self.verdicts.run(peer, epoch, body)

    async def _call(self, peer: str, method: Method[Req, Resp], request: Req, tally: Tally) -> Resp:
        response = await self._host.call(
            PeerID.from_string(peer), method, request, timeout=CALL_TIMEOUT
        )
        tally.received += len(pack(response.to_wire()))
        return response

    async def _receipt(self, peer: str, epoch: int, tally: Tally) -> RoundReceipt:
        seen = self._weight(peer, epoch) is not None
        deadline = time.monotonic() + (SEALED_WAIT if seen else LATE_WAIT)
        while True:
            try:
                receipt = await self._call(peer, ROUND_RECEIPT, RoundRequest(epoch), tally)
            except NotFoundError:
                if time.monotonic() <= deadline:
                    await asyncio.sleep(0.2 if seen else 1.0)
                    continue
                if not seen:
                    # of another group: it may not have sent this round (its work then goes
                    # out in a later one, claimed there); a claim of this round is unbacked
                    self.on_backed(peer, epoch, 0)
                    raise Unclaimed(f"keeps no receipt of the round of epoch {epoch}") from None
                raise Caught(
                    "round_unbacked", 0.0, f"sent the round of epoch {epoch} and keeps no receipt"
                ) from None
            except MalformedResponseError as exc:
                raise Caught("round_malformed", 0.0, f"malformed receipt: {exc}") from None
            if receipt.epoch != epoch:
                reason = f"asked for the round of epoch {epoch}, answered with {receipt.epoch}'s"
                raise Caught("round_malformed", 0.0, reason)
            return receipt

    def _weight(self, peer: str, epoch: int) -> float | None:
        return self._sent.get(epoch, {}).get(peer)

    async def _verify(self, peer: str, epoch: int, receipt: RoundReceipt, tally: Tally) -> None:
        if receipt.carried and receipt.replayable:  # the older anchor first: it keeps a few
            await self._verify_carried(peer, epoch, receipt, tally)
        await self._verify_round(peer, epoch, receipt, tally)

    async def _verify_carried(
        self, peer: str, epoch: int, receipt: RoundReceipt, tally: Tally
    ) -> None:
        """The samples ``receipt`` carries from the round before, backed by that round's receipt
        and its replay (a member could otherwise send and claim samples it never computed as
        carried)."""
        before = await self._receipt(peer, epoch - 1, tally)
        # looked up after the wait, with no wait after it
        needed = epoch - 1 if before.opening is None else epoch - 2
        if any(e not in self._anchors for e in range(needed, epoch)):
            # not the member's doing (the backbone joined, caught up, or landed rounds since):
            # judged neither way, where an open check would hold its claims until it expired
            raise Apart(f"no anchor of epoch {needed} is kept to replay what it carries from")
        if before.carried or before.samples < receipt.carried:
            reason = (
                f"its round of epoch {epoch} carries {receipt.carried} samples of the round "
                f"before, whose receipt backs {before.samples - before.carried}"
            )
            raise Caught("round_unbacked", receipt.carried / max(1, before.samples), reason)
        try:
            await self._verify_round(peer, epoch - 1, before, tally)
        except Apart as apart:
            # an honest member files a round as carrying samples only of the round just before,
            # begun at the anchor that led to this one's (``RoundLedger.backs``): this one began
            # at the backbone's anchor, so that one did too
            reason = (
                f"its round of epoch {epoch} carries samples of a round no replay judges: {apart}"
            )
            raise Caught(
                "round_unbacked", receipt.carried / max(1, before.samples), reason
            ) from None

    async def _verify_round(
        self, peer: str, epoch: int, receipt: RoundReceipt, tally: Tally
    ) -> None:
        anchor = self._replayable(peer, epoch, receipt, tally)
        # everything is fetched at once, while the member still keeps the round; the replay may
        # wait behind others. The blocks were committed in the receipt: drawing them now shows
        # the member nothing it could still change
        batches = await self._batches(peer, epoch, receipt, tally)
        blocks = await self._blocks(peer, epoch, receipt, anchor.size, tally)
        start = self._start(peer, epoch, receipt, anchor)
        waited = 0.0

        def give_way() -> None:  # on the replay's thread: the time it waits is not its cost
            nonlocal waited
            waited += self.give_way()

        async with self._replaying:
            began = time.perf_counter()
            replayed = await self.bridge.run(
                replay, self.replica, start, batches, self.loss, give_way
            )
            spent = time.perf_counter() - began - waited
        tally.compute += spent
        tally.sampled += len(batches)
        theirs = np.concatenate([values for _, values in blocks])
        ours = np.concatenate([replayed[at : at + values.size] for at, values in blocks])
        judged = judge(theirs, ours, receipt.precision)
        tally.margin = max(tally.margin, judged.margin)
        if not judged.passed:
            raise Caught(
                "round_replay",
                judged.distance,
                f"its work lies {judged.distance:.3g} from its replay (at most {judged.limit:g} "
                f"in {receipt.precision})",
            )

    def _start(self, peer: str, epoch: int, receipt: RoundReceipt, anchor: Anchor) -> RoundStart:
        """Where the replay of ``receipt`` starts: at ``anchor``, or with an opening (overlap),
        at the anchor before it, which the landing of the round before replaced mid-round."""
        opening = receipt.opening
        if opening is None:
            return RoundStart(anchor.arrays, receipt.schedule, receipt.per_round)
        before = self._anchors.get(epoch - 1)
        if before is None:
            # not the member's doing (the backbone joined or caught up at ``epoch``)
            raise Apart(f"no anchor of epoch {epoch - 1} is kept, where the round began")
        if opening.state != before.state:
            self.on_unreplayable(peer, epoch)
            raise Apart(f"its round began from another outer state than epoch {epoch - 1}'s")
        arrival = Arrival(
            opening.steps, anchor.arrays, receipt.schedule, receipt.per_round, opening.straddles
        )
        return RoundStart(before.arrays, opening.schedule, opening.per_round, arrival)

    def _replayable(self, peer: str, epoch: int, receipt: RoundReceipt, tally: Tally) -> Anchor:
        """The anchor to replay ``receipt`` from, once its claim and its start are in order."""
        sent = self._weight(peer, epoch)
        # a member of another group: the backbone saw no weight, and its records are bound by
        # its receipt (``on_backed``)
        backed = receipt.samples + receipt.carried  # what it carries: with the round before
        tally.claimed = round(sent) if sent is not None else backed
        tally.backed = backed
        if not receipt.replayable:  # its weight may carry earlier rounds' samples too
            self.on_unreplayable(peer, epoch)
            raise Apart("the member's round cannot be replayed from the anchor (it says so)")
        if sent is None:  # of another group: what its receipt backs bounds its claim
            self.on_backed(peer, epoch, backed)
        if sent is not None and sent > backed + 0.5:
            raise Caught(
                "round_unbacked",
                sent / max(1, backed),
                f"sent its round with {sent:g} samples, its receipt backs {backed}",
            )
        anchor = self._anchors.get(epoch)
        if anchor is None:
            # the backbone landed rounds while the receipt came (a slow member of another group):
            # not the member's doing, judged neither way, where an open check would expire and
            # withdraw what it was paid; nor a round the member said was unreplayable
            raise Apart(f"no anchor of epoch {epoch} was still kept when its receipt came")
        if receipt.state != anchor.state:
            self.on_unreplayable(peer, epoch)
            raise Apart(f"its round began from another outer state than epoch {epoch}'s")
        blocks = -(-anchor.size * 4 // work_block_bytes(anchor.size))
        if len(receipt.work) != blocks:
            reason = f"its work has {len(receipt.work)} blocks where the model's has {blocks}"
            raise Caught("round_malformed", 0.0, reason)
        return anchor

    async def _batches(
        self, peer: str, epoch: int, receipt: RoundReceipt, tally: Tally
    ) -> list[dict[str, torch.Tensor]]:
        """Every inner step's batch, each the one its receipt names."""
        batches = []
        for index, step in enumerate(receipt.steps):
            try:
                packed = await self._call(peer, ROUND_BATCH, StepRequest(epoch, index), tally)
                batch = unpack_batch(packed)
            except (WireFormatError, MalformedResponseError) as exc:
                raise Caught("round_malformed", 0.0, f"inner step {index}: {exc}", index) from None
            if batch_digest(batch) != step.digest:
                reason = f"inner step {index}'s batch is not the one its receipt names"
                raise Caught("round_batch", 0.0, reason, index)
            if int(next(iter(batch.values())).shape[0]) < step.samples:
                reason = f"inner step {index}'s batch holds fewer samples than its receipt counts"
                raise Caught("round_unbacked", step.samples, reason, index)
            batches.append(batch)
        return batches

    async def _blocks(
        self, peer: str, epoch: int, receipt: RoundReceipt, size: int, tally: Tally
    ) -> list[tuple[int, np.ndarray]]:
        """``SAMPLED_BLOCKS`` blocks of the member's work of ``size`` values, each the one its
        receipt names, with where each starts."""
        count, block_bytes = len(receipt.work), work_block_bytes(size)
        picked = sorted(self._rng.sample(range(count), min(SAMPLED_BLOCKS, count)))
        found = []
        for index in picked:
            try:
                block = await self._call(peer, ROUND_WORK, BlockRequest(epoch, index), tally)
            except MalformedResponseError as exc:
                raise Caught("round_malformed", 0.0, f"work block {index}: {exc}", index) from None
            named = block_digests([np.frombuffer(block.data, np.uint8)], block_bytes)
            if named != [receipt.work[index]]:
                reason = f"work block {index} is not what its receipt named"
                raise Caught("round_block", 0.0, reason, index)
            at = index * block_bytes // 4
            values = np.frombuffer(block.data, "<f4")
            if values.size != min(block_bytes // 4, size - at):
                raise Caught("round_malformed", 0.0, f"work block {index} is cut short", index)
            found.append((at, values))
        return found
