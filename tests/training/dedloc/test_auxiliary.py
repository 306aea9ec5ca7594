"""A backbone on real loopback connections: it reduces in the trainers' rounds, aggregates
their metrics and writes checkpoints any peer can start from."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from core.training.checkpoints import CheckpointStore
from core.training.credit.metrics import EpochMetrics
from core.training.credit.samples import SAMPLES_TOTAL
from core.training.dedloc.backbone import DedlocBackboneConfig
from core.training.dedloc.optimizer import DedlocConfig
from core.training.trainer import Trainer
from tests.conftest import MakeHost
from tests.support.leaks import poll_until, wait_until
from tests.training.conftest import AVERAGING, MakePeer, close_aux, start_aux
from tests.training.dedloc.test_collaborative import (
    Recorder,
    dataset,
    fresh_model,
    make_optimizer,
    mse,
)


async def test_backbone_reduces_aggregates_and_checkpoints(
    make_peer: MakePeer, make_host: MakeHost, tmp_path: Path
) -> None:
    data = dataset()
    config = DedlocConfig(target_batch_size=256, average_state_every=0)
    peers = []
    for _ in range(2):
        model = fresh_model()
        peers.append(await make_peer(model, make_optimizer(model), config))
    aux_model = fresh_model()
    store = CheckpointStore(tmp_path / "checkpoints", keep=2)
    aux = await start_aux(
        peers[0],
        make_host,
        model=aux_model,
        optimizer=make_optimizer(aux_model),
        config=DedlocBackboneConfig(target_batch_size=256, checkpoint_every=3),
        checkpoints=store,
    )
    stop = asyncio.Event()
    aux_task = asyncio.create_task(aux.peer.run(stop))
    losses: dict[int, list[float]] = {}

    def loss_recording(i: int):  # type: ignore[no-untyped-def]
        def compute(model: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
            loss = mse(model, batch)
            losses.setdefault(peers[i].optimizer.epoch, []).append(float(loss.detach()))
            return loss

        return compute

    try:
        # the backbone announces itself before the first round
        me = str(aux.averager.host.peer_id)
        await poll_until(
            peers[0].optimizer.board.fetch, lambda seen: any(r.peer == me for r in seen)
        )

        async def train(i: int) -> None:
            walk = Recorder(data, 10 + i, peers[i])
            trainer = Trainer(
                peers[i].model, peers[i].optimizer, peers[i].bridge, walk, loss_recording(i)
            )
            await trainer.run(until_epoch=6)

        await asyncio.wait_for(asyncio.gather(train(0), train(1)), timeout=120)
        await wait_until(lambda: len(aux.peer.metrics) >= 6)  # the last epoch's come a little later
    finally:
        stop.set()
        await aux_task
        await close_aux(aux)

    # the backbone reduced in the trainers' rounds
    assert aux.peer.rounds_joined >= 4
    assert sum(r.group_size == 3 for r in peers[0].optimizer.reports) >= 4
    # per-epoch loss = sum of losses / sum of mini-steps over both trainers
    metrics = {m.epoch: m for m in aux.peer.metrics}
    assert set(metrics) >= set(range(5))
    for epoch in range(5):
        expected = sum(losses[epoch]) / len(losses[epoch])
        assert metrics[epoch].loss is not None
        assert math.isclose(metrics[epoch].loss, expected, rel_tol=1e-6)
        # at least the target, and less than twice it, which each of the two trainers filling the
        # target on its own would make (the overshoot itself grows with the machine's load)
        assert 256 <= metrics[epoch].samples < 2 * 256
    assert metrics[0].alive_peers == 2
    # a checkpoint every 3 epochs (of the state current when it is taken; keep=2), the last one
    # loadable into a fresh model that equals the trainers'
    saved = store.list()
    epochs = [CheckpointStore.load(p).epoch for p in saved]
    assert len(epochs) == 2
    assert 3 <= epochs[0] < epochs[1] == 6
    fresh = fresh_model()
    fresh.load_state_dict(CheckpointStore.load(saved[-1]).model)
    for mine, theirs in zip(fresh.parameters(), peers[0].model.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs)


async def test_backbone_reduces_the_state_rounds_of_client_trainers(
    make_peer: MakePeer, make_host: MakeHost
) -> None:
    """Volunteers behind home routers average as clients: the backbone's backbone is then the
    only one that can reduce, for their state rounds as for their gradient rounds."""
    data = dataset()
    config = DedlocConfig(target_batch_size=128, average_state_every=2)
    clients = replace(AVERAGING, client_mode=True)
    peers = []
    for _ in range(2):
        model = fresh_model()
        peers.append(await make_peer(model, make_optimizer(model), config, averaging=clients))
    aux_model = fresh_model()
    aux = await start_aux(
        peers[0],
        make_host,
        model=aux_model,
        optimizer=make_optimizer(aux_model),
        config=DedlocBackboneConfig(target_batch_size=128, average_state_every=2),
    )
    stop = asyncio.Event()
    aux_task = asyncio.create_task(aux.peer.run(stop))
    try:
        me = str(aux.averager.host.peer_id)
        await poll_until(
            peers[0].optimizer.board.fetch, lambda seen: any(r.peer == me for r in seen)
        )

        async def train(i: int) -> None:
            walk = Recorder(data, 20 + i, peers[i])
            trainer = Trainer(peers[i].model, peers[i].optimizer, peers[i].bridge, walk, mse)
            await trainer.run(until_epoch=5)

        await asyncio.wait_for(asyncio.gather(train(0), train(1)), timeout=120)
    finally:
        stop.set()
        await aux_task
        await close_aux(aux)

    # state rounds at epochs 2 and 4, each with both clients and the backbone reducing
    assert aux.peer.state_rounds_joined >= 1
    for peer in peers:
        assert peer.optimizer.states_averaged, "two clients alone cannot average their state"
    assert sum(r.group_size == 3 for r in peers[0].optimizer.reports) >= 3


async def test_a_checkpoint_saved_behind_a_step_names_the_epoch_its_weights_belong_to(
    make_peer: MakePeer, make_host: MakeHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a checkpoint job queued on the training thread while the replica steps runs right after the
    # step: it must see the new epoch with the new weights, never the old number on them
    first_model = fresh_model()
    first = await make_peer(
        first_model, make_optimizer(first_model), DedlocConfig(target_batch_size=256)
    )
    model = fresh_model()
    store = CheckpointStore(tmp_path / "checkpoints", keep=2)
    aux = await start_aux(
        first, make_host, model=model, optimizer=make_optimizer(model),
        config=DedlocBackboneConfig(target_batch_size=256, checkpoint_every=1), checkpoints=store,
    )  # fmt: skip
    peer = aux.peer
    stepping, release = threading.Event(), threading.Event()
    apply = peer.local.apply

    def slow_apply(grads: list[torch.Tensor]) -> None:
        stepping.set()
        release.wait(10)
        apply(grads)

    monkeypatch.setattr(peer.local, "apply", slow_apply)
    try:
        grads = [torch.full_like(p, 0.1) for p in model.parameters()]
        step = asyncio.create_task(peer.bridge.run(peer._follow_step, grads, 1))
        assert await asyncio.to_thread(stepping.wait, 10)
        metrics = EpochMetrics(0, 1.0, 256, 100.0, 2, time.time())
        saving = asyncio.create_task(
            peer.books.checkpoint(metrics, peer.saving)
        )  # queued behind the step
        await asyncio.sleep(0.05)
        release.set()
        await step
        await saving
        saved = CheckpointStore.load(store.path_for(1))
        assert saved.epoch == 1
        assert saved.metadata["epoch"] == 1
        steps = {int(s["step"]) for s in saved.optimizer["state"].values()}
        assert steps == {1}  # the weights of exactly one step
        assert not store.path_for(0).exists()
    finally:
        release.set()
        await close_aux(aux)


async def test_checkpoints_record_the_samples_behind_them(
    make_peer: MakePeer, make_host: MakeHost, tmp_path: Path
) -> None:
    first_model = fresh_model()
    first = await make_peer(
        first_model, make_optimizer(first_model), DedlocConfig(target_batch_size=256)
    )
    store = CheckpointStore(tmp_path / "checkpoints", keep=5)
    config = DedlocBackboneConfig(target_batch_size=256, checkpoint_every=10)

    async def backbone_reporting(epochs: range, samples: int) -> None:
        """A backbone on ``store`` (resumed from its newest checkpoint) that is told of
        ``epochs`` of ``samples`` each, its replica at the epoch after them."""
        model = fresh_model()
        aux = await start_aux(
            first, make_host, model=model, optimizer=make_optimizer(model), config=config,
            checkpoints=store,
        )  # fmt: skip
        peer = aux.peer
        try:
            await peer._resume_from_checkpoint()
            peer.state.epoch = epochs.stop  # as if it had stepped with the trainers
            for number in epochs:
                metrics = EpochMetrics(number, 6.0, samples, 100.0, 3, time.time())
                peer.books.report(metrics)
            assert peer.books.due(epochs.stop)
            await peer.books.checkpoint(metrics, peer.saving)
        finally:
            await close_aux(aux)

    # the last epoch overshot the target: 288 is what that epoch alone saw
    await backbone_reporting(range(10), 288)
    saved = CheckpointStore.load(store.path_for(10))
    assert (saved.metadata["samples"], saved.metadata[SAMPLES_TOTAL]) == (288, 2880)
    # restarted, the backbone goes on from its checkpoint's count
    await backbone_reporting(range(10, 20), 256)
    saved = CheckpointStore.load(store.path_for(20))
    assert saved.metadata[SAMPLES_TOTAL] == 2880 + 2560

    # a checkpoint without the count: the count is unknown from then on
    old = CheckpointStore.load(store.path_for(20))
    del old.metadata[SAMPLES_TOTAL]
    store.save(20, old.model, old.optimizer, old.metadata, old.loss)
    await backbone_reporting(range(20, 30), 256)
    assert CheckpointStore.load(store.path_for(30)).metadata[SAMPLES_TOTAL] is None
