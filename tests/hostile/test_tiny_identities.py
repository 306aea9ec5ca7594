"""As many identities as honest members, each claiming a thousandth of the samples it computed, set
none of the medians a round takes over its senders (``core.averaging.robust.medians``): sending
small noise (a counted median of norms at the noise's scale screened every honest member out and
accused it) or copies of an honest update (a counted medoid and spread sat on the copies). One
diloco round of three honest trainers and three such identities, at the diloco defaults."""

from __future__ import annotations

import numpy as np
import pytest

from core.averaging import AveragingResult
from core.averaging.robust.aggregation import AggregationConfig, Method
from core.swarm.byzantine import Attack, Misbehaviour
from core.training.diloco.mode import MODE
from tests.training.diloco.conftest import (
    DPeer,
    MakeDPeer,
    end_rounds,
    make_dpeer,
    settle,
    watch,
)

__all__ = ["make_dpeer"]  # the fixture, used by name

DEFENDED = MODE.aggregation(AggregationConfig(method=Method.CENTERED_CLIP, weight_ratio_limit=4.0))
STEPS = 3
TINY = 1e-3
PATIENCE = 30.0
"""Seconds a round's matchmaking waits for its planned members: the planned group closes as soon
as all joined, so this only guards against a loaded machine's late member."""


async def one_round(
    make_dpeer: MakeDPeer, kind: str, claim: float, swarm: str, identities: int = 3
) -> tuple[float, list[AveragingResult], list[DPeer], list[DPeer]]:
    """Three honest trainers and ``identities`` identities claiming ``claim`` of their samples;
    how far the landed anchor is from the honest members' mean update (relative to it), and what
    the honest members' rounds said."""
    made = [
        await make_dpeer(
            lr=1.0, momentum=0.0, aggregation=DEFENDED, swarm=swarm, matchmaking=PATIENCE
        )
        for _ in range(3 + identities)
    ]
    honest, crowd = made[:3], made[3:]
    peers = [*honest, *crowd]
    await settle(peers)
    for identity in crowd:
        identity.optimizer.claim = claim
        if kind == "noise":
            identity.optimizer.tamper = Misbehaviour(Attack.NOISE, 0.01).gradient_attack()
    seen = [watch(peer) for peer in honest]
    start = np.frombuffer(honest[0].anchor(), dtype=np.float32)
    for number, peer in enumerate(peers):
        # copies: every identity trains on honest trainer 0's batches, and sends its update
        await peer.train(STEPS, seed=0 if kind == "copies" and peer in crowd else number)
    thetas = [np.frombuffer(p.parameters(), dtype=np.float32) for p in honest]
    await end_rounds(peers)
    honest_mean = sum(start - t for t in thetas) / len(thetas)
    moved = start - np.frombuffer(honest[0].anchor(), dtype=np.float32)
    gap = float(np.linalg.norm(moved - honest_mean) / np.linalg.norm(honest_mean))
    return gap, [r for results in seen for r in results], honest, crowd


@pytest.mark.parametrize("kind", ["noise", "copies"])
async def test_tiny_identities_screen_out_no_honest_member(
    make_dpeer: MakeDPeer, kind: str
) -> None:
    # the same three honest trainers alone: CenteredClip's own distance from their mean
    alone, _, _, _ = await one_round(make_dpeer, kind, TINY, swarm=f"alone-{kind}", identities=0)
    gap, results, honest, _ = await one_round(make_dpeer, kind, TINY, swarm=f"tiny-{kind}")
    names = {p.averager.host.peer_id for p in honest}
    assert results, "no round landed"
    for result in results:
        assert not set(result.excluded) & names, result.summary()
        assert not {f.peer for f in result.findings} & names, result.findings
        assert result.left_out == [], result.summary()
    # the honest members' update landed as it does without the identities
    assert gap <= alone * 1.05 + 0.01, (gap, alone)


async def test_the_same_noise_claiming_honest_work_is_the_attack(make_dpeer: MakeDPeer) -> None:
    """The attack is real: the same identities claiming what an honest member does hold whole
    votes, and their noise sets the reference norm, so every honest chunk is screened out. A
    round's numbers cannot tell them from honest members; the backbone's work scores catch them
    over rounds (``tests/hostile/test_scored_credit.py``)."""
    gap, results, honest, _ = await one_round(make_dpeer, "noise", 1.0, swarm="typical")
    names = {p.averager.host.peer_id for p in honest}
    assert any(set(result.excluded) & names for result in results)
    assert gap > 0.5
