"""Free riders in diloco, on the wire: real trainers with overlap and round receipts, one of them
made to misbehave through ``Misbehaviour.install`` as the demo and the benchmark do, beside an
honest one and a backbone that replays every round. Each cheat that skips work (half its steps,
all of them while sending the model's last move as its own, all of them while refusing the
checks) is caught at the first round it fakes, named in signed evidence, and credited nothing
from then on; a member honest in its first round and riding from the second is caught in the
second, whose round the two honest trainers (trusted by then: as many as the backbone hands a
round to) replay for the backbone first. The honest members pass every replay, are credited
what they claimed, and are accused by nobody."""

from __future__ import annotations

import time

import pytest

from core.swarm.byzantine import Attack, Copier, Misbehaviour, RoundRefuser, StepRider
from core.util.errors import ConfigError
from tests.support.leaks import wait_until
from tests.training.diloco.conftest import DPeer, MakeDPeer, end_rounds, make_dpeer, settle
from tests.training.diloco.test_round_checks import replaying_backbone

__all__ = ["make_dpeer"]  # the fixture, used by name

STEPS = 6
SAMPLES = 4 * STEPS
"""What a round of ``STEPS`` inner steps of ``DPeer.train`` claims."""
HONEST = (Attack.SCALE, 1.0)
"""Its pseudo-gradient as computed: only its work (and what it sends) lies."""


def rode(peer: DPeer) -> bool:
    """Whether the misbehaviour installed in ``peer`` really skipped or copied work."""
    rides, tamper = peer.optimizer.rides, peer.optimizer.tamper
    if isinstance(rides, RoundRefuser):
        rides = rides.inner
    dropped = isinstance(rides, StepRider) and rides.dropped > 0
    return dropped or (isinstance(tamper, Copier) and tamper.copied > 0)


@pytest.mark.parametrize(
    ("misbehaviour", "reason", "statistic"),
    [
        # half its steps, all counted and filed with their batches
        (Misbehaviour(*HONEST, computes=0.5), "from its replay", "round_replay"),
        # nothing computed; from the round after its first, the model's last move sent instead
        (
            Misbehaviour(*HONEST, computes=0.0, rides_from=1, copies=True),
            "from its replay",
            "round_replay",
        ),
        # honest in its first round, so trusted; nothing from the second on
        (Misbehaviour(*HONEST, computes=0.0, rides_from=1), "from its replay", "round_replay"),
        # nothing computed, and its receipts taken back: the checks hear "no such method"
        (Misbehaviour(*HONEST, computes=0.0, refuses=True), "refused the check", "work_refused"),
    ],
    ids=["half_the_steps", "copier", "turncoat", "refuser"],
)
async def test_a_diloco_free_rider_is_caught_at_its_first_faked_round(
    make_dpeer: MakeDPeer, misbehaviour: Misbehaviour, reason: str, statistic: str
) -> None:
    backbone_peer = await make_dpeer(role="backbone", start=False, overlap=True)
    honest = await make_dpeer(keep_rounds=True, overlap=True, replays=True)
    other = await make_dpeer(keep_rounds=True, overlap=True, replays=True)
    cheat = await make_dpeer(keep_rounds=True, overlap=True, start=False)
    misbehaviour.install(cheat.optimizer, cheat.averager)
    await cheat.optimizer.start()
    faked = misbehaviour.rides_from
    me, them = str(honest.averager.host.peer_id), str(cheat.averager.host.peer_id)
    us = [me, str(other.averager.host.peer_id)]
    peers = [backbone_peer, honest, other, cheat]

    async with replaying_backbone(backbone_peer) as (_, checker):
        for epoch in range(faked + 1):
            await settle(peers)
            await honest.train(STEPS, seed=10 * epoch + 1)
            await other.train(STEPS, seed=10 * epoch + 3)
            await cheat.train(STEPS, seed=10 * epoch + 2)
            await end_rounds(peers)
            assert honest.optimizer.epoch == cheat.optimizer.epoch == epoch + 1
            await wait_until(lambda n=3 * (epoch + 1): len(checker.records) == n, timeout=90)
        assert rode(cheat), "the attack never ran"
        if faked:  # trusted by then, the honest trainers replayed the cheat's round first
            for replayer in (honest.optimizer.replayer, other.optimizer.replayer):
                assert replayer is not None
                assert replayer.replayed >= 1, checker.records
            assert checker.helpers.helped >= 2

        verdicts = {(r.peer, r.epoch): (r.verdict, r.reason) for r in checker.records}
        for epoch in range(faked + 1):
            for peer in us:
                assert verdicts[(peer, epoch)] == ("passed", ""), verdicts
        for epoch in range(faked):
            assert verdicts[(them, epoch)] == ("passed", ""), verdicts  # trusted first
        verdict, why = verdicts[(them, faked)]
        assert verdict == "caught", verdicts
        assert reason in why

        standings = checker.standings
        for peer in us:
            assert standings.supported(peer, faked, SAMPLES, now=time.time()) == SAMPLES
        assert standings.of(them).caught
        assert standings.supported(them, faked, SAMPLES, now=time.time()) == 0
        assert standings.supported(them, faked + 1, SAMPLES, now=time.time()) == 0
        if faked:  # its honest round passed: only what trust paid after it is taken back
            assert standings.of(them).vouched == faked - 1

        def accused() -> set[tuple[str, str]]:
            return {(str(r.evidence.accused), r.evidence.statistic) for r in reported}

        reported = await backbone_peer.optimizer.evidence.fetch()
        assert (them, statistic) in accused()
        assert not any(peer in us for peer, _ in accused())


def test_hiding_and_copying_are_tried_where_they_apply() -> None:
    """A diloco trainer has no epochs of microbatch receipts to hide from, and a lying reducer
    sends honest data: both are refused at once, not accepted and ignored."""

    class Dedloc:  # what dedloc's optimizer offers a misbehaviour: no rides, no anchor
        tamper = None
        claim = 1.0
        forge = None

    class Averager:
        host = None
        round_hook = None

    with pytest.raises(ConfigError, match="diloco only"):
        Misbehaviour(*HONEST, copies=True).install(Dedloc(), Averager())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="copies nothing"):
        Misbehaviour(Attack.LYING_REDUCER, copies=True)


def test_a_step_rider_drops_the_share_it_does_not_compute_from_its_epoch() -> None:
    rider = StepRider(0.25, from_epoch=2)
    assert [rider(epoch) for epoch in (0, 1)] == [False, False]  # honest before its epoch
    assert [rider(2) for _ in range(8)] == [True, True, True, False] * 2
    assert rider.dropped == 6
    nothing = StepRider(0.0)
    assert all(nothing(0) for _ in range(5))


def test_a_copier_sends_the_models_last_move_over_the_outer_learning_rate() -> None:
    """What every member received: the anchor's step since the copier's last round, over the
    outer learning rate (zeros where it did not move); its gradient attack before its epoch."""
    import numpy as np
    import torch

    class Outer:
        lr = np.float32(0.5)

    class State:
        def __init__(self) -> None:
            self.anchor = [np.zeros(3, np.float32), np.zeros((2, 2), np.float32)]
            self.outer = Outer()

    class Optimizer:
        def __init__(self) -> None:
            self.rides = None
            self.diloco = State()
            self.epoch = 0

    optimizer = Optimizer()
    doubles = Misbehaviour(Attack.SCALE, 2.0).gradient_attack()
    copier = Copier(optimizer, doubles, from_epoch=1)  # type: ignore[arg-type]
    anchor = optimizer.diloco.anchor

    def sent() -> list[torch.Tensor]:
        delta = [torch.ones(3), torch.ones(2, 2)]
        copier(delta)
        return delta

    assert all(torch.equal(d, torch.full_like(d, 2.0)) for d in sent())  # honest, x2, at epoch 0
    optimizer.epoch = 1
    anchor[0] -= 0.25  # the model moved by one landing
    anchor[1] += 1.0
    first, second = sent()
    assert torch.allclose(first, torch.full((3,), 0.5))  # (before - after) / lr
    assert torch.allclose(second, torch.full((2, 2), -2.0))
    assert [torch.count_nonzero(d).item() for d in sent()] == [0, 0]  # it did not move since
    assert copier.copied == 2
