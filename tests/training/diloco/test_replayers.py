"""Rounds replayed by a trainer the backbone trusts (``RoundReplayer``), over loopback: the backbone
asks it, compares its blocks with the member's itself, and replays the round itself only where
the two disagree, where it audits one, or where no trainer could replay it. A replayer never
judges alone: its word cannot frame an honest member, and one that answers what no replay gives
is caught."""

# ruff: noqa: F811 (the tests take the fixtures they import by their names)

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np
import pytest

from core.net import Host
from core.net.errors import InvalidRequestError, PermissionDeniedError
from core.net.wire.rpc import CallContext
from core.training.credit.checks.receipts import SampledBatch
from core.training.diloco.checks import checker as checker_module
from core.training.diloco.checks import sketch as sketch_module
from core.training.diloco.checks.receipts import (
    ROUND_BATCH,
    ROUND_RECEIPT,
    ROUND_RELAY,
    ROUND_REPLAY,
    RelayRequest,
    ReplayedSketch,
    ReplayRequest,
    RoundRequest,
    StepRequest,
    work_block_bytes,
)
from core.training.diloco.checks.replayer import RoundReplayer
from core.training.diloco.checks.sketch import WIDTH, sketch
from core.trust.peer_id import PeerID
from core.worker.bridge import TrainingBridge
from tests.conftest import MakeHost
from tests.training.conftest import NET
from tests.training.diloco.conftest import MakeDPeer, settle
from tests.training.diloco.test_replay import batches, loss, replica
from tests.training.diloco.test_round_checks import (  # noqa: F401 (the fixture)
    STEPS,
    Member,
    Rig,
    lazy,
    rig,
)


@dataclass
class Helper:
    replayer: RoundReplayer
    host: Host

    @property
    def peer(self) -> str:
        return str(self.host.peer_id)


async def trusted_helper(rig: Rig, make_host: MakeHost) -> AsyncIterator[Helper]:
    """A trainer whose own round passed its replay, present in the round, keeping its anchors."""
    host = await make_host(NET)
    rig.backbone.add_addresses(host.peer_id, host.listen_addresses)
    host.add_addresses(rig.backbone.peer_id, rig.backbone.listen_addresses)
    bridge = TrainingBridge()
    replayer = RoundReplayer(replica(), host, bridge=bridge, loss=loss)
    replayer.asks = lambda p: p == rig.backbone.peer_id
    replayer.serve()
    held = replica()
    replayer.began(0, held.digest, held.anchor)
    rig.checker.standings.passed(str(host.peer_id), 0)
    yield Helper(replayer, host)
    await bridge.aclose()


@pytest.fixture
async def helper(
    rig: Rig, make_host: MakeHost, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Helper]:
    """The one trainer that replays a round (what one replay involves; the quorum the
    backbone asks for by default is tested with ``two``)."""
    monkeypatch.setattr(checker_module, "REPLAYERS", 1)
    async for found in trusted_helper(rig, make_host):
        yield found


@pytest.fixture
async def two(rig: Rig, make_host: MakeHost) -> AsyncIterator[tuple[Helper, Helper]]:
    """Two trusted trainers, as many as the backbone hands each round to by default."""
    first, second = trusted_helper(rig, make_host), trusted_helper(rig, make_host)
    yield await anext(first), await anext(second)
    for made in (first, second):
        with contextlib.suppress(StopAsyncIteration):
            await anext(made)


async def a_round(rig: Rig, *helpers: Helper, cheat: object = None) -> Member:
    member = Member()
    rig.serve(member)
    rig.began()
    rig.checker.sent(0, {rig.peer: 32.0 * STEPS} | {h.peer: 32.0 * STEPS for h in helpers})
    rig.checker.helpers.met(0, [rig.peer, *(h.peer for h in helpers)])
    if cheat is None:
        member.round(batches(STEPS))
    else:
        cheat(rig, member)  # type: ignore[operator]
    return member


def never_audited(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checker_module, "AUDITED", 0.0)


async def test_an_honest_round_replayed_by_a_trainer_passes_at_no_compute_of_the_backbones(
    rig: Rig, helper: Helper, monkeypatch: pytest.MonkeyPatch
) -> None:
    never_audited(monkeypatch)
    await a_round(rig, helper)
    assert rig.checker.helpers.idle(rig.peer) == [helper.peer]
    assert (
        rig.checker.helpers.idle(helper.peer) == []
    )  # not its own round; the member is a newcomer
    record = await rig.checker.check(rig.peer, 0)
    assert (record.verdict, record.reason) == ("passed", ""), record
    assert record.compute == 0.0  # nothing replayed here
    assert record.replayer == helper.peer
    assert record.sampled == STEPS
    assert (helper.replayer.replayed, rig.checker.helpers.helped) == (1, 1)
    assert helper.replayer.seconds > 0
    # the batches went to the replayer, a sketch of its blocks back (no more than WIDTH values,
    # whatever the model)
    assert helper.replayer.received > 0
    assert 0 < helper.replayer.sent < 4 * WIDTH + 1024
    assert rig.standings.supported(rig.peer, 0, 32 * STEPS, now=0.0) == 32 * STEPS


async def test_a_cheat_a_trainer_replayed_is_caught_on_the_backbones_own_replay(
    rig: Rig, helper: Helper, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trainer's replay and the member's work disagree: the backbone replays the round
    itself, agrees with the trainer, and catches the member; the trainer stays trusted."""
    never_audited(monkeypatch)
    await a_round(rig, helper, cheat=lazy)
    record = await rig.checker.check(rig.peer, 0)
    assert record.verdict == "caught", record
    assert "from its replay" in record.reason
    assert record.compute > 0
    assert record.replayer == helper.peer  # replayed by both: the record says so
    assert helper.replayer.replayed == 1
    assert not rig.standings.of(helper.peer).caught
    assert rig.checker.helpers.idle(rig.peer) == [helper.peer]


class Lies:
    """What a dishonest replayer answers in place of its replay."""

    @staticmethod
    def noise(request: ReplayRequest, honest: ReplayedSketch) -> ReplayedSketch:
        rng = np.random.default_rng(3)
        return ReplayedSketch(rng.standard_normal(len(honest.sketch) // 4).astype("<f4").tobytes())

    @staticmethod
    def scaled(request: ReplayRequest, honest: ReplayedSketch) -> ReplayedSketch:
        return ReplayedSketch((np.frombuffer(honest.sketch, "<f4") * 0.5).astype("<f4").tobytes())


def its_own_work(member: Member, request: ReplayRequest, key: int | None = None) -> ReplayedSketch:
    """The member's own work of the blocks asked for, sketched (under the key asked for unless
    told another): what a replayer colluding with the member answers."""
    sealed = member.ledger.sealed(0)
    assert sealed is not None
    work = np.frombuffer(sealed.work, "<f4")
    per_block = work_block_bytes(work.size) // 4
    drawn = np.concatenate([work[i * per_block : (i + 1) * per_block] for i in request.blocks])
    return ReplayedSketch(sketch(drawn, request.key if key is None else key).tobytes())


def lying(helper: Helper, lie: object, monkeypatch: pytest.MonkeyPatch) -> None:
    honest = helper.replayer._replay

    async def replay(request: ReplayRequest, backbone: PeerID) -> ReplayedSketch:
        return lie(request, await honest(request, backbone))  # type: ignore[operator, no-any-return]

    monkeypatch.setattr(helper.replayer, "_replay", replay)


@pytest.mark.parametrize("lie", [Lies.noise, Lies.scaled])
async def test_a_replayer_that_frames_an_honest_member_is_caught_and_the_member_passes(
    rig: Rig, helper: Helper, monkeypatch: pytest.MonkeyPatch, lie: object
) -> None:
    never_audited(monkeypatch)
    lying(helper, lie, monkeypatch)
    await a_round(rig, helper)
    record = await rig.checker.check(rig.peer, 0)
    assert (record.verdict, record.reason) == ("passed", ""), record
    assert record.compute > 0
    assert rig.standings.of(helper.peer).caught
    convicted = [r for r in rig.checker.records if r.peer == helper.peer]
    assert [(r.verdict, r.claimed) for r in convicted] == [("caught", 0)]  # what the audit reads
    assert "from the backbone's" in convicted[0].reason
    found = await rig.checker.verdicts.evidence.fetch()
    assert [(r.evidence.accused, r.evidence.statistic) for r in found] == [
        (helper.host.peer_id, "replay_false")
    ]
    assert rig.checker.helpers.idle(rig.peer) == []  # never asked again


async def test_a_replay_sketched_under_another_key_frames_nobody(
    rig: Rig, helper: Helper, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replayer answers the right values (the honest member's work is its replay) under a key
    of its own: the sketches disagree, the backbone replays the round itself, the member passes
    and the replayer is caught. (The rig's model is small: its blocks are sketched in 64 buckets
    here, as a real model's in ``WIDTH``.)"""
    monkeypatch.setattr(sketch_module, "WIDTH", 64)
    member: Member | None = None

    def own_key(request: ReplayRequest, honest: ReplayedSketch) -> ReplayedSketch:
        assert member is not None
        assert its_own_work(member, request).sketch == honest.sketch  # float32: the same
        return its_own_work(member, request, key=request.key ^ 1)

    never_audited(monkeypatch)
    lying(helper, own_key, monkeypatch)
    member = await a_round(rig, helper)
    record = await rig.checker.check(rig.peer, 0)
    assert (record.verdict, record.reason) == ("passed", ""), record
    assert record.compute > 0
    assert rig.standings.of(helper.peer).caught


async def test_a_replayer_that_passes_its_partners_cheat_is_caught_when_audited(
    rig: Rig, helper: Helper, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A colluding replayer answers the member's own work as its replay: the cheat passes
    unless the backbone audits the round, drawn after the answer came; audited, both are
    caught."""
    member: Member | None = None

    def echo(request: ReplayRequest, honest: ReplayedSketch) -> ReplayedSketch:
        assert member is not None
        return its_own_work(member, request)

    lying(helper, echo, monkeypatch)
    monkeypatch.setattr(checker_module, "AUDITED", 1.0)
    monkeypatch.setattr(rig.checker.audits, "allows", lambda *_: True)  # within its budget
    member = await a_round(rig, helper, cheat=lazy)
    record = await rig.checker.check(rig.peer, 0)
    assert record.verdict == "caught", record
    assert (record.replayer, record.compute > 0) == (helper.peer, True)  # an audit
    assert rig.standings.of(helper.peer).caught


async def test_unaudited_a_lone_colluding_replayers_pass_goes_through(
    rig: Rig, helper: Helper, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same collusion, not audited, where one replayer is asked: what the audits and the
    quorum of replayers are for (the price of the trust the backbone lends its replayers)."""
    member: Member | None = None

    def echo(request: ReplayRequest, honest: ReplayedSketch) -> ReplayedSketch:
        assert member is not None
        return its_own_work(member, request)

    lying(helper, echo, monkeypatch)
    never_audited(monkeypatch)
    member = await a_round(rig, helper, cheat=lazy)
    record = await rig.checker.check(rig.peer, 0)
    assert record.verdict == "passed", record


async def test_two_honest_replayers_pass_an_honest_round_at_no_compute_of_the_backbones(
    rig: Rig, two: tuple[Helper, Helper], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both replay it on the batches the backbone relays: the member serves each batch once."""
    never_audited(monkeypatch)
    member = await a_round(rig, *two)
    served: list[int] = []
    on_batch = member.ledger._on_batch

    async def counted(ctx: CallContext, request: StepRequest) -> SampledBatch:
        served.append(request.index)
        return await on_batch(ctx, request)

    rig.member_host.router.remove(ROUND_BATCH.name)
    rig.member_host.router.add(ROUND_BATCH, counted)
    record = await rig.checker.check(rig.peer, 0)
    assert served == list(range(STEPS))
    assert (record.verdict, record.reason, record.compute) == ("passed", "", 0.0), record
    assert sorted(record.replayer.split(",")) == sorted(h.peer for h in two)
    assert [h.replayer.replayed for h in two] == [1, 1]
    assert rig.checker.helpers.helped == 2
    assert rig.standings.supported(rig.peer, 0, 32 * STEPS, now=0.0) == 32 * STEPS


@pytest.mark.parametrize("partners", [1, 2])
async def test_a_cheats_partner_among_the_replayers_passes_it_only_where_every_one_is(
    rig: Rig, two: tuple[Helper, Helper], monkeypatch: pytest.MonkeyPatch, partners: int
) -> None:
    """The cheat's partners answer the cheat's own work as their replay. Beside an honest
    replayer they disagree: the backbone replays the round itself, unaudited, and catches the
    member and its partner, not the honest replayer. Where both replayers drawn are partners
    the fake passes (unaudited): with c partners among n trusted trainers, about (c/n)^2 of
    the rounds handed out."""
    member: Member | None = None

    def echo(request: ReplayRequest, honest: ReplayedSketch) -> ReplayedSketch:
        assert member is not None
        return its_own_work(member, request)

    for partner in two[:partners]:
        lying(partner, echo, monkeypatch)
    never_audited(monkeypatch)
    member = await a_round(rig, *two, cheat=lazy)
    record = await rig.checker.check(rig.peer, 0)
    if partners == 2:
        assert (record.verdict, record.compute) == ("passed", 0.0), record
        return
    assert record.verdict == "caught", record
    assert "from its replay" in record.reason
    assert record.compute > 0
    assert rig.standings.of(two[0].peer).caught
    assert not rig.standings.of(two[1].peer).caught
    found = await rig.checker.verdicts.evidence.fetch()
    assert sorted((str(r.evidence.accused), r.evidence.statistic) for r in found) == sorted(
        [(rig.peer, "round_replay"), (two[0].peer, "replay_false")]
    )


async def test_with_fewer_trainers_idle_than_a_replay_takes_the_backbone_replays_alone(
    rig: Rig, two: tuple[Helper, Helper], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One of the two trainers is busy replaying another round and stays so: no trainer's word
    alone vouches for a member, so after a wait the backbone replays the round itself and asks
    nobody."""
    never_audited(monkeypatch)
    monkeypatch.setattr(checker_module, "FREE_WAIT", 0.3)
    await a_round(rig, *two)
    rig.checker.helpers.asked(two[1].peer)
    record = await rig.checker.check(rig.peer, 0)
    assert (record.verdict, record.reason) == ("passed", ""), record
    assert record.compute > 0
    assert not record.replayer
    assert [h.replayer.replayed for h in two] == [0, 0]


async def test_a_member_that_drops_its_round_while_replayers_are_awaited_is_still_judged(
    rig: Rig, two: tuple[Helper, Helper], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An honest member keeps its last rounds only: one that moves on while the check waits for
    free replayers is not "unreached" (which would expire and withdraw its credit), since the
    backbone took the round's batches before waiting."""
    never_audited(monkeypatch)
    monkeypatch.setattr(checker_module, "FREE_WAIT", 0.5)
    member = await a_round(rig, *two)
    rig.checker.helpers.asked(two[1].peer)  # busy throughout
    asyncio.get_running_loop().call_later(0.2, member.ledger._sealed.pop, 0)
    record = await rig.checker.check(rig.peer, 0)
    assert (record.verdict, record.reason) == ("passed", ""), record
    assert record.compute > 0


async def test_a_round_waits_for_a_busy_trainer_to_be_free_rather_than_take_the_backbone(
    rig: Rig, two: tuple[Helper, Helper], monkeypatch: pytest.MonkeyPatch
) -> None:
    never_audited(monkeypatch)
    await a_round(rig, *two)
    rig.checker.helpers.asked(two[1].peer)  # its replay of another round ends in half a second
    asyncio.get_running_loop().call_later(
        0.5, rig.checker.helpers.answered, two[1].peer, 0.0, False
    )
    record = await rig.checker.check(rig.peer, 0)
    assert (record.verdict, record.compute) == ("passed", 0.0), record
    assert [h.replayer.replayed for h in two] == [1, 1]


def test_until_two_trainers_are_trusted_the_backbone_replays_one_round_at_a_time(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a landing lets the draw hand out beyond the backbone's budgets: nothing while no
    trainer replays (its budgets decide); one round at a time while fewer than two are trusted
    (a swarm's first newcomers, replayed by the backbone); then what the free trainers can
    replay, two to a round."""
    rig.began()
    asked: list[int | None] = []

    def draw(members: list[str], helpers: int | None = None) -> list[str]:
        asked.append(helpers)
        return []

    monkeypatch.setattr(rig.checker.verdicts, "draw", draw)
    members = [f"trainer-{i}" for i in range(3)]
    weights = dict.fromkeys(members, 32.0)
    rig.checker.landed(0, weights)
    rig.standings.passed(members[0], 0)
    rig.checker.landed(0, weights)
    rig.checker.verdicts._checking["someone"] = 1  # the backbone's replay of one under way
    rig.checker.landed(0, weights)
    del rig.checker.verdicts._checking["someone"]
    rig.standings.passed(members[1], 0)
    rig.checker.landed(0, weights)
    rig.standings.passed(members[2], 0)
    rig.checker.helpers.asked(members[2])
    rig.checker.landed(0, weights)
    assert asked == [None, 1, 0, 1, 1]


async def test_a_sketch_of_another_size_is_no_replay(
    rig: Rig, helper: Helper, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replayer answers one number short: not judged (no verdict rests on a sketch of other
    values), the backbone replays the round itself and rests that trainer."""
    never_audited(monkeypatch)
    lying(helper, lambda _, honest: ReplayedSketch(honest.sketch[:-4]), monkeypatch)
    await a_round(rig, helper)
    record = await rig.checker.check(rig.peer, 0)
    assert (record.verdict, record.reason) == ("passed", ""), record
    assert record.compute > 0
    assert not record.replayer
    assert rig.checker.helpers.idle(rig.peer) == []
    assert not rig.standings.of(helper.peer).caught


async def test_a_round_the_trainer_cannot_replay_is_replayed_by_the_backbone(
    rig: Rig, helper: Helper, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trainer keeps no anchor of the round's epoch: it says so, the backbone replays the
    round itself, and does not ask that trainer again for a while."""
    never_audited(monkeypatch)
    helper.replayer.anchors.forget(0)
    await a_round(rig, helper)
    record = await rig.checker.check(rig.peer, 0)
    assert (record.verdict, record.reason) == ("passed", ""), record
    assert record.compute > 0
    assert (helper.replayer.replayed, rig.checker.helpers.helped) == (0, 0)
    assert rig.checker.helpers.idle(rig.peer) == []
    assert not rig.standings.of(helper.peer).caught


async def test_only_a_trainer_asked_to_replay_a_round_is_relayed_its_batches(
    rig: Rig, two: tuple[Helper, Helper], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A member's batches go to the trainers asked to replay its round while they replay it,
    and to nobody else: not another trainer, not after the replays answered."""
    never_audited(monkeypatch)
    await a_round(rig, *two)
    asked: list[ReplayRequest] = []
    honest = two[0].replayer._replay

    async def replay(request: ReplayRequest, backbone: PeerID) -> ReplayedSketch:
        asked.append(request)
        stranger = RelayRequest(request.member, request.receipt.epoch, 0)
        with pytest.raises(PermissionDeniedError):  # the member asks for its own round's
            await rig.member_host.call(rig.backbone.peer_id, ROUND_RELAY, stranger)
        with pytest.raises(InvalidRequestError):
            await two[0].host.call(backbone, ROUND_RELAY, RelayRequest(request.member, 0, STEPS))
        return await honest(request, backbone)

    monkeypatch.setattr(two[0].replayer, "_replay", replay)
    rig.member_host.add_addresses(rig.backbone.peer_id, rig.backbone.listen_addresses)
    record = await rig.checker.check(rig.peer, 0)
    assert (record.verdict, record.compute) == ("passed", 0.0), record
    assert len(asked) == 1
    with pytest.raises(PermissionDeniedError):  # the replays answered: nothing relayed now
        await two[0].host.call(rig.backbone.peer_id, ROUND_RELAY, RelayRequest(rig.peer, 0, 0))


async def test_only_the_backbone_may_ask_for_a_replay(rig: Rig, helper: Helper) -> None:
    await a_round(rig, helper)
    rig.member_host.add_addresses(helper.host.peer_id, helper.host.listen_addresses)
    receipt = await rig.backbone.call(rig.member_host.peer_id, ROUND_RECEIPT, RoundRequest(0))
    with pytest.raises(PermissionDeniedError):
        await rig.member_host.call(
            helper.host.peer_id, ROUND_REPLAY, ReplayRequest(rig.peer, receipt, [0], 1)
        )
    assert helper.replayer.replayed == 0


def test_the_backbone_draws_beyond_its_budget_only_as_many_as_trainers_can_replay() -> None:
    from core.training.credit.checks.standing import Standings
    from core.training.credit.checks.verdict import Verdicts

    verdicts = Verdicts("round", Standings(0.1), None, budget=0.0, newcomer_budget=0.0,  # type: ignore[arg-type]
                        rng=random.Random(0))  # fmt: skip
    verdicts._checking["someone"] = 1  # a check under way: nothing else is affordable
    members = [f"peer-{i}" for i in range(5)]
    assert verdicts.draw(members) == []
    assert verdicts.draw(members, helpers=0) == []  # others check, but none can now
    assert verdicts.draw(members, helpers=2) == members[:2]


async def test_with_trainers_replaying_a_newcomer_waits_for_one_free_not_the_backbone() -> None:
    """Trainers replay rounds, but none is free: a newcomer's first check waits for a later
    landing rather than taking the backbone's time (which goes to disagreements and audits),
    its credit held meanwhile; newcomers first when some are free."""
    from core.training.credit.checks.standing import Standings
    from core.training.credit.checks.verdict import Tally, Verdicts

    verdicts = Verdicts("round", Standings(0.999999), None, budget=0.0,  # type: ignore[arg-type]
                        rng=random.Random(0))  # fmt: skip

    async def costs(tally: Tally) -> None:
        tally.compute = 0.01

    await verdicts.run("trusted", 0, costs)  # trusted now, and what a check costs is known
    assert verdicts.draw(["trusted", "newcomer"]) == ["newcomer"]  # the newcomers' share allows
    assert verdicts.draw(["trusted", "newcomer"], helpers=0) == []
    assert verdicts.draw(["trusted", "newcomer"], helpers=1) == ["newcomer"]
    assert verdicts.draw(["trusted", "newcomer"], helpers=2) == ["newcomer", "trusted"]


async def test_a_trainer_that_replays_nothing_is_not_asked_again_and_the_backbone_checks_alone(
    rig: Rig, helper: Helper, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trusted trainer of an older version answers "no such method": the backbone replays the
    round itself and counts that trainer out of its replayers for good, so its draws go back to
    its own budgets (``Verdicts.draw`` without helpers)."""
    never_audited(monkeypatch)
    helper.host.router.remove(ROUND_REPLAY.name)
    await a_round(rig, helper)
    assert rig.checker.helpers.known() == [helper.peer]
    record = await rig.checker.check(rig.peer, 0)
    assert (record.verdict, record.reason) == ("passed", ""), record
    assert record.compute > 0
    assert rig.checker.helpers.known() == [rig.peer]  # the member, trusted now; not the other
    assert not rig.standings.of(helper.peer).caught


async def test_an_audit_waits_for_the_backbones_budget(
    rig: Rig, helper: Helper, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An audit is the backbone's own replay: drawn, it is made only while its budget allows
    (a share of the backbone's time, from empty), so audits cannot grow with the swarm's
    replays."""
    monkeypatch.setattr(checker_module, "AUDITED", 1.0)
    monkeypatch.setattr(rig.checker.audits, "allows", lambda *_: False)  # spent
    await a_round(rig, helper)
    record = await rig.checker.check(rig.peer, 0)
    assert (record.verdict, record.compute, record.replayer) == ("passed", 0.0, helper.peer)


@pytest.mark.parametrize("named", [True, False])
async def test_in_a_moderated_project_only_the_named_backbone_may_ask(
    make_dpeer: MakeDPeer, named: bool
) -> None:
    """Anyone can publish a record that says "backbone": where the manifest names the keys that
    confirm the epoch, a trainer's replayer answers only a backbone holding one of them."""
    backbone = await make_dpeer(role="backbone")
    key = str(backbone.averager.host.peer_id) if named else "12D3KooWsomebodyelse"
    trainer = await make_dpeer(keep_rounds=True, replays=True, confirmers=[key])
    await settle([backbone, trainer])
    assert trainer.optimizer._is_backbone(backbone.averager.host.peer_id) is named
    assert not trainer.optimizer._is_backbone(trainer.averager.host.peer_id)
