"""A donor that serves a tampered outer state to newcomers: no newcomer loads it, and the donor is
accused. Three diloco members land a round; one of them then serves its own bytes under the
anchor digest the others' states name (a consistent header: only the bytes differ from theirs).
A newcomer takes the state two networks (here: two peers of this computer) vouch for, and signs
evidence against the forger."""

from __future__ import annotations

import asyncio

from core.swarm.byzantine import forge_state
from core.training.moderation.evidence import EvidenceBoard
from core.training.participation import STATE_MISMATCH
from tests.training.diloco.conftest import MakeDPeer, end_rounds, make_dpeer, settle

__all__ = ["make_dpeer"]  # the fixture, used by name


async def test_a_newcomer_loads_the_vouched_state_and_accuses_the_forger(
    make_dpeer: MakeDPeer,
) -> None:
    peers = [await make_dpeer(lr=1.0, momentum=0.0) for _ in range(3)]
    await settle(peers)
    for seed, peer in enumerate(peers):
        await peer.train(2, seed=seed)
    await end_rounds(peers)
    assert [p.optimizer.epoch for p in peers] == [1, 1, 1]
    forger, *honest = peers
    forge_state(forger.optimizer.links.sharing)
    newcomer = await make_dpeer(lr=1.0, momentum=0.0)
    await settle([*peers, newcomer])
    if newcomer.optimizer.epoch < 1:
        await newcomer.optimizer.mending.catch_up()
    assert newcomer.optimizer.epoch == 1
    assert newcomer.anchor() == honest[0].anchor()
    # the newcomer signed evidence against the forger, and nobody else
    board = EvidenceBoard.of(honest[0].averager)
    accused: set[object] = set()
    for _ in range(50):
        found = await board.fetch()
        accused = {item.evidence.accused for item in found}
        if accused:
            break
        await asyncio.sleep(0.1)
    assert accused == {forger.averager.host.peer_id}
    assert {item.evidence.statistic for item in found} == {STATE_MISMATCH}
