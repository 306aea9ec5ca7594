"""Diloco credit follows what a member's updates show: four trainers and a backbone land rounds on
loopback, one trainer lies about its work, and the backbone's work scores catch it (credit
nothing, accused, the checks logged), while the honest trainers keep their whole claims."""

from __future__ import annotations

from typing import Any

import pytest

from core.averaging.robust.aggregation import AggregationConfig, Method
from core.swarm.byzantine import Attack, Misbehaviour
from core.training.credit.checks.verdict import CheckRecord
from core.training.credit.scores import WINDOW, WorkScores
from core.training.diloco.backbone import DilocoBackbone
from core.training.diloco.mode import MODE
from core.training.links import PeerLinks
from tests.training.diloco.conftest import MakeDPeer, end_rounds, make_dpeer, settle

__all__ = ["make_dpeer"]  # the fixture, used by name

STEPS = 6
BATCH = 4  # ``DPeer.train``'s microbatch
ROUNDS = WINDOW + 3
LAST_ROUND = 10
"""The issue's bound: a liar accused within 10 rounds. A member is accused once ``WINDOW`` of its
rounds were scored, and a round whose members' updates agree too little proves nothing: on a
loaded machine a round that found no group, or two under the gate, leave fewer scored rounds in
``ROUNDS``, so the liar's test goes on to this many before it judges."""
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
    name = str(liar.averager.host.peer_id)
    for number in range(LAST_ROUND):
        for seed, peer in enumerate(trainers):
            await peer.train(STEPS, seed=100 * number + seed)
        await end_rounds(peers)
        if number + 1 >= ROUNDS and backbone.scores.of(name).accused:
            break
    await backbone.close()  # its scores came with each round (``on_landed``)

    scores = backbone.scores
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


@pytest.mark.parametrize(
    ("liars", "weight", "records", "copies"),
    [
        # honest work sent at a quarter of its weight (a score four times the others' per
        # sample), records claiming a thousand times the samples
        (1, 0.25, 1000.0, False),
        # as many identities as honest members copy an honest member's update at a thousandth
        # of its weight and record the whole samples: before votes and the records' bound they
        # pulled the reference, and every honest member was credited nothing and accused
        (3, 1e-3, 1.0, True),
    ],
)
async def test_records_above_the_rounds_weight_are_cut_to_it_and_accused(  # noqa: PLR0917
    make_dpeer: MakeDPeer,
    monkeypatch: pytest.MonkeyPatch,
    liars: int,
    weight: float,
    records: float,
    copies: bool,
) -> None:
    """Credited at most the weight its rounds saw, accused for the records, the honest whole."""
    aux = await make_dpeer(role="backbone", lr=0.5, momentum=0.0, aggregation=DEFENDED)
    trainers = [
        await make_dpeer(lr=0.5, momentum=0.0, aggregation=DEFENDED) for _ in range(3 + liars)
    ]
    peers = [aux, *trainers]
    await settle(peers)
    honest, crowd = trainers[:3], trainers[3:]
    lying = [liar.optimizer.links for liar in crowd]
    send = PeerLinks.round

    async def light(links: PeerLinks, *args: Any, **kwargs: Any) -> Any:
        if any(links is mine for mine in lying):
            kwargs["weight"] *= weight  # the round sees this share of its samples
        return await send(links, *args, **kwargs)

    monkeypatch.setattr(PeerLinks, "round", light)
    landed_samples: dict[int, int] = {}  # liar -> the samples its landed rounds carried
    for liar in crowd:
        landed = liar.optimizer.landed

        def inflated(
            epoch: int,
            samples: int,
            began: str | None = None,
            *,
            add=landed.add,
            key: int = id(liar),
        ) -> None:
            landed_samples[key] = landed_samples.get(key, 0) + samples
            add(epoch, round(samples * records), began)  # its records claim this many times them

        monkeypatch.setattr(landed, "add", inflated)
    backbone = DilocoBackbone(aux.optimizer, checkpoints=None, checkpoint_every=0)
    signed: list[tuple[str, str]] = []
    monkeypatch.setattr(
        backbone,
        "_sign",
        lambda peer, epoch, statistic, value, reason: signed.append((peer, statistic)),
    )
    for number in range(ROUNDS):
        for seed, peer in enumerate(trainers):
            copied = copies and peer in crowd
            await peer.train(STEPS, seed=100 * number + (0 if copied else seed))
        await end_rounds(peers)
    await backbone.close()

    scores = backbone.scores
    for liar in crowd:
        name = str(liar.averager.host.peer_id)
        items = liar.optimizer.landed.items()
        credited = sum(credit(scores, name, i.epoch, i.samples) for i in items)
        # what its landed rounds carried (a round that found no group goes out with the next)
        computed = landed_samples[id(liar)]
        assert computed == STEPS * BATCH * ROUNDS or len(items) < ROUNDS
        assert sum(i.samples for i in items) == pytest.approx(records * computed, rel=0.01)
        assert credited <= weight * computed + len(items)  # the weight its rounds saw
    for peer in honest:
        mine = str(peer.averager.host.peer_id)
        for epoch, samples in ((i.epoch, i.samples) for i in peer.optimizer.landed.items()):
            assert credit(scores, mine, epoch, samples) == samples
        assert not scores.of(mine).accused
    backbone.accuse_records()
    accused = sorted(str(p.averager.host.peer_id) for p in crowd)
    assert sorted(signed) == [(name, "record_overclaim") for name in accused]
    backbone.accuse_records()
    assert len(signed) == liars  # once each, and nobody honest
