"""A diloco member that misbehaves is left out, not obeyed: its pseudo-gradient (sign-flipped x10,
or NaN) is screened out by the reducers, the others land the honest members' mean without it,
and the evidence they sign names it (a screen's finding once it repeats)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from core.averaging.robust.aggregation import AggregationConfig, Method
from core.swarm.byzantine import Attack, Misbehaviour
from core.training.moderation.evidence import EvidenceBoard
from tests.training.diloco.conftest import MakeDPeer, end_rounds, settle

DEFENDED = AggregationConfig(method=Method.CENTERED_CLIP)


@pytest.mark.parametrize("attack", [Attack.SIGN_FLIP, Attack.NAN, Attack.SCALE])
async def test_an_attacker_is_left_out_and_named(make_dpeer: MakeDPeer, attack: Attack) -> None:
    peers = [await make_dpeer(lr=1.0, momentum=0.0, aggregation=DEFENDED) for _ in range(4)]
    await settle(peers)
    *honest, attacker = peers
    tamper = Misbehaviour(attack).gradient_attack()
    attacker.optimizer.tamper = tamper
    start = np.frombuffer(peers[0].anchor(), dtype=np.float32)
    for seed, peer in enumerate(peers):
        await peer.train(3, seed=seed)
    thetas = [np.frombuffer(p.parameters(), dtype=np.float32) for p in honest]
    await end_rounds(peers)
    assert tamper.rounds == 1  # it really attacked
    # the round lands for everyone, the attacker too, on the honest members' mean
    assert [p.optimizer.epoch for p in peers] == [1, 1, 1, 1]
    assert len({p.anchor() for p in peers}) == 1
    after = np.frombuffer(peers[0].anchor(), dtype=np.float32)
    assert np.all(np.isfinite(after))
    honest_mean = sum(start - t for t in thetas) / len(thetas)
    moved = start - after
    # outer lr 1, no momentum: the anchor moved by the mean of what was kept, which is the
    # honest members' (CenteredClip may pull it a little; the attack is -10 or 1000 times theirs)
    assert np.linalg.norm(moved - honest_mean) <= 0.25 * np.linalg.norm(honest_mean)
    # what of its attack did not land, it does not send again, nor claim its samples again
    assert not any(np.any(r) for r in attacker.optimizer.diloco.residual or [])
    assert attacker.optimizer.waiting_samples == 0
    # the reducers signed what they found: NaN at once (a fact), a screen's finding once the
    # attacker was found in three epochs (one round's outlier may be an honest one)
    board = EvidenceBoard.of(honest[0].averager)
    attacker_id = attacker.averager.host.peer_id

    async def accused() -> set[object]:
        found: set[object] = set()
        for _ in range(50):
            found = {item.evidence.accused for item in await board.fetch()}
            if found:
                break
            await asyncio.sleep(0.1)
        return found

    if attack is not Attack.NAN:
        await asyncio.sleep(0.5)  # what one round found would be published by now
        assert await board.fetch() == []
        # a busy machine may split a round's group or miss it (fewer epochs found): go on
        # attacking until a reporter has found the attacker in three epochs, for a while
        for round_ in range(2, 10):
            for seed, peer in enumerate(peers):
                await peer.train(3, seed=10 * round_ + seed)
            await end_rounds(peers)
            if round_ >= 3 and await accused():
                break
        assert tamper.rounds >= 3
    assert await accused() == {attacker_id}
