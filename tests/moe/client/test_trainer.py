"""The asynchronous DMoE trainer on loopback: two expert servers announced in a real DHT, a trainer
with four batches in flight on the digits; failing batches skipped; interrupts and give-up."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest
import torch
from torch.nn import functional

from core.dht import DHTConfig, DHTNode, HostTransport
from core.moe.announce import declare_experts
from core.moe.client.beam_search import MoEBeamSearch
from core.moe.client.digits import Digits, digit_batches, load_digits
from core.moe.client.layer import RemoteMixtureOfExperts
from core.moe.client.trainer import AsyncMoETrainer, DigitsMoE, StepReport
from core.moe.grid import ExpertGrid
from core.moe.server.experts import ExpertSpec
from core.moe.server.faults import ServerFaults
from core.moe.server.server import ExpertServer
from core.net import Host
from core.worker.bridge import TrainingBridge
from core.worker.errors import TrainingError
from tests.conftest import MakeHost
from tests.support.leaks import wait_until

GRID = ExpertGrid("ffn", (2, 4))
HIDDEN = 32
SPEC = ExpertSpec(kind="ffn", hidden=HIDDEN, optimizer="adam", lr=1e-3, max_batch=256)
DHT_CONFIG = DHTConfig(rpc_timeout=2.0)


@dataclass
class Swarm:
    client: Host
    dht: DHTNode
    bridge: TrainingBridge
    servers: list[ExpertServer] = field(default_factory=list)
    nodes: list[DHTNode] = field(default_factory=list)


async def start_swarm(
    make_host: MakeHost, server_bridge: TrainingBridge, faults: list[ServerFaults | None]
) -> Swarm:
    """One expert server per ``faults`` entry, each serving its row of the grid, and a trainer's
    Host, DHT node (a client) and bridge of four workers."""
    nodes: list[DHTNode] = []
    servers = []
    for row, server_faults in enumerate(faults):
        host = await make_host()
        node = DHTNode(HostTransport(host), DHT_CONFIG)
        await node.start([str(nodes[0].state.transport.addresses()[0])] if nodes else [])
        nodes.append(node)
        uids = [GRID.uid((row, col)) for col in range(GRID.shape[1])]
        server = ExpertServer(
            host, server_bridge, [SPEC.backend(uid) for uid in uids], faults=server_faults
        )
        await server.start()
        servers.append(server)
        stored = await declare_experts(node, GRID, uids, host.addresses[0], time.time() + 600)
        assert all(stored.values())
    client = await make_host()
    dht = DHTNode(HostTransport(client), DHTConfig(rpc_timeout=2.0, client_mode=True))
    await dht.start([str(nodes[0].state.transport.addresses()[0])])
    return Swarm(client, dht, TrainingBridge("trainer", workers=4), servers, nodes)


MakeSwarm = Callable[[list[ServerFaults | None]], Awaitable[Swarm]]


@pytest.fixture
async def make_swarm(make_host: MakeHost) -> AsyncIterator[MakeSwarm]:
    """Start swarms (``start_swarm``); at the end close their bridges, servers and DHT nodes."""
    made: list[Swarm] = []
    server_bridge = TrainingBridge("experts")

    async def make(faults: list[ServerFaults | None]) -> Swarm:
        made.append(await start_swarm(make_host, server_bridge, faults))
        return made[-1]

    yield make
    for swarm in made:
        await swarm.bridge.aclose()
        for server in swarm.servers:
            await server.close()
        for node in [swarm.dht, *swarm.nodes]:
            await node.close()
    await server_bridge.aclose()


@pytest.fixture(scope="module")
def digits() -> Digits:
    return load_digits()


def digits_trainer(
    swarm: Swarm,
    digits: Digits,
    reports: list[StepReport],
    *,
    batch_size: int = 64,
    **layer_options: object,
) -> tuple[AsyncMoETrainer, RemoteMixtureOfExperts]:
    torch.manual_seed(0)
    moe = RemoteMixtureOfExperts(
        hidden=HIDDEN,
        grid=GRID,
        host=swarm.client,
        bridge=swarm.bridge,
        search=MoEBeamSearch(swarm.dht, GRID),
        forward_timeout=10.0,
        backward_timeout=10.0,
        **layer_options,  # type: ignore[arg-type]
    )
    model = DigitsMoE(moe)
    trainer = AsyncMoETrainer(
        model,
        functional.cross_entropy,
        torch.optim.Adam(model.parameters(), lr=5e-3),
        digit_batches(digits.train_x, digits.train_y, batch_size, seed=1),
        bridge=swarm.bridge,
        concurrency=4,
        balancing_weight=0.01,
        on_step=reports.append,
    )
    return trainer, moe


async def test_four_batches_in_flight_train_the_digits(
    make_swarm: MakeSwarm, digits: Digits
) -> None:
    swarm = await make_swarm([ServerFaults(mean_latency=0.01, seed=row) for row in range(2)])
    reports: list[StepReport] = []
    trainer, moe = digits_trainer(swarm, digits, reports, k=2, beam_size=4)
    stats = await trainer.run(60)

    assert stats.steps == 60
    assert stats.failed == 0
    assert [r.step for r in reports] == list(range(1, 61))  # reported once each, in step order
    first = statistics.mean(r.loss for r in reports[:10])
    last = statistics.mean(r.loss for r in reports[-10:])
    assert last < 0.7 * first, f"the loss went from {first:.3f} to {last:.3f}"
    # batches overlapped: measured under the step lock, and seen in the gradients' staleness
    assert stats.max_in_flight >= 3
    assert max(r.staleness for r in reports) >= 1
    calls = moe.stats.snapshot()["calls"]
    assert calls["forward"] > 0
    assert calls["backward"] > 0
    updates = sum(b.updates for s in swarm.servers for b in s.backends.values())
    assert updates > 0  # the experts learned on the servers, not here


async def test_failed_batches_are_skipped_and_interrupt_stops_the_run(
    make_swarm: MakeSwarm, digits: Digits
) -> None:
    swarm = await make_swarm([ServerFaults(failure_rate=0.2, seed=row) for row in range(2)])
    reports: list[StepReport] = []
    trainer, moe = digits_trainer(swarm, digits, reports, batch_size=4, k=1)
    stats = await trainer.run(10)
    assert stats.steps == 10
    assert len(reports) == 10
    assert stats.failed > 0
    assert set(stats.failures) <= {"TooFewExpertsError"}
    assert moe.stats.too_few == stats.failed

    # an interrupt drops the batches in flight and ends the run early; cleared, training goes on
    running = asyncio.ensure_future(trainer.run(10_000))
    await wait_until(lambda: len(reports) >= 13)
    swarm.bridge.interrupt()
    stats = await asyncio.wait_for(running, 30)
    assert stats.interrupted
    assert stats.steps < 10_000
    swarm.bridge.clear_interrupt()
    steps = stats.steps
    stats = await trainer.run(2)
    assert stats.steps == steps + 2
    assert not stats.interrupted


async def test_a_trainer_gives_up_when_every_batch_fails(
    make_swarm: MakeSwarm, digits: Digits
) -> None:
    swarm = await make_swarm([ServerFaults(failure_rate=1.0)])
    trainer, _ = digits_trainer(swarm, digits, [], batch_size=4, k=1)
    trainer.max_consecutive_failures = 6
    with pytest.raises(TrainingError, match=r"6 batches in a row failed.*TooFewExpertsError"):
        await trainer.run(5)
    assert trainer.stats.steps == 0
    assert trainer.stats.failed >= 6
    with pytest.raises(ValueError, match="need a bridge with as many workers"):
        AsyncMoETrainer(
            torch.nn.Linear(2, 2),
            functional.mse_loss,
            torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1),
            [],
            bridge=swarm.bridge,
            concurrency=5,
        )
