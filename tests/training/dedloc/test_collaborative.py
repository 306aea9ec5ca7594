"""The collaborative optimizer on real loopback connections: equivalence with one large-batch run,
epoch sizes, identical replicas, delayed updates, and late joiners."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import replace

import pytest
import torch

from core.codecs.topk import top_k
from core.training.dedloc.optimizer import DedlocConfig
from core.training.trainer import Trainer
from tests.training.conftest import AVERAGING, MakePeer, Peer

DIM, OUT, EXAMPLES = 32, 4, 8192
TARGET, MICRO = 512, 16


def dataset() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(EXAMPLES, DIM, generator=generator)
    teacher = torch.randn(DIM, OUT, generator=generator) / DIM**0.5
    return inputs, inputs @ teacher + 0.1 * torch.randn(EXAMPLES, OUT, generator=generator)


def fresh_model() -> torch.nn.Module:
    torch.manual_seed(7)  # the same initial weights everywhere (the "same seed")
    return torch.nn.Sequential(torch.nn.Linear(DIM, 16), torch.nn.Tanh(), torch.nn.Linear(16, OUT))


def make_optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.Adam(model.parameters(), lr=0.02)


def evaluate(model: torch.nn.Module, data: tuple[torch.Tensor, torch.Tensor]) -> float:
    with torch.no_grad():
        return float(torch.nn.functional.mse_loss(model(data[0]), data[1]))


def mse(
    model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    # A real microbatch takes tens of milliseconds or more; this model's takes microseconds, faster
    # than any exchange of progress over a network can follow (dozens would slip into an epoch
    # between two reads under load). Ten milliseconds of "compute" keep the proportions real.
    time.sleep(0.01)
    _, inputs, targets = batch
    return torch.nn.functional.mse_loss(model(inputs), targets)


class Recorder:
    """Each peer's own random walk over the shared examples, remembering which it used per epoch."""

    def __init__(self, data: tuple[torch.Tensor, torch.Tensor], seed: int, peer: Peer) -> None:
        self.data = data
        self.generator = torch.Generator().manual_seed(seed)
        self.peer = peer
        self.used: dict[int, list[torch.Tensor]] = defaultdict(list)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        index = torch.randint(0, EXAMPLES, (MICRO,), generator=self.generator)
        # read on the training thread between steps: the epoch cannot change under us
        self.used[self.peer.optimizer.epoch].append(index)
        return index, self.data[0][index], self.data[1][index]


async def test_three_peers_match_one_large_batch_run(make_peer: MakePeer) -> None:
    data = dataset()
    config = DedlocConfig(target_batch_size=TARGET, average_state_every=5)
    peers = []
    for _ in range(3):
        model = fresh_model()
        peers.append(await make_peer(model, make_optimizer(model), config))
    recorders = [Recorder(data, 100 + i, peer) for i, peer in enumerate(peers)]
    epochs = 20
    curves: list[list[float]] = [[] for _ in peers]

    async def train(i: int) -> None:
        peer = peers[i]
        trainer = Trainer(peer.model, peer.optimizer, peer.bridge, recorders[i], mse)
        await trainer.run(
            until_epoch=epochs, on_epoch=lambda _: curves[i].append(evaluate(peer.model, data))
        )

    await asyncio.wait_for(asyncio.gather(*(train(i) for i in range(3))), timeout=150)

    # every epoch was averaged by all three, and holds at least the target. Not much more: peers
    # stop when their shared progress says the target is reached, so an epoch overshoots by what is
    # computed while that news travels (about 1.1 times the target on a quiet machine, more under
    # load); a peer that did not follow the others' progress would fill the target on its own (three
    # times it), which the bound of twice the target catches on any machine.
    for peer in peers:
        assert [r.epoch for r in peer.optimizer.reports] == list(range(epochs))
        assert all(r.group_size == 3 and r.averaged for r in peer.optimizer.reports)
    sizes = [sum(sum(i.numel() for i in r.used[e]) for r in recorders) for e in range(epochs)]
    for epoch, size in enumerate(sizes):
        assert TARGET <= size <= 2 * TARGET, (
            epoch,
            sizes,
            [[len(r.used[e]) for r in recorders] for e in range(epochs)],
        )
    for model in (p.model for p in peers[1:]):
        for mine, theirs in zip(model.parameters(), peers[0].model.parameters(), strict=True):
            torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-6)

    # one peer, one optimizer step per epoch over exactly the examples the collaboration used
    single = fresh_model()
    optimizer = make_optimizer(single)
    reference = []
    for epoch in range(epochs):
        index = torch.cat([torch.cat(r.used[epoch]) for r in recorders])
        optimizer.zero_grad()
        mse(single, (index, data[0][index], data[1][index])).backward()
        optimizer.step()
        reference.append(evaluate(single, data))
    assert reference[-1] < 0.5 * reference[0]  # it really trains
    gaps = [abs(ours - theirs) / theirs for ours, theirs in zip(curves[0], reference, strict=True)]
    print(f"largest relative gap between the loss curves: {max(gaps):.2e}")
    for epoch, gap in enumerate(gaps):
        assert gap <= 0.01, (epoch, curves[0][epoch], reference[epoch])


@pytest.mark.parametrize("delayed", [True])
async def test_delayed_updates_still_train_and_keep_replicas_equal(
    make_peer: MakePeer, delayed: bool
) -> None:
    data = dataset()
    config = DedlocConfig(
        target_batch_size=TARGET, average_state_every=4, delay_parameter_updates=delayed
    )
    peers = []
    for _ in range(2):
        model = fresh_model()
        peers.append(await make_peer(model, make_optimizer(model), config))
    before = evaluate(peers[0].model, data)

    async def train(i: int) -> None:
        peer = peers[i]
        walk = Recorder(data, 200 + i, peer)
        await Trainer(peer.model, peer.optimizer, peer.bridge, walk, mse).run(until_epoch=12)

    await asyncio.wait_for(asyncio.gather(*(train(i) for i in range(2))), timeout=120)
    for peer in peers:
        await peer.optimizer.close()  # lets the last delayed update land
    assert evaluate(peers[0].model, data) < 0.6 * before
    for mine, theirs in zip(peers[0].model.parameters(), peers[1].model.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-6)


async def test_a_late_joiner_loads_the_state_and_then_contributes(make_peer: MakePeer) -> None:
    data = dataset()
    config = DedlocConfig(target_batch_size=128, average_state_every=0)
    first_model = fresh_model()
    first = await make_peer(first_model, make_optimizer(first_model), config)
    walk = Recorder(data, 1, first)
    await Trainer(first_model, first.optimizer, first.bridge, walk, mse).run(until_epoch=3)
    assert first.optimizer.epoch == 3

    torch.manual_seed(99)  # different initial weights: only a download can make them equal
    late_model = torch.nn.Sequential(
        torch.nn.Linear(DIM, 16), torch.nn.Tanh(), torch.nn.Linear(16, OUT)
    )
    late = await make_peer(late_model, make_optimizer(late_model), config)  # start() catches up
    assert late.optimizer.epoch == 3
    for mine, theirs in zip(late_model.parameters(), first_model.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0)

    async def train(peer: Peer, seed: int) -> None:
        walk = Recorder(data, seed, peer)
        await Trainer(peer.model, peer.optimizer, peer.bridge, walk, mse).run(until_epoch=5)

    await asyncio.wait_for(asyncio.gather(train(first, 2), train(late, 3)), timeout=90)
    late_reports = late.optimizer.reports
    assert [r.epoch for r in late_reports] == [3, 4]
    assert all(r.group_size == 2 and r.samples > 0 for r in late_reports)


async def test_a_client_mode_peer_trains_with_the_others(make_peer: MakePeer) -> None:
    data = dataset()
    trainer_config = DedlocConfig(target_batch_size=128, average_state_every=2)
    client_config = DedlocConfig(target_batch_size=128, average_state_every=2, role="client")
    models = [fresh_model(), fresh_model()]
    peers = [
        await make_peer(models[0], make_optimizer(models[0]), trainer_config),
        await make_peer(
            models[1],
            make_optimizer(models[1]),
            client_config,
            averaging=replace(AVERAGING, client_mode=True),
        ),
    ]

    async def train(i: int) -> None:
        walk = Recorder(data, 40 + i, peers[i])
        await Trainer(peers[i].model, peers[i].optimizer, peers[i].bridge, walk, mse).run(
            until_epoch=4
        )

    await asyncio.wait_for(asyncio.gather(train(0), train(1)), timeout=90)
    for peer in peers:
        assert all(r.group_size == 2 and r.averaged for r in peer.optimizer.reports)
    for mine, theirs in zip(models[0].parameters(), models[1].parameters(), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-6)


async def test_a_sparse_codec_keeps_what_it_left_out_and_the_replicas_stay_equal(
    make_peer: MakePeer,
) -> None:
    data = dataset()
    config = DedlocConfig(target_batch_size=128, average_state_every=0)
    sparse = replace(AVERAGING, codec=top_k(0.05, 2))
    peers = []
    for _ in range(2):
        model = fresh_model()
        peers.append(await make_peer(model, make_optimizer(model), config, averaging=sparse))
    before = evaluate(peers[0].model, data)

    async def train(i: int) -> None:
        peer = peers[i]
        walk = Recorder(data, 300 + i, peer)
        await Trainer(peer.model, peer.optimizer, peer.bridge, walk, mse).run(until_epoch=8)

    await asyncio.wait_for(asyncio.gather(*(train(i) for i in range(2))), timeout=120)
    assert all(r.group_size == 2 for p in peers for r in p.optimizer.reports)
    for peer in peers:
        feedback = peer.optimizer.feedback
        assert feedback is not None
        assert feedback.residual is not None
        # 5 % of each block went: most of the gradient waits in the residual
        assert sum(int(torch.count_nonzero(r)) for r in feedback.residual) > 0
    assert evaluate(peers[0].model, data) < 0.8 * before
    for mine, theirs in zip(peers[0].model.parameters(), peers[1].model.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0)
