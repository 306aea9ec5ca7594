"""Dedloc where the backbone's key confirms the epochs: records from fresh identities announcing
later epochs make no trainer wait for them or download anything, and a newcomer loads the
confirmed epoch from the backbone's own offer (dedloc donors differ in their bytes, so the
confirmation names the epoch, and the confirming key's donor vouches for its state)."""

from __future__ import annotations

import asyncio
import time

from core.training.dedloc.backbone import DedlocBackboneConfig
from core.training.dedloc.optimizer import DedlocConfig
from core.training.progress import PeerProgress, ProgressBoard
from core.training.trainer import Trainer
from core.trust.identity import Identity
from tests.conftest import MakeHost
from tests.support.leaks import wait_until
from tests.training.conftest import MakePeer, close_aux, start_aux, start_node
from tests.training.dedloc.test_collaborative import (
    Recorder,
    dataset,
    fresh_model,
    make_optimizer,
    mse,
)

EPOCHS = 4


async def test_records_ahead_move_no_dedloc_trainer_and_newcomers_load_the_confirmed_epoch(
    make_peer: MakePeer, make_host: MakeHost
) -> None:
    data = dataset()
    key = Identity.generate()
    keys = {str(key.peer_id)}
    config = DedlocConfig(target_batch_size=128, average_state_every=0)
    peers = []
    for _ in range(2):
        model = fresh_model()
        peers.append(await make_peer(model, make_optimizer(model), config, confirmers=keys))
    aux_model = fresh_model()
    aux = await start_aux(
        peers[0],
        make_host,
        model=aux_model,
        optimizer=make_optimizer(aux_model),
        config=DedlocBackboneConfig(target_batch_size=128, checkpoint_every=0),
        identity=key,
        confirmers=keys,
    )
    stop = asyncio.Event()
    aux_task = asyncio.create_task(aux.peer.run(stop))
    _, sybil = await start_node(make_host, peers[0].address)
    board = ProgressBoard(sybil, "collab")

    async def announce() -> None:
        while True:
            record = PeerProgress(str(sybil.peer_id), 50, 10_000, 1e4, time.time())
            await board.publish(record)
            await asyncio.sleep(1.0)

    lying = asyncio.create_task(announce())
    loaded: list[int] = []
    try:
        await wait_until(lambda: peers[0].optimizer.view().confirmed.by == "backbone")
        for peer in peers:
            real = peer.optimizer.catch_up

            async def spy(real=real) -> str | None:  # type: ignore[no-untyped-def]
                loaded.append(1)
                return await real()  # type: ignore[no-any-return]

            peer.optimizer.catch_up = spy  # type: ignore[method-assign]

        async def train(i: int) -> None:
            walk = Recorder(data, 10 + i, peers[i])
            trainer = Trainer(peers[i].model, peers[i].optimizer, peers[i].bridge, walk, mse)
            await trainer.run(until_epoch=EPOCHS)

        await asyncio.wait_for(asyncio.gather(train(0), train(1)), timeout=120)
        assert [p.optimizer.epoch for p in peers] == [EPOCHS] * 2
        assert loaded == []  # epoch 50, announced all along, moved nobody
        assert peers[0].optimizer.view().epoch == EPOCHS
        await wait_until(lambda: peers[0].optimizer.view().confirmed.epoch == EPOCHS)

        model = fresh_model()
        newcomer = await make_peer(model, make_optimizer(model), config, confirmers=keys)
        assert newcomer.optimizer.epoch == EPOCHS
        for mine, theirs in zip(model.parameters(), aux_model.parameters(), strict=True):
            assert bool((mine == theirs).all())
    finally:
        lying.cancel()
        await asyncio.gather(lying, return_exceptions=True)
        await sybil.close()
        stop.set()
        await aux_task
        await close_aux(aux)
