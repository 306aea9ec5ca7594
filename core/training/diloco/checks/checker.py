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

Where trainers replay rounds for it (``replayer``), the backbone hands each drawn round to
``REPLAYERS`` (two) it trusts at once, other than the member, idle and within their shares of
replays (``Helpers``). The backbone fetches the round's batches from the member once and relays
them to both (``ROUND_RELAY``, served only to the trainers asked to replay that round: a member
serves a check's batches once, however many replay it); each replays and answers a sketch of the
blocks drawn (``sketch``, under a key drawn for that replay); the backbone fetches the member's
blocks and judges their sketch against each trainer's itself. The round passes only where both agree
with the member. The backbone replays it itself where one disagrees or did not answer (a cheat,
or a replayer that lies: one whose replay lies over ``REPLAYER_LIMIT`` from the backbone's is
caught, ``replay_false``), where no two trainers could replay it, and, drawn after the answers
came, one round in ten it handed out (``AUDITED``: replayers that pass their partner's fake
together are caught there). With two replayers or more, the backbone draws as many rounds as
they can replay now, and its own time goes to those replays only.

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

from core.averaging.sharing.digest import block_digests
from core.net.errors import (
    InvalidRequestError,
    MalformedResponseError,
    NetError,
    NotFoundError,
    PermissionDeniedError,
    UnknownMethodError,
)
from core.net.host.host import Host
from core.net.wire.rpc import CallContext, Method, Req, Resp
from core.training.credit.book import CREDITED_KEPT
from core.training.credit.checks.budget import Budget
from core.training.credit.checks.receipts import SampledBatch
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
from core.training.diloco.checks.anchors import Anchors, Elsewhere, Unheld
from core.training.diloco.checks.fetch import Batch, round_batches
from core.training.diloco.checks.helpers import Helpers
from core.training.diloco.checks.ledger import KEPT
from core.training.diloco.checks.receipts import (
    ROUND_BATCH,
    ROUND_RECEIPT,
    ROUND_RELAY,
    ROUND_REPLAY,
    ROUND_WORK,
    BlockRequest,
    RelayRequest,
    ReplayRequest,
    RoundReceipt,
    RoundRequest,
    StepRequest,
    work_block_bytes,
)
from core.training.diloco.checks.replay import LossFn, RoundStart, judge, replay
from core.training.diloco.checks.sketch import size as sketch_size
from core.training.diloco.checks.sketch import sketch
from core.training.diloco.state import DilocoState
from core.training.moderation.evidence import EvidenceBoard
from core.trust.peer_id import PeerID
from core.util.errors import BarnraiseError
from core.util.msgpack_codec import pack
from core.util.tasks import BackgroundTasks
from core.worker.bridge import TrainingBridge

log = logging.getLogger(__name__)

SAMPLED_BLOCKS = 4
"""Blocks of a member's work compared with the replay (``work_block_bytes``: 4,096 parameters
each in the demo's model, a quarter of a million in a billion-parameter one): a cheat's work lies
far from its replay in every part of the model, since skipping samples or steps changes every
coordinate they touch."""
STARTS = KEPT + 1
"""Epochs whose anchors the backbone keeps to replay rounds from: those of the rounds a member
keeps receipts of, and with overlap the one before (a round began at the anchor before the one
its work is measured from)."""
STATES = CREDITED_KEPT
"""Epochs whose outer state's digest it keeps: what records claim a round began from."""
CALL_TIMEOUT = 10.0
AUDITED = 0.1
"""The share of the rounds a trainer replayed for the backbone that the backbone replays too,
while its audit budget allows: a replayer that passes its partner's faked round is caught in one
of ten at most."""
AUDIT_BUDGET = 0.025
"""The audits' share of the backbone's time, from an empty bucket, an audit waiting until it has
filled for what a replay takes on average: half of its 5 % for checks
(``verdict.BUDGET``), the rest for the first newcomers' replays, before any trainer is trusted,
and the rounds trainers disagree on."""
REPLAYERS = 2
"""Trainers that replay each round handed out, all of them agreeing with the member's work for
it to pass: a cheat's partner among the replayers passes its fake only where every other drawn
replayer is a partner too (with c colluders among n trusted trainers, about (c/n)^2 of the
rounds handed out, against c/n with one), whatever the backbone's audit budget allows."""
REPLAYER_LIMIT = 0.25
"""How far a replayer's values may lie from the backbone's replay of the same round before it is
caught: five times the float32 limit (another device's rounding), four times under a cheat."""
REPLAY_TIMEOUT = 600.0
"""Seconds the backbone waits for a trainer's replay (a round of a fast member on a slower one)."""
FREE_WAIT = 20.0
"""Seconds a drawn round waits for two trainers to be free to replay it (a demo round's replay
takes 10 to 20 s) before the backbone replays it itself: well within the rounds a replayer keeps
the anchors of (``replayer.KEPT_ANCHORS``)."""
SEALED_WAIT = 5.0
"""Seconds a checker waits for a receipt the member has not filed yet (it seals its round before
the exchange, so one that landed is filed)."""
LATE_WAIT = 30.0
"""Seconds it waits for the receipt of a member of another group, whose exchange it did not see:
that group may have sealed and sent later (a slow member, a loaded machine)."""


@dataclass(slots=True)
class _Relay:
    batches: list[SampledBatch]
    """As the member sent them, in the order of its inner steps."""
    asked: set[str]
    """The trainers asked to replay the round: the only ones served them."""


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
        self.anchors = Anchors(STARTS)
        self._states: OrderedDict[int, str] = OrderedDict()
        """The outer state's digest at each epoch's start, kept as long as claims of it come."""
        self._replaying = asyncio.Lock()
        """One replay at a time: they share the replica."""
        self.audits = Budget(AUDIT_BUDGET, full=False)
        """What the backbone's audits of its replayers may take of its time."""
        self.helpers = Helpers(standings, STARTS)
        """The trainers that replay rounds for the backbone (``replayer``)."""
        self._relays: dict[tuple[str, int], _Relay] = {}
        """The batches of the rounds trainers replay now, by (member, epoch)."""
        # on the backbone's host from the start: a replayer asked has them to fetch
        host.router.add(ROUND_RELAY, self._on_relay)

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
        self.anchors.began(epoch, state, anchor)
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
        members = [*weights, *(p for p in others if p not in weights)]
        self.helpers.met(epoch, members)
        for peer, before in self.verdicts.again(lambda e: self._retries(e, epoch), epoch):
            self._tasks.spawn(f"round-check-{peer[:8]}-{before}", self.check(peer, before))
        if epoch not in self.anchors:
            return  # the backbone did not hold this round's anchor: nothing to replay from
        known = len(self.helpers.known())
        helpers: int | None = None  # nobody trusted to replay yet: the backbone's own budgets
        if known >= REPLAYERS:
            helpers = len(self.helpers.idle()) // REPLAYERS
        elif known:
            # too few trusted trainers to replay a round in two: the backbone replays one round
            # at a time until there are enough (each first check passed may make one more),
            # not the burst of newcomers a swarm starts with
            helpers = 0 if self.verdicts.under_way() else 1
        for peer in self.verdicts.draw(members, helpers=helpers):
            self._tasks.spawn(f"round-check-{peer[:8]}-{epoch}", self.check(peer, epoch))

    def _retries(self, before: int, newest: int) -> bool:
        """Whether a check of the round of ``before`` that could not reach its member can be made
        again as ``newest`` lands: the backbone keeps its anchor, and the member still keeps its
        receipt (its last ``KEPT``: past them, an honest member would answer that it keeps none,
        and be accused of a round it sent)."""
        return before in self.anchors and newest - before < KEPT

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
        if any(e not in self.anchors for e in range(needed, epoch)):
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
        start = self._replayable(peer, epoch, receipt, tally)
        # the blocks were committed in the receipt: drawing them now shows the member nothing it
        # could still change
        blocks = await self._blocks(peer, epoch, receipt, start.size, tally)
        theirs = np.concatenate([values for _, values in blocks])
        # the batches at once, whoever replays (the member may drop the round while replayers
        # are awaited), checked against the receipt and fetched once for every replayer
        fetched: list[SampledBatch] = []
        batches = await self._batches(peer, epoch, receipt, tally, fetched)
        helped = None
        if await self._replayers_free(peer):
            helped = await self._helped(peer, receipt, blocks, start.size, fetched)
        audited = False
        if helped is not None:
            key, sketches = helped
            tally.replayer = ",".join(helper for helper, _ in sketches)
            mine = sketch(theirs, key)
            compared = [judge(mine, its_sketch, receipt.precision) for _, its_sketch in sketches]
            # an audit is the backbone's own replay: within a budget of its own, so that audits
            # do not grow with the swarm's replays
            audited = self._rng.random() < AUDITED and self.audits.allows(self.verdicts.cost())
            agreed = len(sketches) == REPLAYERS and all(c.passed for c in compared)
            if agreed and not audited:
                tally.margin = max(tally.margin, *(c.margin for c in compared))
                tally.sampled += len(receipt.steps)
                return
        # replayed here: no replayers could, one did not answer, one disagreed with the member's
        # work (which no replayer judges alone), or drawn to audit them
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
        ours = np.concatenate([replayed[at : at + values.size] for at, values in blocks])
        if audited:
            self.audits.spend(spent)
        if helped is not None:
            for helper, its_sketch in sketches:
                await self._audit(helper, epoch, its_sketch, sketch(ours, key))
        judged = judge(theirs, ours, receipt.precision)
        tally.margin = max(tally.margin, judged.margin)
        if not judged.passed:
            raise Caught(
                "round_replay",
                judged.distance,
                f"its work lies {judged.distance:.3g} from its replay (at most {judged.limit:g} "
                f"in {receipt.precision})",
            )

    # ---- replays by trainers ---------------------------------------------------------------------

    async def _replayers_free(self, peer: str) -> bool:
        """Whether ``REPLAYERS`` trainers are free to replay ``peer``'s round, waiting up to
        ``FREE_WAIT`` for busy ones to finish theirs: the backbone replays a round itself only
        where that many are not to be had."""
        deadline = time.monotonic() + FREE_WAIT
        while len(self.helpers.idle(peer)) < REPLAYERS:
            others = [helper for helper in self.helpers.known() if helper != peer]
            if len(others) < REPLAYERS or time.monotonic() >= deadline:
                return False
            await asyncio.sleep(min(1.0, FREE_WAIT))
        return True

    async def _helped(
        self,
        peer: str,
        receipt: RoundReceipt,
        blocks: list[tuple[int, np.ndarray]],
        size: int,
        batches: list[SampledBatch],
    ) -> tuple[int, list[tuple[str, np.ndarray]]] | None:
        """``REPLAYERS`` trainers' replays of the blocks drawn, asked at once under one key, the
        round's ``batches`` relayed to them: the key, and each trainer that answered with the
        sketch of its values under it; or None: fewer trainers than that could replay the round
        now."""
        idle = self.helpers.idle(peer)
        if len(idle) < REPLAYERS:
            return None
        chosen = self._rng.sample(idle, REPLAYERS)
        block_bytes = work_block_bytes(size)
        asked = [at * 4 // block_bytes for at, _ in blocks]
        key = self._rng.getrandbits(64)
        request = ReplayRequest(peer, receipt, asked, key)
        values = sum(v.size for _, v in blocks)
        relay = self._relays[(peer, receipt.epoch)] = _Relay(batches, set(chosen))
        try:
            answers = await asyncio.gather(
                *(self._replayed_by(helper, request, values) for helper in chosen)
            )
        finally:
            if self._relays.get((peer, receipt.epoch)) is relay:
                del self._relays[(peer, receipt.epoch)]
        return key, [
            (h, found) for h, found in zip(chosen, answers, strict=True) if found is not None
        ]

    async def _replayed_by(
        self, helper: str, request: ReplayRequest, values: int
    ) -> np.ndarray | None:
        """``helper``'s sketch of its replay of the ``values`` asked for in ``request``; None: it
        did not replay the round (asked again after a rest), or answered a sketch of another
        size."""
        self.helpers.asked(helper)
        began, replayed = time.monotonic(), None
        try:
            answer = await self._host.call(
                PeerID.from_string(helper), ROUND_REPLAY, request, timeout=REPLAY_TIMEOUT
            )
            found = np.frombuffer(answer.sketch, "<f4")
            if found.size == sketch_size(values):
                replayed = found
        except (NetError, TimeoutError, BarnraiseError) as exc:
            # busy, past its share, no anchor of the round, gone: asked again after a rest; one
            # that replays nothing (no such method) never again. The round is replayed here
            log.info("%s did not replay %s's round of epoch %d: %s", helper[:12],
                     request.member[:12], request.receipt.epoch, exc)  # fmt: skip
            if isinstance(exc, UnknownMethodError):
                self.helpers.unable(helper)
        finally:
            self.helpers.answered(helper, time.monotonic() - began, replayed is not None)
        if replayed is None:
            self.helpers.rest(helper)
        return replayed

    async def _on_relay(self, ctx: CallContext, request: RelayRequest) -> SampledBatch:
        relay = self._relays.get((request.member, request.epoch))
        if relay is None or str(ctx.peer) not in relay.asked:
            raise PermissionDeniedError("only a trainer asked to replay the round gets its batches")
        if not 0 <= request.index < len(relay.batches):
            raise InvalidRequestError(f"the round has no inner step {request.index}")
        return relay.batches[request.index]

    async def _audit(self, helper: str, epoch: int, theirs: np.ndarray, ours: np.ndarray) -> None:
        """The backbone replayed a round a trainer replayed too (both sketched under the key the
        trainer was given): a replayer whose values lie far beyond what another device's rounding
        gives is caught (it answered what no replay of the round gives), one a little off is not
        asked for a while."""
        judged = judge(theirs, ours, "float32")
        if judged.passed:
            return
        self.helpers.rest(helper)
        if judged.distance > REPLAYER_LIMIT:
            reason = (
                f"its replay of a round of epoch {epoch} lies {judged.distance:.3g} from the "
                f"backbone's (at most {REPLAYER_LIMIT:g})"
            )
            await self.verdicts.convict(
                helper, epoch, Caught("replay_false", judged.distance, reason)
            )

    def _replayable(self, peer: str, epoch: int, receipt: RoundReceipt, tally: Tally) -> RoundStart:
        """Where to replay ``receipt`` from, once its claim and its start are in order."""
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
        try:
            start = self.anchors.start(receipt)
        except Unheld as unheld:
            # the backbone landed rounds while the receipt came (a slow member of another group),
            # or joined or caught up since the round began: not the member's doing, judged
            # neither way, where an open check would expire and withdraw what it was paid; nor a
            # round the member said was unreplayable
            raise Apart(str(unheld)) from None
        except Elsewhere as elsewhere:
            self.on_unreplayable(peer, epoch)
            raise Apart(str(elsewhere)) from None
        blocks = -(-start.size * 4 // work_block_bytes(start.size))
        if len(receipt.work) != blocks:
            reason = f"its work has {len(receipt.work)} blocks where the model's has {blocks}"
            raise Caught("round_malformed", 0.0, reason)
        return start

    async def _batches(
        self,
        peer: str,
        epoch: int,
        receipt: RoundReceipt,
        tally: Tally,
        fetched: list[SampledBatch] | None = None,
    ) -> list[Batch]:
        """Every inner step's batch, each the one its receipt names (``fetched``: told each as
        the member sent it, to relay it)."""

        async def ask(request: StepRequest) -> SampledBatch:
            batch = await self._call(peer, ROUND_BATCH, request, tally)
            if fetched is not None:
                fetched.append(batch)
            return batch

        return await round_batches(ask, receipt)

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
