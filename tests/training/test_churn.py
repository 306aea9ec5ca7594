"""Churn on real loopback connections, in one process: the backbone keeps the state when every
trainer has left, leaving is visible at once, a newcomer that cannot load the state waits without
spinning, and a dead donor of the newest state falls back to a live older one (never to one older
than the downloader's own)."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from core.averaging.sharing.state import StateDownloadError, StateSharing
from core.averaging.sharing.vouching import Vouching
from core.data import ShardServer
from core.net import Identity
from core.training.checkpoints import CheckpointStore
from core.training.dedloc.backbone import DedlocBackbone, DedlocBackboneConfig
from core.training.dedloc.optimizer import DedlocConfig, DedlocOptimizer
from core.training.links import PeerLinks
from core.training.progress import PeerProgress
from core.training.publish.checkpoint import fetch_published_checkpoint, publish_checkpoint
from core.training.state import TrainingState
from core.training.trainer import Trainer
from tests.support.leaks import poll_until, wait_until
from tests.training.conftest import Node
from tests.training.dedloc.test_collaborative import (
    Recorder,
    dataset,
    fresh_model,
    make_optimizer,
    mse,
)

TARGET = 128


def trainer(node: Node, config: DedlocConfig) -> tuple[DedlocOptimizer, torch.nn.Module]:
    model = fresh_model()
    return DedlocOptimizer(TrainingState(model, make_optimizer(model)), node.links, config), model


def backbone_peer(
    node: Node, config: DedlocBackboneConfig, checkpoints: CheckpointStore | None = None
) -> tuple[DedlocBackbone, torch.nn.Module]:
    """A backbone on ``node`` with a fresh replica, and the replica's model."""
    model = fresh_model()
    aux = DedlocBackbone(
        TrainingState(model, make_optimizer(model)), node.links, config, checkpoints=checkpoints
    )
    return aux, model


async def train(
    optimizer: DedlocOptimizer, model: torch.nn.Module, node: Node, seed: int, until: int
) -> None:
    class Holder:  # what Recorder reads: the optimizer's epoch
        pass

    holder = Holder()
    holder.optimizer = optimizer  # type: ignore[attr-defined]
    walk = Recorder(dataset(), seed, holder)  # type: ignore[arg-type]
    await Trainer(model, optimizer, node.bridge, walk, mse).run(until_epoch=until)


def weights(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


async def test_the_backbone_keeps_the_state_when_every_trainer_left(nodes, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    config = DedlocConfig(target_batch_size=TARGET, average_state_every=3)
    backbone = await nodes(None, backbone=True)
    aux, aux_model = backbone_peer(
        backbone,
        DedlocBackboneConfig(target_batch_size=TARGET, average_state_every=3),
        CheckpointStore(tmp_path / "checkpoints"),
    )
    stop = asyncio.Event()
    aux_task = asyncio.create_task(aux.run(stop))
    try:
        first = [await nodes(backbone.address) for _ in range(2)]
        trainers = [trainer(node, config) for node in first]
        for optimizer, _ in trainers:
            await optimizer.start()
        await asyncio.wait_for(
            asyncio.gather(
                *(
                    train(o, m, n, 10 + i, 5)
                    for i, ((o, m), n) in enumerate(zip(trainers, first, strict=True))
                )
            ),
            timeout=180,
        )
        # the backbone stepped with them: its replica is their state, at their epoch
        await wait_until(lambda: aux.state.epoch == 5)
        assert aux.steps_followed >= 3
        for mine, theirs in zip(aux_model.parameters(), trainers[0][1].parameters(), strict=True):
            torch.testing.assert_close(mine, theirs, rtol=1e-3, atol=1e-4)
        last = weights(trainers[0][1])
        # every trainer leaves (a clean stop withdraws its records at once)
        for (optimizer, _), node in zip(trainers, first, strict=True):
            await optimizer.close()
            await node.close()
        me = str(backbone.averager.host.peer_id)
        records = await aux.board.fetch()
        assert {r.peer for r in records if r.role != "left"} == {me}, "withdrawn at once"
        assert len([r for r in records if r.role == "left"]) == 2

        # a newcomer starts from the initial weights, and continues from the backbone's epoch 5
        node = await nodes(backbone.address)
        optimizer, model = trainer(node, config)
        waits: list[str | None] = []
        optimizer.on_waiting = waits.append
        await asyncio.wait_for(optimizer.start(), timeout=60)
        assert optimizer.epoch == 5
        for mine, theirs in zip(model.parameters(), last, strict=True):
            torch.testing.assert_close(mine, theirs, rtol=1e-3, atol=1e-4)
        assert waits == []
        await asyncio.wait_for(train(optimizer, model, node, 30, 7), timeout=120)
        assert [r.epoch for r in optimizer.reports] == [5, 6]
        await optimizer.close()
    finally:
        stop.set()
        await aux_task


async def test_the_backbone_resumes_from_its_newest_checkpoint(nodes, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # a checkpoint of a collaboration that reached epoch 12, then a damaged newer file
    saved = fresh_model()
    with torch.no_grad():
        for p in saved.parameters():
            p.add_(0.5)
    store = CheckpointStore(tmp_path / "checkpoints")
    store.save(12, saved.state_dict(), make_optimizer(saved).state_dict(), {}, 1.0)
    store.path_for(13).write_bytes(b"not a checkpoint")
    backbone = await nodes(None, backbone=True)
    aux, _ = backbone_peer(backbone, DedlocBackboneConfig(target_batch_size=TARGET), store)
    stop = asyncio.Event()
    aux_task = asyncio.create_task(aux.run(stop))
    try:
        await wait_until(lambda: aux.state.epoch == 12)
        node = await nodes(backbone.address)
        optimizer, model = trainer(node, DedlocConfig(target_batch_size=TARGET))
        await poll_until(optimizer.board.fetch, lambda seen: any(r.epoch == 12 for r in seen))
        await asyncio.wait_for(optimizer.start(), timeout=60)
        assert optimizer.epoch == 12
        for mine, theirs in zip(model.parameters(), saved.parameters(), strict=True):
            torch.testing.assert_close(mine, theirs)
        await optimizer.close()
    finally:
        stop.set()
        await aux_task


async def test_a_newcomer_that_cannot_load_the_state_waits_without_spinning(
    nodes,
    caplog: pytest.LogCaptureFixture,  # type: ignore[no-untyped-def]
) -> None:
    first = await nodes(None)
    # someone says the collaboration is at epoch 9, but nobody announces a state
    ghost = await nodes(first.address)
    await ghost.links.board.publish(
        PeerProgress(str(ghost.averager.host.peer_id), 9, 0, 0.0, time.time(), "backbone")
    )
    keep = asyncio.create_task(keep_publishing(ghost))
    node = await nodes(first.address)
    optimizer, _ = trainer(node, DedlocConfig(target_batch_size=TARGET, retry_cap=2.0))
    asked = 0
    download = optimizer.links.sharing.download

    async def counted(**kwargs):  # type: ignore[no-untyped-def]
        nonlocal asked
        asked += 1
        return await download(**kwargs)

    optimizer.links.sharing.download = counted  # type: ignore[method-assign]
    waits: list[str | None] = []
    optimizer.on_waiting = waits.append
    try:
        with caplog.at_level(logging.WARNING, logger="core.training.dedloc.optimizer"):
            starting = asyncio.create_task(optimizer.start())
            # six seconds on purpose: how many attempts it makes in them is what is under test
            await asyncio.sleep(6.0)
            assert not starting.done(), "it must not train on a state it could not load"
            assert optimizer.waiting_for is not None
            assert "no peer announces a state" in optimizer.waiting_for
            # backoff 0.5, 1, 2, 2 … (jittered down to half): a handful of attempts, not hundreds
            assert 2 <= asked <= 12
            warnings = [r for r in caplog.records if "could not load the state" in r.getMessage()]
            assert len(warnings) == 1
            assert waits == [optimizer.waiting_for]
            # a stop ends the wait at once
            optimizer.interrupt()
            await asyncio.wait_for(starting, timeout=5)
        assert optimizer.epoch == 0
        assert waits[-1] is None
        assert optimizer.waiting_for is None
    finally:
        keep.cancel()
        await optimizer.close()


async def keep_publishing(node: Node) -> None:
    while True:
        await asyncio.sleep(1.0)
        await node.links.board.publish(
            PeerProgress(str(node.averager.host.peer_id), 9, 0, 0.0, time.time(), "backbone")
        )


def provider(version: int, value: float):  # type: ignore[no-untyped-def]
    arrays = [np.full(1000, value, dtype=np.float32)]
    return lambda: (version, {"epoch": version}, arrays)


async def test_a_dead_newest_donor_falls_back_to_a_live_older_one(nodes) -> None:  # type: ignore[no-untyped-def]
    first = await nodes(None)
    dead, live, me = [await nodes(first.address) for _ in range(3)]
    dead_sharing = StateSharing(dead.averager.host, dead.dht, "collab")
    live_sharing = StateSharing(live.averager.host, live.dht, "collab")
    dead_sharing.serve(provider(9, 9.0))
    live_sharing.serve(provider(6, 6.0))
    await dead_sharing.announce(9)
    await live_sharing.announce(6)
    await dead.close()  # killed: its announcement stays until it expires
    mine = StateSharing(me.averager.host, me.dht, "collab")
    one = Vouching(networks=1)  # one donor per epoch, each taken at its word: this is failover
    got = await mine.download(newer_than=3, timeout=30, vouching=one)
    assert got.version == 6
    assert float(got.tensors[0][0]) == 6.0
    # never an older state than our own, even when the newest donor is dead
    with pytest.raises(StateDownloadError, match="epoch 9"):
        await mine.download(newer_than=6, timeout=30, vouching=one)
    with pytest.raises(StateDownloadError, match="no donor has a state newer than epoch 9"):
        await mine.download(newer_than=9, timeout=30, vouching=one)
    # a donor that stops withdraws its announcement: nobody tries it any more
    await live_sharing.withdraw()
    live_sharing.stop_serving()
    assert [v for v, _, _ in await mine.donors() if v >= 0] == [9]


async def test_a_round_short_of_the_target_does_not_step(nodes) -> None:  # type: ignore[no-untyped-def]
    """A record that counts samples nobody brings (a peer killed since its last report) makes the
    collaboration look ready; the round then holds fewer samples than the target, and the epoch
    goes on, its gradient so far kept: the step equals one over all the samples, as if no round
    had been short."""
    first = await nodes(None)
    ghost = await nodes(first.address)
    me = str(ghost.averager.host.peer_id)

    async def haunt() -> None:
        while True:
            await ghost.links.board.publish(PeerProgress(me, 0, 100, 50.0, time.time()))
            await asyncio.sleep(1.0)

    haunting = asyncio.create_task(haunt())
    node = await nodes(first.address)
    config = DedlocConfig(target_batch_size=64, matchmaking_time=1.0)
    optimizer, model = trainer(node, config)
    reference = fresh_model()
    data = dataset()
    batches = [(data[0][i : i + 8], data[1][i : i + 8]) for i in range(0, 160, 8)]
    try:
        await optimizer.start()
        await poll_until(optimizer.board.fetch, lambda seen: any(r.peer == me for r in seen))
        await optimizer._refresh()  # the ghost's record must be in our view now
        used = 0

        async def microbatch() -> object:
            nonlocal used
            inputs, targets = batches[used]
            used += 1
            torch.nn.functional.mse_loss(model(inputs), targets).backward()  # type: ignore[no-untyped-call]
            return await optimizer.step(8, 1.0)

        # 8 of our samples + the ghost's 100 reach the target of 64: a round, which holds only ours
        assert await microbatch() is None
        assert optimizer.epoch == 0
        assert optimizer.reports == type(optimizer.reports)()
        haunting.cancel()
        await ghost.links.board.withdraw(PeerProgress(me, 0, 100, 50.0, time.time()))
        await optimizer._refresh()
        report = None
        while report is None:
            report = await microbatch()
        assert optimizer.epoch == 1
        assert report.samples == used * 8 >= 64  # type: ignore[attr-defined]
    finally:
        haunting.cancel()
        await optimizer.close()
    # the same step as one large batch of every sample used
    opt = make_optimizer(reference)
    inputs = torch.cat([b[0] for b in batches[:used]])
    targets = torch.cat([b[1] for b in batches[:used]])
    torch.nn.functional.mse_loss(reference(inputs), targets).backward()  # type: ignore[no-untyped-call]
    opt.step()
    for mine, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-5)


class Microbatches:
    """The dataset's 8-sample microbatches in order, each one's gradient handed to the optimizer."""

    def __init__(self, optimizer: DedlocOptimizer, model: torch.nn.Module, data: Any) -> None:
        self.optimizer, self.model, self.data = optimizer, model, data
        self.used = 0

    async def step(self) -> object:
        """The next microbatch's step: its report when it ended an epoch, else None."""
        start = self.used * 8
        inputs, targets = self.data[0][start : start + 8], self.data[1][start : start + 8]
        self.used += 1
        loss = torch.nn.functional.mse_loss(self.model(inputs), targets)
        loss.backward()  # type: ignore[no-untyped-call]
        return await self.optimizer.step(8, 1.0)


async def test_a_record_a_short_round_proved_empty_no_longer_makes_the_collaboration_ready(
    nodes,
) -> None:  # type: ignore[no-untyped-def]
    """A peer killed after its last report: its record claims 100 samples for up to 10 s more.
    The first round shows that it brings none; from then on readiness leaves its record out (until
    it is renewed), so the epoch goes on until the samples really reach the target, instead of
    ending in rounds just as short until the peer takes its step on too few."""
    first = await nodes(None)
    ghost = await nodes(first.address)
    me = str(ghost.averager.host.peer_id)
    await ghost.links.board.publish(PeerProgress(me, 0, 100, 50.0, time.time()))  # its last word
    node = await nodes(first.address)
    optimizer, model = trainer(node, DedlocConfig(target_batch_size=64, matchmaking_time=1.0))
    data = dataset()
    try:
        await optimizer.start()
        await poll_until(optimizer.board.fetch, lambda seen: any(r.peer == me for r in seen))
        await optimizer._refresh()
        feed = Microbatches(optimizer, model, data)
        report = None
        while report is None:
            report = await feed.step()
        assert optimizer.epoch == 1
        assert report.round_samples >= 64  # type: ignore[attr-defined]
        assert report.samples == feed.used * 8  # type: ignore[attr-defined]
    finally:
        await optimizer.close()


async def test_a_peer_in_a_round_still_reports_the_samples_it_brought(
    nodes, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """While its samples are in the gradient round, a peer's record still counts them for the
    epoch: peers that have not joined yet see the collaboration at its target and join, instead of
    reading a record of 0 samples, computing on, and bringing a larger batch than the step needs.
    Once the round is over (short here: the ghost brings nothing), they are counted once."""
    first = await nodes(None)
    ghost = await nodes(first.address)
    me = str(ghost.averager.host.peer_id)
    node = await nodes(first.address)
    optimizer, model = trainer(node, DedlocConfig(target_batch_size=64, matchmaking_time=1.0))
    entered, release = asyncio.Event(), asyncio.Event()
    real_round = PeerLinks.round

    async def held_round(links: PeerLinks, *args: Any, **kwargs: Any) -> object:
        entered.set()
        await release.wait()
        return await real_round(links, *args, **kwargs)

    monkeypatch.setattr(PeerLinks, "round", held_round)  # the links are frozen: their class
    try:
        await optimizer.start()
        await ghost.links.board.publish(PeerProgress(me, 0, 100, 50.0, time.time()))
        await poll_until(optimizer.board.fetch, lambda seen: any(r.peer == me for r in seen))
        await optimizer._refresh()  # 8 of ours and the ghost's 100 make the epoch ready
        stepping = asyncio.create_task(Microbatches(optimizer, model, dataset()).step())
        await entered.wait()
        during = optimizer._progress()
        release.set()
        assert await stepping is None
        after = optimizer._progress()
    finally:
        release.set()
        await optimizer.close()
    assert (during.epoch, during.samples) == (0, 8)
    assert (after.epoch, after.samples) == (0, 8)


async def test_the_backbone_takes_no_step_from_a_short_round(nodes) -> None:  # type: ignore[no-untyped-def]
    """The backbone reduces in a round that holds fewer samples than the target: the trainers take
    no step from it, and neither may the backbone, nor move on to the next epoch (the trainers would
    then download its replica and lose the epoch's number; the samples of that round would be
    credited to nobody)."""
    backbone = await nodes(None, backbone=True)
    aux, aux_model = backbone_peer(
        backbone, DedlocBackboneConfig(target_batch_size=64, matchmaking_time=3.0)
    )
    stop = asyncio.Event()
    aux_task = asyncio.create_task(aux.run(stop))
    ghost = await nodes(backbone.address)
    me = str(ghost.averager.host.peer_id)

    async def haunt() -> None:
        while True:
            await ghost.links.board.publish(PeerProgress(me, 0, 100, 50.0, time.time()))
            await asyncio.sleep(1.0)

    haunting = asyncio.create_task(haunt())
    node = await nodes(backbone.address)
    optimizer, model = trainer(node, DedlocConfig(target_batch_size=64, matchmaking_time=3.0))
    data = dataset()
    try:
        await optimizer.start()
        await poll_until(optimizer.board.fetch, lambda seen: any(r.peer == me for r in seen))
        await optimizer._refresh()
        microbatch = Microbatches(optimizer, model, data).step
        assert await microbatch() is None  # a short round: 8 of the 64 samples it was ready for
        await wait_until(lambda: aux.rounds_joined >= 1)
        assert (aux.epoch, aux.state.epoch, aux.steps_followed) == (0, 0, 0)
        haunting.cancel()
        await ghost.links.board.withdraw(PeerProgress(me, 0, 100, 50.0, time.time()))
        await optimizer._refresh()
        report = None
        while report is None:
            report = await microbatch()
        assert optimizer.epoch == 1  # stepped, never downloaded a state numbered past its own
        # the backbone reaches epoch 1 by following the step in the round, or, when a loaded
        # machine made it miss that round's matchmaking, by downloading the trainer's state: either
        # way at epoch 1 and no further, with the trainer's parameters
        await wait_until(lambda: aux.state.epoch == 1)
        assert (aux.epoch, aux.state.epoch) == (1, 1)
        for mine, theirs in zip(aux_model.parameters(), model.parameters(), strict=True):
            torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-5)
    finally:
        haunting.cancel()
        await optimizer.close()
        stop.set()
        await aux_task


async def test_a_backbone_whose_round_forms_no_group_claims_no_new_epoch(
    nodes, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    """A trainer's record makes the epoch look ready, but the trainer never comes to the round
    (killed since), so the backbone's round forms no group. The backbone stays at the epoch: a
    record of it at the next one would make every trainer wait for a state that nobody has."""
    caplog.set_level(logging.INFO, logger="core.training.links")
    backbone = await nodes(None, backbone=True)
    aux, _ = backbone_peer(
        backbone, DedlocBackboneConfig(target_batch_size=64, matchmaking_time=1.0)
    )
    ghost = await nodes(backbone.address)
    me = str(ghost.averager.host.peer_id)
    await ghost.links.board.publish(PeerProgress(me, 0, 100, 50.0, time.time()))
    stop = asyncio.Event()
    aux_task = asyncio.create_task(aux.run(stop))
    try:
        await wait_until(lambda: "'grads.0' in time" in caplog.text)
        # the backbone decides right after its round gives up, without waiting on anything
        assert aux.epoch == 0
        await poll_until(
            ghost.links.board.fetch, lambda seen: any(r.role == "backbone" for r in seen)
        )
        assert all(r.epoch == 0 for r in await ghost.links.board.fetch())
    finally:
        stop.set()
        await aux_task


async def test_alone_a_newcomer_starts_from_the_verified_published_checkpoint(  # type: ignore[no-untyped-def]
    nodes, tmp_path: Path
) -> None:
    """Nobody else is around: the organizers' published checkpoint (signed index, sha256 checked)
    beats the initial weights; one signed by another key is refused, and the peer starts fresh."""
    saved = fresh_model()
    with torch.no_grad():
        for p in saved.parameters():
            p.mul_(0.5)
    store = CheckpointStore(tmp_path / "checkpoints")
    path = store.save(20, saved.state_dict(), make_optimizer(saved).state_dict(), {}, 0.7)
    assert path is not None
    key, stranger = Identity.generate(), Identity.generate()
    public = tmp_path / "public"
    publish_checkpoint(path, public, key, epoch=20, loss=0.7, project="collab")
    server = ShardServer(public)
    url = await server.start()
    try:
        for signer, expected in ((stranger, 0), (key, 20)):
            node = await nodes(None)
            optimizer, model = trainer(node, DedlocConfig(target_batch_size=TARGET))

            async def fetch(
                newer: int, signer: Identity = signer, folder: Path = tmp_path / f"dl-{expected}"
            ) -> Path | None:
                return await fetch_published_checkpoint(
                    url, signer.peer_id, "collab", folder, newer_than=newer
                )

            optimizer.fallback = fetch
            await asyncio.wait_for(optimizer.start(), timeout=60)
            assert optimizer.epoch == expected
            reference = saved if expected else fresh_model()
            for mine, theirs in zip(model.parameters(), reference.parameters(), strict=True):
                torch.testing.assert_close(mine, theirs)
            await optimizer.close()
    finally:
        await server.close()
