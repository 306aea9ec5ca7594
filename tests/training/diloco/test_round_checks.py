"""Checked diloco rounds: a member's receipt, batches and work travel over loopback to the
backbone's checker, which replays the round. An honest round passes at any speed; each cheat a
member who has read the checker could try is caught and named; a round nobody can replay, or a
member the checker cannot reach, is judged neither way and its claims wait."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch

from core.averaging.sharing.digest import block_digests
from core.dht import DHTNode
from core.net import Host, Identity
from core.training.credit.checks.standing import Standings
from core.training.diloco.backbone import DilocoBackbone, RoundChecks
from core.training.diloco.checks import RoundChecker, RoundLedger, Start
from core.training.diloco.checks.checker import STARTS
from core.training.diloco.checks.ledger import KEPT
from core.training.diloco.checks.receipts import (
    MAX_BLOCK_BYTES,
    MIN_BLOCK_BYTES,
    RoundReceipt,
    StepEntry,
    WorkBlock,
    work_block_bytes,
)
from core.training.diloco.state import DilocoState
from core.training.moderation.evidence import EvidenceBoard
from core.training.state import TrainingState
from core.util.errors import WireFormatError
from core.util.tasks import BackgroundTasks
from core.worker.bridge import TrainingBridge
from core.worker.gate import Gate
from core.worker.precision import Precision
from tests.conftest import MakeHost
from tests.training.conftest import NET, start_node
from tests.training.diloco.conftest import DPeer, MakeDPeer, end_rounds, fresh_model, settle
from tests.training.diloco.test_replay import batches, loss, replica

Batch = dict[str, torch.Tensor]
STEPS = 8


class Member:
    """A member's state and round receipts, driven as ``DilocoOptimizer`` drives them."""

    def __init__(self, precision: str = "float32", overlap: bool = False) -> None:
        """``precision``: what its forward passes autocast to, as a trainer's do."""
        self.diloco = replica(overlap=overlap)
        self.ledger = RoundLedger(precision)
        half = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(precision)
        self.forward = Precision(torch.device("cpu"), half)

    def start(self) -> Start:
        d = self.diloco
        return Start(d.epoch, d.digest, d.schedule, d.per_round, d.at_anchor, d.moves)

    def begin(self) -> None:
        self.ledger.begin(self.start())

    def compute(self, batch: Batch, computed: Batch | None = None) -> None:
        """A microbatch's gradient, its receipt naming ``batch``, computed on ``computed``
        (default: it)."""
        self.ledger.computing(self.diloco.moves)
        with self.forward.autocast():
            value = loss(self.diloco.state.model, computed if computed is not None else batch)
        value.float().backward()  # type: ignore[no-untyped-call]
        self.ledger.witness(batch, float(value.detach()))

    def step(self, batch: Batch, computed: Batch | None = None) -> None:
        """An inner step on ``compute``'s gradient."""
        self.compute(batch, computed)
        self.ledger.stepped(self.diloco.inner_step())

    def seal(self, work: np.ndarray | None = None) -> list[np.ndarray]:
        """End the round: its receipt names ``work`` (default: what it computed)."""
        d = self.diloco
        self.ledger.seal(d.round_work() if work is None else work, d.digest, d.epoch)
        return d.end_round(decay=False)

    def end(self) -> list[np.ndarray]:
        """End the round as an overlapped one ends (``seal``, then the next round starts at the
        anchor): its pseudo-gradient, to land later with ``land``."""
        delta = self.seal()
        self.diloco.restart_at_anchor()
        self.ledger.moved(self.start())
        return delta

    def round_until_end(self, data: list[Batch]) -> list[np.ndarray]:
        """An overlapped round on ``data`` (``end``)."""
        self.begin()
        for batch in data:
            self.step(batch)
        return self.end()

    def round(self, data: list[Batch], take: int = 0) -> list[np.ndarray]:
        self.begin()
        for batch in data:
            self.step(batch, {k: v[:take] for k, v in batch.items()} if take else None)
        return self.seal()

    def land(self, delta: list[np.ndarray]) -> None:
        """Alone: its own work is the round's, and the epoch moves on (as the optimizer does)."""
        self.diloco.land_alone(delta)
        self.diloco.state.epoch += 1
        self.ledger.moved(self.start())

    def forge(self, epoch: int, **changes: object) -> None:
        """Serve something else for the sealed round than what was filed (a cheat's answer)."""
        sealed = self.ledger.sealed(epoch)
        assert sealed is not None
        self.ledger._sealed[epoch] = dataclasses.replace(sealed, **changes)  # type: ignore[arg-type]


@dataclass
class Rig:
    checker: RoundChecker
    standings: Standings
    member_host: Host
    backbone: Host
    dht: DHTNode

    @property
    def peer(self) -> str:
        return str(self.member_host.peer_id)

    def serve(self, member: Member) -> None:
        member.ledger.serve(self.member_host)

    def began(self, epoch: int = 0) -> None:
        """The backbone's replica holds the anchor the members begin from (the same seed)."""
        held = replica()
        self.checker.began(epoch, held.digest, held.anchor)


@pytest.fixture
async def rig(make_host: MakeHost) -> AsyncIterator[Rig]:
    backbone, dht = await start_node(make_host, None)
    member_host = await make_host(NET)
    backbone.add_addresses(member_host.peer_id, member_host.listen_addresses)
    bridge = TrainingBridge()
    tasks = BackgroundTasks("round-checks-test")
    standings = Standings(1.0)
    checker = RoundChecker(
        replica(), backbone, bridge=bridge, loss=loss, standings=standings,
        evidence=EvidenceBoard(dht, backbone.identity, "collab"), tasks=tasks,
    )  # fmt: skip
    yield Rig(checker, standings, member_host, backbone, dht)
    await tasks.close()
    await bridge.aclose()
    await dht.close()


async def honest_round(rig: Rig, steps: int = STEPS) -> Member:
    member = Member()
    rig.serve(member)
    rig.began()
    member.round(batches(steps))
    rig.checker.sent(0, {rig.peer: 32.0 * steps})
    return member


@pytest.mark.parametrize("steps", [STEPS, 4 * STEPS])
async def test_an_honest_round_passes_at_any_speed(rig: Rig, steps: int) -> None:
    """A fast member takes four times the steps: the replay takes as many, and it passes
    exactly (same machine, float32), its claim vouched for."""
    await honest_round(rig, steps)
    record = await rig.checker.check(rig.peer, 0)
    assert (record.verdict, record.reason) == ("passed", "")
    assert (record.claimed, record.backed, record.sampled) == (32 * steps, 32 * steps, steps)
    assert record.margin == 0.0
    assert record.received > 0
    assert record.compute > 0
    assert rig.standings.of(rig.peer).vouched == 0
    assert rig.standings.supported(rig.peer, 0, 32 * steps, now=0.0) == 32 * steps


async def test_a_replay_gives_way_to_the_backbones_own_round(rig: Rig) -> None:
    """While the backbone's round is exchanged (its gate held), a replay waits before its next
    inner step; it goes on once the gate opens, passes, and the wait is not counted in what the
    check cost."""
    gate = Gate()
    passes: list[float] = []

    def give_way() -> float:
        passes.append(time.monotonic())
        return gate.wait(60.0)

    rig.checker.give_way = give_way
    await honest_round(rig)
    with gate.held():
        check = asyncio.create_task(rig.checker.check(rig.peer, 0))
        for _ in range(600):  # the batches and blocks come over loopback first
            if passes or check.done():
                break
            await asyncio.sleep(0.05)
        assert len(passes) == 1, passes  # at the first inner step
        await asyncio.sleep(2.0)
        assert len(passes) == 1  # still waiting there
    record = await asyncio.wait_for(check, 60.0)
    assert (record.verdict, record.reason) == ("passed", ""), record
    assert len(passes) == STEPS
    assert 0 < record.compute < 1.0  # the two seconds at the gate left out


@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
@pytest.mark.parametrize("take", [0, 2])
async def test_a_round_computed_in_half_precision_is_judged_at_its_limit(
    rig: Rig, precision: str, take: int
) -> None:
    """A member whose device computes in bfloat16 or float16 (autocast, here on the CPU), replayed
    in float32 by the backbone: its honest round passes well inside its precision's limit, and
    computing on a sixteenth of each batch in that precision is caught as in float32."""
    member = Member(precision)
    rig.serve(member)
    rig.began()
    member.round(batches(STEPS), take=take)
    rig.checker.sent(0, {rig.peer: 32.0 * STEPS})
    record = await rig.checker.check(rig.peer, 0)
    if take:
        assert record.verdict == "caught", record
        assert "from its replay" in record.reason
        assert record.margin > 2, record
    else:
        assert (record.verdict, record.reason) == ("passed", ""), record
        assert 0 < record.margin < 0.2, record  # rounding, a fifth of the limit at most


async def test_a_round_whose_data_repeats_passes(rig: Rig) -> None:
    """A dataset small enough to repeat within a round: the member meets each batch twice, its
    receipt names each twice, and the replay takes each twice too."""
    member = Member()
    rig.serve(member)
    rig.began()
    data = batches(STEPS // 2)
    member.round(data + [{name: t.clone() for name, t in batch.items()} for batch in data])
    rig.checker.sent(0, {rig.peer: 32.0 * STEPS})
    record = await rig.checker.check(rig.peer, 0)
    assert (record.verdict, record.reason, record.margin) == ("passed", "", 0.0), record
    assert (record.claimed, record.sampled) == (32 * STEPS, STEPS)


def lazy(rig: Rig, member: Member) -> None:
    member.round(batches(STEPS), take=2)  # a sixteenth of each batch


def skips_half(rig: Rig, member: Member) -> None:
    member.begin()
    data = batches(STEPS)
    for batch in data[: STEPS // 2]:
        member.step(batch)
    for batch in data[STEPS // 2 :]:  # named, never computed
        member.ledger.witness(batch, 1.0)
        member.ledger.stepped(True)
    member.seal()


def copies_a_partner(rig: Rig, member: Member) -> None:
    partner = Member()
    work = np.concatenate([w.reshape(-1) for w in partner.round(batches(STEPS, seed=9))])
    member.begin()
    for batch in batches(STEPS):  # its own batches named, none computed
        member.ledger.witness(batch, 1.0)
        member.ledger.stepped(True)
    member.seal(work)


def claims_twice(rig: Rig, member: Member) -> None:
    member.round(batches(STEPS))
    rig.checker.sent(0, {rig.peer: 2 * 32.0 * STEPS})


def serves_another_batch(rig: Rig, member: Member) -> None:
    member.round(batches(STEPS))
    sealed = member.ledger.sealed(0)
    assert sealed is not None
    member.forge(0, batches=[*sealed.batches[:-1], batches(1, seed=7)[0]])


def serves_other_work(rig: Rig, member: Member) -> None:
    """Files honest work's digests, then answers with a copy scaled down (its blocks' digests
    no longer match)."""
    member.round(batches(STEPS))
    sealed = member.ledger.sealed(0)
    assert sealed is not None
    half = (np.frombuffer(sealed.work, "<f4") / 2).astype("<f4").tobytes()
    member.forge(0, work=half)


@pytest.mark.parametrize(
    ("cheat", "named"),
    [
        (lazy, "from its replay"),
        (skips_half, "from its replay"),
        (copies_a_partner, "from its replay"),
        (claims_twice, "its receipt backs"),
        (serves_another_batch, "not the one its receipt names"),
        (serves_other_work, "not what its receipt named"),
    ],
)
async def test_each_cheat_is_caught_and_named(rig: Rig, cheat: object, named: str) -> None:
    member = Member()
    rig.serve(member)
    rig.began()
    rig.checker.sent(0, {rig.peer: 32.0 * STEPS})
    cheat(rig, member)  # type: ignore[operator]
    record = await rig.checker.check(rig.peer, 0)
    assert record.verdict == "caught", record
    assert named in record.reason
    assert rig.standings.of(rig.peer).caught
    assert rig.standings.supported(rig.peer, 0, 32 * STEPS, now=0.0) == 0


async def test_a_member_of_another_group_is_replayed_and_its_receipt_bounds_its_claim(
    rig: Rig,
) -> None:
    """The backbone saw no weight of it: it is drawn as any member, replayed from the same
    anchor, and what its receipt backs is what its records may claim."""
    member = Member()
    rig.serve(member)
    rig.began()
    member.round(batches(STEPS))
    backed: list[tuple[str, int, int]] = []
    rig.checker.on_backed = lambda *found: backed.append(found)
    rig.checker.landed(0, {}, others=[rig.peer])  # not a sender of the backbone's group
    await wait_for_records(rig, 1)
    (record,) = rig.checker.records
    assert (record.verdict, record.reason) == ("passed", "")
    assert (record.claimed, record.backed) == (32 * STEPS, 32 * STEPS)
    assert backed == [(rig.peer, 0, 32 * STEPS)]


async def test_a_member_of_another_group_with_no_receipt_backs_no_claim_of_the_round(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It may not have sent the round (not judged), but a claim of it is bound at 0; one of
    the backbone's group that sent the round and keeps no receipt is caught at once."""
    import core.training.diloco.checks.checker as checker_module

    monkeypatch.setattr(checker_module, "LATE_WAIT", 0.5)
    rig.serve(Member())  # serves receipts, of no round
    rig.began()
    backed: list[tuple[str, int, int]] = []
    rig.checker.on_backed = lambda *found: backed.append(found)
    record = await rig.checker.check(rig.peer, 0)
    assert record.verdict == "unreached", record
    assert backed == [(rig.peer, 0, 0)]
    assert not rig.standings.of(rig.peer).caught
    rig.checker.sent(0, {rig.peer: 32.0 * STEPS})
    assert (await rig.checker.check(rig.peer, 0)).verdict == "caught"
    assert backed == [(rig.peer, 0, 0)]  # what it sent is the authority there


async def test_a_receipt_that_comes_after_its_anchor_was_dropped_judges_nothing(
    rig: Rig,
) -> None:
    """A slow member of another group seals its round after the backbone landed the next three:
    its anchor is no longer kept. Not the member's doing: judged neither way, with no open check
    (which would expire and withdraw its pay) and no word that the round was unreplayable (its
    records rightly said it was)."""
    member = Member()
    rig.serve(member)
    rig.began()
    member.begin()
    for batch in batches(STEPS):
        member.step(batch)
    told: list[tuple[str, int]] = []
    rig.checker.on_unreplayable = lambda peer, epoch: told.append((peer, epoch))
    check = asyncio.create_task(rig.checker.check(rig.peer, 0))
    await asyncio.sleep(0.3)  # asked, and told it is not sealed yet
    for epoch in range(1, STARTS + 1):
        rig.began(epoch)
    assert 0 not in rig.checker.anchors
    member.seal()
    record = await check
    assert record.verdict == "apart", record
    assert "no anchor of epoch 0 is kept" in record.reason
    standing = rig.standings.of(rig.peer)
    assert (standing.caught, standing.open, standing.unjudged) == (False, set(), 1)
    assert told == []


async def wait_for_records(rig: Rig, count: int) -> None:
    from tests.support.leaks import wait_until

    await wait_until(lambda: len(rig.checker.records) >= count, timeout=60)


@pytest.mark.parametrize("cheat", [lazy, skips_half, copies_a_partner])
async def test_a_cheat_in_another_group_than_the_backbones_is_caught_alike(
    rig: Rig, cheat: object
) -> None:
    """A member that works only in the rounds it shares with the backbone (which group it is in
    is public) gains nothing by it: the others are replayed alike."""
    member = Member()
    rig.serve(member)
    rig.began()
    cheat(rig, member)  # type: ignore[operator]
    rig.checker.landed(0, {}, others=[rig.peer])
    await wait_for_records(rig, 1)
    (record,) = rig.checker.records
    assert record.verdict == "caught", record
    assert "from its replay" in record.reason
    assert rig.standings.supported(rig.peer, 0, 32 * STEPS, now=0.0) == 0


async def test_a_member_that_refuses_the_check_fails_it(rig: Rig) -> None:
    """Reached, it answers that it has no such method: caught, not unreached."""
    rig.began()
    rig.checker.sent(0, {rig.peer: 32.0 * STEPS})
    record = await rig.checker.check(rig.peer, 0)
    assert record.verdict == "caught"
    assert "refused the check" in record.reason
    assert rig.standings.of(rig.peer).caught


async def test_an_unreachable_member_is_not_judged_and_its_claims_wait(
    rig: Rig, make_host: MakeHost
) -> None:
    gone = await make_host(NET, Identity.generate())
    rig.backbone.add_addresses(gone.peer_id, gone.listen_addresses)
    peer = str(gone.peer_id)
    await gone.close()
    rig.began()
    rig.checker.sent(0, {peer: 32.0 * STEPS})
    record = await rig.checker.check(peer, 0)
    assert record.verdict == "unreached"
    standing = rig.standings.of(peer)
    assert (standing.caught, standing.unjudged) == (False, 1)
    assert rig.standings.supported(peer, 0, 32 * STEPS, now=1.0) is None


@pytest.mark.parametrize("answers", [True, False])
async def test_a_replay_that_could_not_reach_its_member_is_made_again_then_expires(
    rig: Rig, answers: bool
) -> None:
    """A member that answers "closing" (as one that hides from the replay of a round it faked
    would, or one whose computer went off) keeps the check open: made again when the next round
    lands, its claims held meanwhile; once the backbone no longer keeps the round's anchor, the
    check expires and the round is not paid. Nobody is accused."""
    from tests.support.leaks import wait_until

    member = await honest_round(rig)
    member.ledger.leaving = True
    assert (await rig.checker.check(rig.peer, 0)).verdict == "unreached"
    assert rig.standings.open_checks() == [(rig.peer, 0)]
    assert rig.standings.supported(rig.peer, 0, 32 * STEPS, now=0.0) is None
    member.ledger.leaving = not answers
    rig.checker.landed(1, {})  # the next round landed: the open check is made again
    await wait_until(lambda: len(rig.checker.records) == 2, timeout=60)
    again = rig.checker.records[-1]
    assert (again.epoch, again.verdict) == (0, "passed" if answers else "unreached")
    if answers:
        assert rig.standings.open_checks() == []
        assert rig.standings.supported(rig.peer, 0, 32 * STEPS, now=0.0) == 32 * STEPS
        return
    for epoch in range(1, STARTS + 1):
        rig.began(epoch)  # STARTS rounds later the anchor of epoch 0 is no longer kept
    rig.checker.landed(STARTS, {})
    assert rig.standings.open_checks() == []
    assert rig.standings.supported(rig.peer, 0, 32 * STEPS, now=0.0) == 0
    assert "could not reach it" in rig.standings.why(rig.peer, 0)
    assert not rig.standings.of(rig.peer).caught
    assert len(rig.checker.records) == 2  # expired, not made a third time


async def test_an_open_check_expires_once_its_member_keeps_no_receipt_of_the_round(
    rig: Rig,
) -> None:
    """A member keeps receipts of its last ``KEPT`` rounds; made again after that, a check
    would find none and accuse an honest member of sending a round it kept no receipt of. It
    expires instead, though the backbone still holds the round's anchors (``STARTS``)."""
    await honest_round(rig)
    for epoch in range(1, KEPT + 1):
        rig.began(epoch)
    assert rig.checker.anchors.epochs() == list(range(KEPT + 1))
    standings = rig.standings
    standings.unreached(rig.peer, 0)  # its check of epoch 0 could not reach it
    assert standings.open_checks() == [(rig.peer, 0)]
    rig.checker.landed(KEPT, {})
    assert standings.open_checks() == []
    assert "could not reach it" in standings.why(rig.peer, 0)
    assert not standings.of(rig.peer).caught
    assert rig.checker.records == []  # not made again


async def test_a_round_nobody_can_replay_judges_nothing(rig: Rig) -> None:
    """A round after one that found no group goes on from where that one ended: its receipt says
    it cannot be replayed, and the check holds its claims without accusing anyone."""
    member = Member()
    rig.serve(member)
    member.diloco.missed(member.round(batches(STEPS, seed=3)))
    assert not member.diloco.at_anchor
    member.ledger._sealed.clear()
    rig.began()
    member.round(batches(STEPS))
    rig.checker.sent(0, {rig.peer: 32.0 * STEPS})
    told: list[tuple[str, int]] = []
    rig.checker.on_unreplayable = lambda peer, epoch: told.append((peer, epoch))
    record = await rig.checker.check(rig.peer, 0)
    assert record.verdict == "apart", record
    standing = rig.standings.of(rig.peer)
    assert (standing.caught, standing.unjudged) == (False, 1)
    assert told == [(rig.peer, 0)]  # its claim of the round is paid from its allowance


def test_a_round_after_one_that_found_no_group_and_took_no_step_is_replayable() -> None:
    """As a swarm forms, a newcomer's first rounds may end before its first microbatch and find
    no group: theta is still the anchor, and its next round can be replayed."""
    member = Member()
    d = member.diloco
    member.begin()
    d.missed(d.end_round(decay=False))
    assert d.at_anchor
    receipt = member.ledger.seal(d.round_work(), d.digest, d.epoch)
    assert receipt is None  # no step: nothing filed
    member.begin()
    for batch in batches(STEPS):
        member.step(batch)
    d.missed(d.end_round(decay=False))  # with steps: the next round goes on from its end
    assert not d.at_anchor


async def test_a_round_from_another_anchor_judges_nothing(rig: Rig) -> None:
    member = Member()
    rig.serve(member)
    member.round(batches(STEPS))
    held = replica()
    held.land_alone([np.ones_like(a) for a in held.anchor])  # the backbone's anchor moved
    rig.checker.began(0, held.digest, held.anchor)
    told: list[tuple[str, int]] = []
    rig.checker.on_unreplayable = lambda peer, epoch: told.append((peer, epoch))
    record = await rig.checker.check(rig.peer, 0)
    assert record.verdict == "apart"
    assert "another outer state" in record.reason
    assert told == [(rig.peer, 0)]
    assert rig.checker.state_at(0) == held.digest


def test_a_gradient_taken_before_its_round_began_makes_the_round_unreplayable() -> None:
    """The microbatch that was computing when the last round ended is stepped in the next one,
    from the last round's parameters: no replay from the anchor can give its step."""
    member = Member()
    first = batches(STEPS)
    member.begin()
    for batch in first[:-1]:
        member.step(batch)
    member.ledger.computing(member.diloco.moves)
    value = loss(member.diloco.state.model, first[-1])  # computing as the round ends
    value.backward()  # type: ignore[no-untyped-call]
    member.ledger.witness(first[-1], float(value.detach()))
    member.land(member.seal())  # its step waits for the landing
    member.begin()
    member.ledger.stepped(member.diloco.inner_step())  # and is taken in the next round
    for batch in batches(STEPS, seed=2):
        member.step(batch)
    member.seal()
    assert member.ledger.sealed(0) is not None
    assert member.ledger.sealed(0).receipt.replayable  # type: ignore[union-attr]
    assert not member.ledger.sealed(member.diloco.epoch).receipt.replayable  # type: ignore[union-attr]


async def overlapped_rounds(rig: Rig, after: int, take: int = 0, straddle: bool = False) -> Member:
    """An overlapped member's first round, then its second, during which the first lands after
    ``after`` of its steps (``take``: computed on that many samples of each batch, 0: all;
    ``straddle``: the next step's gradient computed before the landing); the backbone holds
    both anchors and saw the second round's weight."""
    member = Member(overlap=True)
    rig.serve(member)
    rig.began(0)
    first = member.round_until_end(batches(STEPS, seed=3))
    member.begin()
    data = batches(STEPS)
    part = [{k: v[:take] for k, v in b.items()} if take else b for b in data]
    for batch, computed in zip(data[:after], part[:after], strict=True):
        member.step(batch, computed)
    rest = list(zip(data[after:], part[after:], strict=True))
    if straddle:
        batch, computed = rest.pop(0)
        member.compute(batch, computed)
        member.land(first)
        assert not member.ledger.stale
        member.ledger.stepped(member.diloco.inner_step())
    else:
        member.land(first)
    d = member.diloco
    rig.checker.began(1, d.digest, d.anchor)
    for batch, computed in rest:
        member.step(batch, computed)
    member.end()
    rig.checker.sent(1, {rig.peer: 32.0 * STEPS})
    return member


@pytest.mark.parametrize(
    ("after", "straddle"), [(1, False), (STEPS // 2, False), (STEPS, False), (STEPS // 2, True)]
)
async def test_an_overlapped_round_is_replayed_across_the_landing_of_the_round_before(
    rig: Rig, after: int, straddle: bool
) -> None:
    """With overlap the round before lands mid-way through a round: the receipt says after which
    step (and whether the next step's gradient was computed before it, as the microbatch in
    flight then is), and the backbone replays the round from the two anchors it holds."""
    member = await overlapped_rounds(rig, after, straddle=straddle)
    sealed = member.ledger.sealed(1)
    assert sealed is not None
    receipt = sealed.receipt
    assert receipt.replayable
    assert receipt.opening is not None
    assert (receipt.opening.steps, receipt.opening.straddles) == (after, straddle)
    assert receipt.opening.state == rig.checker.anchors.get(0).state
    assert receipt.state == rig.checker.anchors.get(1).state
    record = await rig.checker.check(rig.peer, 1)
    assert record.verdict == "passed", record
    assert record.sampled == STEPS


async def test_a_lazy_overlapped_round_is_caught(rig: Rig) -> None:
    await overlapped_rounds(rig, STEPS // 2, take=8)
    record = await rig.checker.check(rig.peer, 1)
    assert record.verdict == "caught", record
    assert "from its replay" in record.reason


async def test_an_overlapped_round_that_began_at_another_state_judges_nothing(rig: Rig) -> None:
    """The backbone's anchor before the landing is not the one the round began at (it holds
    another, or none): judged neither way, and only the first is the member's word against
    the backbone's (its claim then waits for the allowance)."""
    member = await overlapped_rounds(rig, STEPS // 2)
    told: list[tuple[str, int]] = []
    rig.checker.on_unreplayable = lambda peer, epoch: told.append((peer, epoch))
    sealed = member.ledger.sealed(1)
    assert sealed is not None
    assert sealed.receipt.opening is not None
    opening = dataclasses.replace(sealed.receipt.opening, state="0" * 64)
    member.forge(1, receipt=dataclasses.replace(sealed.receipt, opening=opening))
    record = await rig.checker.check(rig.peer, 1)
    assert (record.verdict, told) == ("apart", [(rig.peer, 1)]), record
    rig.checker.anchors.forget(0)
    member.forge(1, receipt=sealed.receipt)
    record = await rig.checker.check(rig.peer, 1)
    assert (record.verdict, told) == ("apart", [(rig.peer, 1)]), record
    assert "no anchor of epoch 0" in record.reason


def test_a_download_mid_round_ends_its_replays_and_its_steps_go_on() -> None:
    """With overlap: a step after a move nobody told of (a download) is taken, and the round is
    filed as not replayable; a microbatch computed before the round began (at the last round's
    end) is left out, as without overlap."""
    member = Member(overlap=True)
    member.round_until_end(batches(STEPS, seed=3))
    data = batches(3)
    member.begin()
    member.step(data[0])
    member.diloco.moves += 1  # a download mid-round
    member.compute(data[1])
    assert not member.ledger.stale
    member.ledger.stepped(member.diloco.inner_step())
    member.compute(data[2])  # computing as the round ends
    member.end()
    member.begin()
    assert member.ledger.stale
    sealed = member.ledger.sealed(0)
    assert sealed is not None
    assert (len(sealed.receipt.steps), sealed.receipt.replayable) == (2, False)


def test_skipped_steps_are_not_filed_and_old_rounds_are_forgotten() -> None:
    member = Member()
    for epoch in range(5):
        data = batches(3, seed=epoch)
        member.begin()
        member.step(data[0])
        member.ledger.witness(data[1], float("nan"))
        member.ledger.stepped(False)  # a non-finite gradient: no step, no receipt entry
        member.step(data[2])
        member.land(member.seal())
        assert member.diloco.epoch == epoch + 1
    kept = [e for e in range(5) if member.ledger.sealed(e) is not None]
    assert kept == [2, 3, 4]
    sealed = member.ledger.sealed(4)
    assert sealed is not None
    assert len(sealed.receipt.steps) == 2
    assert sealed.receipt.samples == 64


@pytest.mark.parametrize(
    ("values", "block"),
    [
        (1, MIN_BLOCK_BYTES),
        (1_262_720, MIN_BLOCK_BYTES),  # the demo's model: 309 blocks, a check fetches 1.3 %
        (70_000_000, 5 * MIN_BLOCK_BYTES),  # 68,360 bytes per block, rounded up: 3,418 blocks
        (1_000_000_000, 60 * MIN_BLOCK_BYTES),  # 4,070 blocks
        (10_000_000_000, MAX_BLOCK_BYTES),  # past 4,096 blocks of the largest: 9,537 blocks
    ],
)
def test_the_work_is_cut_into_blocks_by_the_models_size(values: int, block: int) -> None:
    assert work_block_bytes(values) == block
    assert -(-4 * values // block) <= max(4096, -(-4 * values // MAX_BLOCK_BYTES))


def test_a_receipt_names_every_block_of_a_larger_models_work() -> None:
    member = Member()
    member.begin()
    for batch in batches(STEPS):
        member.step(batch)
    work = np.random.default_rng(0).normal(size=10_000).astype(np.float32)  # 2 blocks and a bit
    sent = member.ledger.seal(work, member.diloco.digest, member.diloco.epoch)
    assert sent is not None
    raw = work.astype("<f4").tobytes()
    blocks = [raw[at : at + MIN_BLOCK_BYTES] for at in range(0, len(raw), MIN_BLOCK_BYTES)]
    assert [len(b) // 4 for b in blocks] == [4096, 4096, 1808]
    assert sent.work == [block_digests([np.frombuffer(b, np.uint8)], MIN_BLOCK_BYTES)[0]
                         for b in blocks]  # fmt: skip
    with pytest.raises(WireFormatError, match="float32 values"):
        WorkBlock(bytes(MAX_BLOCK_BYTES + 4))


def receipt(**changes: object) -> RoundReceipt:
    fields: dict[str, object] = {
        "epoch": 3, "state": "ab" * 32, "schedule": 24.0, "per_round": 8.0,
        "precision": "float32", "replayable": True,
        "steps": [StepEntry(32, bytes(32)), StepEntry(16, bytes(32))], "work": [bytes(32)],
    }  # fmt: skip
    fields.update(changes)
    return RoundReceipt(**fields)  # type: ignore[arg-type]


def test_a_round_receipt_survives_the_wire() -> None:
    sent = receipt()
    assert RoundReceipt.from_wire(sent.to_wire()) == sent
    assert sent.samples == 48


@pytest.mark.parametrize(
    "changes",
    [
        {"epoch": -1},
        {"state": "ab"},
        {"schedule": float("nan")},
        {"per_round": -1.0},
        {"per_round": float("inf")},
        {"precision": "float8"},
        {"work": []},
        {"work": [bytes(31)]},
        {"steps": [StepEntry(32, bytes(32))] * 16385},
    ],
)
def test_a_malformed_round_receipt_is_refused(changes: dict[str, object]) -> None:
    wire = receipt().to_wire()
    names = [f.name for f in dataclasses.fields(RoundReceipt)]
    for key, value in changes.items():
        wire[names.index(key)] = [s.to_wire() for s in value] if key == "steps" else value  # type: ignore[attr-defined]
    with pytest.raises(WireFormatError):
        RoundReceipt.from_wire(wire)


async def test_trainers_rounds_are_checked_after_they_land(
    make_dpeer: MakeDPeer, make_host: MakeHost
) -> None:
    """Two trainers keep round receipts as they train; once a round lands the backbone's
    checker, on its own replica, replays each one's round and passes it. A microbatch that was
    computing as a round ended is left out of the next (its gradient is the last round's), and
    that round still replays."""
    a = await make_dpeer(keep_rounds=True)
    b = await make_dpeer(keep_rounds=True)
    await settle([a, b])
    host, dht = await start_node(make_host, a.address)
    bridge, tasks = TrainingBridge(), BackgroundTasks("round-checks-swarm")
    model = fresh_model()
    state = TrainingState(model, torch.optim.AdamW(model.parameters(), lr=0.01))
    held = DilocoState(state, outer_lr=0.7, outer_momentum=0.9, overlap=False, sparse=False,
                       clip_norm=None, fresh_moments=True)  # fmt: skip
    standings = Standings(1.0)
    steps = {0: 6, 1: 3, 2: 5}

    def mse(m: torch.nn.Module, batch: Batch) -> torch.Tensor:
        return torch.nn.functional.mse_loss(m(batch["x"]), batch["y"])

    checker = RoundChecker(
        held, host, bridge=bridge, loss=mse, standings=standings,
        evidence=EvidenceBoard(dht, host.identity, "diloco"), tasks=tasks,
    )  # fmt: skip
    batch = {"x": torch.randn(4, 8), "y": torch.randn(4, 2)}

    def straddles() -> None:
        """A microbatch's backward pass, whose step the round's end will delay."""
        a.optimizer.fresh(batch)
        value = mse(a.model, batch)
        value.backward()  # type: ignore[no-untyped-call]
        assert a.witness is not None
        a.witness(batch, float(value.detach()))

    try:
        for epoch in range(3):
            checker.began(epoch, a.optimizer.diloco.digest, a.optimizer.diloco.anchor)
            if epoch == 2:
                await a.optimizer.step(4, 1.0)  # the straddling microbatch's step
                assert a.optimizer.rounds_kept is not None
                assert a.optimizer.rounds_kept.discarded == 1
            await a.train(steps[epoch], seed=2 * epoch + 1)
            await b.train(steps[epoch], seed=2 * epoch + 2)
            if epoch == 1:
                await a.bridge.run(straddles)
            await end_rounds([a, b])
            assert a.optimizer.epoch == b.optimizer.epoch == epoch + 1
            names = (str(a.averager.host.peer_id), str(b.averager.host.peer_id))
            checker.sent(epoch, dict.fromkeys(names, 4.0 * steps[epoch]))
            for peer in (a, b):
                record = await checker.check(str(peer.averager.host.peer_id), epoch)
                assert (record.verdict, record.margin) == ("passed", 0.0), record
                assert record.sampled == steps[epoch]
    finally:
        await tasks.close()
        await bridge.aclose()
        await dht.close()


async def test_a_trainer_that_is_leaving_is_not_accused_of_refusing(rig: Rig) -> None:
    """A trainer stopping answers checks that it is leaving until its host closes: unreached,
    where "no such method" would have failed the check of an honest volunteer going home."""
    member = await honest_round(rig)
    member.ledger.leave()
    record = await rig.checker.check(rig.peer, 0)
    assert record.verdict == "unreached", record
    assert "leaving" in record.reason
    assert not rig.standings.of(rig.peer).caught


def carrying_round(rig: Rig, member: Member, since: int | None = 0) -> None:
    """Round 0 honest and landed (as one that landed less than half of its work: its samples
    carried), then round 1 sent with them, carried ``since`` that epoch."""
    rig.serve(member)
    rig.began()
    delta = member.round(batches(STEPS, seed=3))
    member.land(delta)
    d = member.diloco
    rig.checker.began(1, d.digest, d.anchor)
    member.begin()
    for batch in batches(STEPS):
        member.step(batch)
    member.ledger.seal(d.round_work(), d.digest, d.epoch, 32 * STEPS, since)
    rig.checker.sent(0, {rig.peer: 32.0 * STEPS})
    rig.checker.sent(1, {rig.peer: 2 * 32.0 * STEPS})


async def test_a_round_that_carries_the_round_befores_samples_is_replayed_with_it(
    rig: Rig,
) -> None:
    """The round before landed less than half of its work, so its samples go out with this one:
    its weight is its own samples and those, and the check replays both rounds."""
    member = Member()
    carrying_round(rig, member)
    sealed = member.ledger.sealed(1)
    assert sealed is not None
    assert (sealed.receipt.replayable, sealed.receipt.carried) == (True, 32 * STEPS)
    record = await rig.checker.check(rig.peer, 1)
    assert record.verdict == "passed", record
    assert record.sampled == 2 * STEPS  # both rounds' steps replayed
    assert (record.claimed, record.backed) == (2 * 32 * STEPS, 2 * 32 * STEPS)


async def test_a_round_carrying_older_work_is_judged_neither_way(rig: Rig) -> None:
    """Samples carried from further back (rounds that found no group, before a restart) have no
    receipt just before it: the round cannot be replayed, its weight above its receipt accuses
    nobody, and its claim is paid from the allowance."""
    member = Member()
    carrying_round(rig, member, since=None)
    record = await rig.checker.check(rig.peer, 1)
    assert record.verdict == "apart", record
    assert not rig.standings.of(rig.peer).caught


async def test_samples_carried_from_an_anchor_the_backbone_no_longer_keeps_judge_nothing(
    rig: Rig,
) -> None:
    """Not the member's doing: judged neither way (an open check would hold its claims until it
    expired, withdrawing what it was paid)."""
    member = Member()
    carrying_round(rig, member)
    rig.checker.anchors.forget(0)
    record = await rig.checker.check(rig.peer, 1)
    assert record.verdict == "apart", record
    assert not rig.standings.of(rig.peer).open


async def test_samples_carried_from_a_round_no_replay_judges_are_caught(rig: Rig) -> None:
    """A member that files the round before as begun elsewhere (so that its check would judge
    nothing) and carries its samples into an honest round: an honest ledger never carries them
    so (the two anchors follow one another), so the check catches it."""
    member = Member()
    carrying_round(rig, member)
    before = member.ledger.sealed(0)
    assert before is not None
    member.forge(0, receipt=dataclasses.replace(before.receipt, state="0" * 64))
    record = await rig.checker.check(rig.peer, 1)
    assert record.verdict == "caught", record
    assert "no replay judges" in record.reason


async def test_a_round_of_a_restarts_unsent_work_alone_is_filed_and_judged_neither_way(
    rig: Rig,
) -> None:
    """A trainer that restarts sends its unsent work with its first round, which may end before
    its first step: the round goes out with that weight, so it is filed (not replayable, no
    step), and the check judges it neither way where "keeps no receipt" accused an honest
    restart."""
    member = Member()
    rig.serve(member)
    rig.began()
    d = member.diloco
    receipt = member.ledger.seal(d.round_work(), d.digest, d.epoch, 352, 0, now=member.start())
    assert receipt is not None
    assert (receipt.steps, receipt.carried, receipt.replayable) == ([], 352, False)
    assert member.ledger.seal(d.round_work(), d.digest, d.epoch, now=member.start()) is None
    rig.checker.sent(0, {rig.peer: 352.0})
    told: list[tuple[str, int]] = []
    rig.checker.on_unreplayable = lambda peer, epoch: told.append((peer, epoch))
    record = await rig.checker.check(rig.peer, 0)
    assert record.verdict == "apart", record
    assert told == [(rig.peer, 0)]  # paid from its allowance
    assert not rig.standings.of(rig.peer).caught


def test_a_round_after_a_download_does_not_carry_the_round_befores_samples_replayably() -> None:
    """The anchor moved between the two rounds other than by the landing: a checker may hold
    one of the two anchors and not the other, so the round is filed as not replayable."""
    member = Member()
    member.land(member.round(batches(STEPS, seed=3)))
    d = member.diloco
    d.moves += 1  # a download after the landing
    member.begin()
    for batch in batches(STEPS):
        member.step(batch)
    receipt = member.ledger.seal(d.round_work(), d.digest, d.epoch, 32 * STEPS, 0)
    assert receipt is not None
    assert not receipt.replayable


async def test_samples_carried_beyond_the_round_befores_receipt_are_caught(rig: Rig) -> None:
    member = Member()
    carrying_round(rig, member)
    sealed = member.ledger.sealed(1)
    assert sealed is not None
    member.forge(1, receipt=dataclasses.replace(sealed.receipt, carried=3 * 32 * STEPS))
    rig.checker.sent(1, {rig.peer: 4 * 32.0 * STEPS})
    record = await rig.checker.check(rig.peer, 1)
    assert record.verdict == "caught", record
    assert "whose receipt backs 256" in record.reason


@asynccontextmanager
async def replaying_backbone(peer: DPeer) -> AsyncIterator[tuple[DilocoBackbone, RoundChecker]]:
    """``peer``'s optimizer run as a backbone that replays every member's every round (the test
    model, its MSE loss), once it holds the anchor of epoch 0; stopped on the way out."""
    import asyncio

    from tests.support.leaks import wait_until

    def training_state() -> TrainingState:
        model = fresh_model()
        return TrainingState(model, torch.optim.AdamW(model.parameters(), lr=0.01))

    def mse(m: torch.nn.Module, batch: Batch) -> torch.Tensor:
        return torch.nn.functional.mse_loss(m(batch["x"]), batch["y"])

    backbone = DilocoBackbone(
        peer.optimizer, checkpoints=None, checkpoint_every=0,
        round_checks=RoundChecks(1.0, mse, training_state),
    )  # fmt: skip
    checker = backbone.checker
    assert checker is not None
    stop = asyncio.Event()
    running = asyncio.create_task(backbone.run(stop), name="test/diloco-backbone")
    try:
        await wait_until(lambda: 0 in checker.anchors)  # started, its anchor kept
        yield backbone, checker
    finally:
        stop.set()
        await asyncio.wait_for(running, 30)


async def test_the_backbone_replays_the_rounds_and_credit_follows_them(
    make_dpeer: MakeDPeer,
) -> None:
    """A backbone with round checks draws every member of each landed round (newcomers always):
    the honest trainer's round passes and its claim is credited as made; the trainer that sends
    its round with twice the samples it computed is caught, accused, and credited nothing."""
    from tests.support.leaks import wait_until

    backbone_peer = await make_dpeer(role="backbone", start=False)
    honest = await make_dpeer(keep_rounds=True)
    greedy = await make_dpeer(keep_rounds=True)
    greedy.optimizer.claim = 2.0

    async with replaying_backbone(backbone_peer) as (backbone, checker):
        await settle([backbone_peer, honest, greedy])
        await honest.train(6, seed=1)
        await greedy.train(6, seed=2)
        await end_rounds([backbone_peer, honest, greedy])
        assert honest.optimizer.epoch == greedy.optimizer.epoch == 1
        await wait_until(lambda: len(checker.records) == 2, timeout=60)
        verdicts = {r.peer: (r.verdict, r.reason) for r in checker.records}
        me, cheat = str(honest.averager.host.peer_id), str(greedy.averager.host.peer_id)
        assert verdicts[me] == ("passed", "")
        assert verdicts[cheat][0] == "caught"
        assert "its receipt backs 24" in verdicts[cheat][1]
        standings = checker.standings
        assert standings.supported(me, 0, 24, now=time.time()) == 24
        assert standings.supported(cheat, 0, 48, now=time.time()) == 0
        # the honest trainer's record says its round began at the backbone's anchor: paid as
        # a replayable round
        [entry] = [item for item in honest.optimizer.landed.items() if item.epoch == 0]
        anchor = checker.state_at(0)
        assert entry.began is not None
        assert anchor is not None
        assert anchor.startswith(entry.began)
        assert backbone.round_credit is not None
        assert backbone.round_credit.supported(me, 0, 24, time.time(), entry.began) == 24
        # had a check then found its receipt saying the round could not be replayed, its
        # records and its receipt would disagree: it is accused and nothing more is paid
        signed: list[tuple[str, str]] = []

        def sign(peer: str, epoch: int, statistic: str, value: float, reason: str) -> None:
            signed.append((peer, statistic))

        backbone._sign = sign  # type: ignore[method-assign]
        backbone.round_credit.unreplayable(me, 0)
        backbone.accuse_records()
        assert signed == [(me, "round_mislabeled")]
        assert standings.of(me).caught
        # a member no replay judged yet is held however long
        assert standings.supported("stranger", 0, 24, now=time.time()) is None
        assert standings.supported("stranger", 0, 24, now=time.time() + 1e6) is None


async def test_a_backbone_that_missed_a_landing_replays_from_the_anchor_it_downloads(
    make_dpeer: MakeDPeer,
) -> None:
    """The trainers land a round without the backbone; it catches up by downloading their state,
    keeps that anchor, and replays their next round from it (without it, that round's claims
    would all wait for the allowance, and none would be replayed)."""
    from tests.support.leaks import wait_until

    backbone_peer = await make_dpeer(role="backbone", start=False)
    trainers = [await make_dpeer(keep_rounds=True) for _ in range(2)]
    async with replaying_backbone(backbone_peer) as (_, checker):
        await settle([backbone_peer, *trainers])
        for seed, trainer in enumerate(trainers):
            await trainer.train(6, seed=seed)
        await end_rounds(trainers)  # the backbone misses this landing
        assert [t.optimizer.epoch for t in trainers] == [1, 1]
        assert backbone_peer.optimizer.epoch == 0
        assert checker.state_at(1) is None
        await backbone_peer.optimizer._refresh()
        assert await backbone_peer.optimizer.mending.catch_up()
        await wait_until(lambda: checker.state_at(1) is not None, timeout=30)
        assert checker.state_at(1) == trainers[0].optimizer.diloco.digest
        for seed, trainer in enumerate(trainers):
            await trainer.train(6, seed=10 + seed)
        await end_rounds([backbone_peer, *trainers])
        assert [t.optimizer.epoch for t in trainers] == [2, 2]
        await wait_until(lambda: len(checker.records) == 2, timeout=60)
        assert [(r.epoch, r.verdict) for r in checker.records] == [(1, "passed")] * 2


async def test_the_backbone_replays_the_members_of_every_group(
    make_dpeer: MakeDPeer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Groups of two: the backbone's group holds one trainer, the other group two, and the
    columns land one mean, so the backbone replays all three from its anchor. A member claiming
    twice its samples is caught in the backbone's group (its weight is more than its receipt),
    and in another its records are cut to its receipt and accused."""
    from tests.support.leaks import wait_until

    backbone_peer = await make_dpeer(role="backbone", start=False, group_size=2)
    honest = [await make_dpeer(keep_rounds=True, group_size=2) for _ in range(2)]
    greedy = await make_dpeer(keep_rounds=True, group_size=2)
    greedy.optimizer.claim = 2.0
    trainers = [*honest, greedy]

    async with replaying_backbone(backbone_peer) as (backbone, checker):
        await settle([backbone_peer, *trainers])
        for seed, peer in enumerate(trainers):
            await peer.train(6, seed=seed + 1)
        await end_rounds([backbone_peer, *trainers])
        assert [p.optimizer.epoch for p in trainers] == [1, 1, 1]
        assert {p.optimizer.reports[-1].group_size for p in trainers} != {4}, "one group"
        await wait_until(lambda: len(checker.records) == 3, timeout=90)
        verdicts = {r.peer: (r.verdict, r.reason) for r in checker.records}
        for peer in honest:
            assert verdicts[str(peer.averager.host.peer_id)] == ("passed", "")
        cheat = str(greedy.averager.host.peer_id)
        with_backbone = backbone_peer.optimizer.reports[-1].group_size
        scores = backbone.scores
        if cheat in checker._sent[0]:  # grouped with the backbone: its weight betrays it
            assert verdicts[cheat][0] == "caught", (verdicts, with_backbone)
        else:  # its work is honest; its records claim twice what its receipt backs
            assert verdicts[cheat] == ("passed", "")
            assert scores.receipted(cheat, 0)
            assert scores.bounded(cheat, 0, 48) == 24
            signed: list[tuple[str, str, str]] = []

            def sign(peer: str, epoch: int, what: str, value: float, why: str) -> None:
                signed.append((peer, what, why))

            monkeypatch.setattr(backbone, "_sign", sign)
            backbone.accuse_records()
            why = (
                "its record claims 48 samples for epoch 0, where its receipt of that round backs 24"
            )
            assert signed == [(cheat, "record_overclaim", why)]
            assert checker.standings.of(cheat).caught  # nothing more paid, the trusted withdrawn
            assert checker.standings.supported(cheat, 1, 48, now=time.time()) == 0
        others = [str(p.averager.host.peer_id) for p in trainers]
        assert sum(scores.receipted(p, 0) for p in others) >= 1  # another group was replayed


async def test_overlapped_rounds_are_replayed_and_credit_follows_them(
    make_dpeer: MakeDPeer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trainers with overlap (the default) and round checks: each round starts at the anchor,
    the round before lands after three of its steps, and the backbone replays every round from
    the two anchors; the trainer sending twice its samples is caught, the honest one passes."""
    from tests.support.leaks import wait_until

    backbone_peer = await make_dpeer(role="backbone", start=False, overlap=True)
    honest = await make_dpeer(keep_rounds=True, overlap=True)
    greedy = await make_dpeer(keep_rounds=True, overlap=True)
    greedy.optimizer.claim = 2.0
    trainers = [honest, greedy]
    gate = asyncio.Event()
    for peer in trainers:
        outcome = peer.optimizer._outcome

        async def held(*args: Any, outcome: Any = outcome, **kwargs: Any) -> Any:
            await gate.wait()  # the landing waits until the next round took its first steps
            return await outcome(*args, **kwargs)

        monkeypatch.setattr(peer.optimizer, "_outcome", held)

    async with replaying_backbone(backbone_peer) as (_, checker):
        await settle([backbone_peer, *trainers])
        for seed, peer in enumerate(trainers):
            await peer.train(6, seed=seed)
        await asyncio.gather(*(p.optimizer.end_round() for p in [backbone_peer, *trainers]))
        for seed, peer in enumerate(trainers):
            await peer.train(3, seed=10 + seed)  # at the anchor of epoch 0, the round still out
        gate.set()
        await asyncio.gather(*(p.optimizer._exchange for p in trainers if p.optimizer._exchange))
        assert [p.optimizer.epoch for p in trainers] == [1, 1]
        for seed, peer in enumerate(trainers):
            await peer.train(3, seed=20 + seed)
        await end_rounds([backbone_peer, *trainers])
        assert [p.optimizer.epoch for p in trainers] == [2, 2]
        for peer in trainers:
            kept = peer.optimizer.rounds_kept
            assert kept is not None
            sealed = kept.sealed(1)
            assert sealed is not None
            assert sealed.receipt.replayable
            assert sealed.receipt.opening is not None
            assert sealed.receipt.opening.steps == 3
        # the cheat, caught in its first round, is not drawn again
        await wait_until(lambda: len(checker.records) == 3, timeout=90)
        verdicts = {(r.peer, r.epoch): (r.verdict, r.reason) for r in checker.records}
        me, cheat = str(honest.averager.host.peer_id), str(greedy.averager.host.peer_id)
        assert verdicts[(me, 0)] == verdicts[(me, 1)] == ("passed", ""), verdicts
        assert verdicts[(cheat, 0)][0] == "caught", verdicts
        assert checker.standings.supported(me, 1, 24, now=time.time()) == 24
        assert checker.standings.supported(cheat, 1, 48, now=time.time()) == 0


async def test_without_overlap_no_inner_step_is_taken_while_a_round_lands(
    make_dpeer: MakeDPeer,
) -> None:
    """A step that was waiting for the optimizer's lock while a round ended must wait for that
    round's landing too: taken before it, the landing would overwrite it (work lost, and the
    next round no longer starts at the anchor)."""
    import asyncio

    peer = await make_dpeer(keep_rounds=True)
    opt = peer.optimizer
    await opt._lock.acquire()  # as a round's end holds it
    stepping = asyncio.create_task(opt.step(4, 1.0))
    await asyncio.sleep(0.05)
    landing: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def exchange() -> None:
        await landing

    opt._exchange = asyncio.create_task(exchange())  # the round goes out, then releases the lock
    opt._lock.release()
    try:
        await asyncio.sleep(0.2)
        assert (opt.diloco.round_steps, stepping.done()) == (0, False)
    finally:
        landing.set_result(None)
        await asyncio.wait_for(stepping, 10)
    assert opt.diloco.round_steps == 1
