"""Diloco credit follows what a member's updates show: four trainers and a backbone land rounds on
loopback, one trainer lies about its work, and the backbone's work scores catch it (credit
nothing, accused, the checks logged), while the honest trainers keep their whole claims."""

from __future__ import annotations

import pytest

from core.averaging.robust.aggregation import AggregationConfig, Method
from core.swarm.byzantine import Attack, Misbehaviour
from core.training.credit.checks.checker import CheckRecord
from core.training.credit.scores import WINDOW, WorkScores
from core.training.diloco.backbone import DilocoBackbone
from core.training.diloco.mode import MODE
from tests.training.diloco.conftest import MakeDPeer, end_rounds, make_dpeer, settle

__all__ = ["make_dpeer"]  # the fixture, used by name

STEPS = 6
BATCH = 4  # ``DPeer.train``'s microbatch
ROUNDS = WINDOW + 3
DEFENDED = MODE.aggregation(AggregationConfig(method=Method.CENTERED_CLIP, weight_ratio_limit=4.0))
"""What a diloco manifest averages with by default. The scores use the round's weights: under
the plain mean a flipped update enters every honest member's reference, and no round proves
anything."""
LATER = 1e12
"""A time when no claim waits any more."""


def credit(scores: WorkScores, peer: str, epoch: int, samples: int) -> int:
    """What the scores credit of a claim asked now and once no claim waits."""
    scores.supported(peer, epoch, samples, now=0.0)
    found = scores.supported(peer, epoch, samples, now=LATER)
    assert found is not None
    return found


@pytest.mark.parametrize(
    ("strength", "claim"),
    [
        (1.0, 10.0),  # computes it all, claims ten times as much
        (0.0, 1.0),  # sends nothing of what it computed
        (-3.0, 1.0),  # a flipped update
    ],
)
async def test_a_liar_is_caught_by_what_its_updates_show(
    make_dpeer: MakeDPeer, strength: float, claim: float
) -> None:
    aux = await make_dpeer(role="backbone", lr=0.5, momentum=0.0, aggregation=DEFENDED)
    trainers = [await make_dpeer(lr=0.5, momentum=0.0, aggregation=DEFENDED) for _ in range(4)]
    peers = [aux, *trainers]
    await settle(peers)
    *honest, liar = trainers
    Misbehaviour(Attack.SCALE, strength, claim=claim).install(liar.optimizer, liar.averager)
    checks: list[CheckRecord] = []
    backbone = DilocoBackbone(
        aux.optimizer, checkpoints=None, checkpoint_every=0, on_check=checks.append
    )
    for number in range(ROUNDS):
        for seed, peer in enumerate(trainers):
            await peer.train(STEPS, seed=100 * number + seed)
        await end_rounds(peers)
    await backbone.close()  # its scores came with each round (``on_landed``)

    scores = backbone.scores
    name = str(liar.averager.host.peer_id)
    credited = claimed = 0
    for epoch, samples in ((i.epoch, i.samples) for i in liar.optimizer.landed.items()):
        claimed += samples
        credited += credit(scores, name, epoch, samples)
    computed = STEPS * BATCH * len(liar.optimizer.landed.items())
    assert claimed == pytest.approx(claim * computed)
    assert credited == 0  # caught faking work: what it computed buys nothing either
    for peer in honest:
        mine = str(peer.averager.host.peer_id)
        for epoch, samples in ((i.epoch, i.samples) for i in peer.optimizer.landed.items()):
            assert credit(scores, mine, epoch, samples) == samples
    assert scores.of(name).accused, (scores.of(name), scores.cosines)
    assert not any(scores.of(str(p.averager.host.peer_id)).accused for p in honest)
    assert {c.verdict for c in checks if c.peer == name} >= {"caught"}
    assert all(c.verdict == "passed" for c in checks if c.peer != name)


async def test_records_above_the_rounds_weight_are_cut_to_it_and_accused(
    make_dpeer: MakeDPeer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Honest work sent at a quarter of its weight (a score four times the others' per sample),
    records claiming a thousand times the samples: credited at most the weight its rounds saw."""
    aux = await make_dpeer(role="backbone", lr=0.5, momentum=0.0, aggregation=DEFENDED)
    trainers = [await make_dpeer(lr=0.5, momentum=0.0, aggregation=DEFENDED) for _ in range(4)]
    peers = [aux, *trainers]
    await settle(peers)
    *honest, liar = trainers
    liar.optimizer.claim = 0.25
    landed = liar.optimizer.landed
    record = landed.add
    monkeypatch.setattr(landed, "add", lambda epoch, samples: record(epoch, samples * 4000))
    backbone = DilocoBackbone(aux.optimizer, checkpoints=None, checkpoint_every=0)
    signed: list[tuple[str, str]] = []
    monkeypatch.setattr(
        backbone,
        "_sign",
        lambda peer, epoch, statistic, value, reason: signed.append((peer, statistic)),
    )
    for number in range(ROUNDS):
        for seed, peer in enumerate(trainers):
            await peer.train(STEPS, seed=100 * number + seed)
        await end_rounds(peers)
    await backbone.close()

    scores = backbone.scores
    name = str(liar.averager.host.peer_id)
    credited = 0
    items = liar.optimizer.landed.items()
    for epoch, samples in ((i.epoch, i.samples) for i in items):
        credited += credit(scores, name, epoch, samples)
    computed = STEPS * BATCH * len(items)
    assert sum(i.samples for i in items) == pytest.approx(1000 * computed)
    assert 0 < credited <= 0.25 * computed + len(items)  # the weight its rounds saw
    backbone.accuse_records()
    assert signed == [(name, "record_overclaim")]
    for peer in honest:
        mine = str(peer.averager.host.peer_id)
        for epoch, samples in ((i.epoch, i.samples) for i in peer.optimizer.landed.items()):
            assert credit(scores, mine, epoch, samples) == samples
    backbone.accuse_records()
    assert signed == [(name, "record_overclaim")]  # once, and nobody honest
