"""DiLoCo peers on real loopback connections, in one process: each with its own Host, DHT node,
averager and training thread, a small model, and rounds the test ends itself."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import torch

from core.averaging import Averager, AveragingResult
from core.averaging.robust.aggregation import AggregationConfig
from core.codecs import NONE, Codec
from core.dht import DHTNode
from core.training.diloco.checks.replay import replica_of
from core.training.diloco.checks.replayer import RoundReplayer
from core.training.diloco.optimizer import DilocoConfig, DilocoOptimizer
from core.training.diloco.state import DilocoState
from core.training.links import PeerLinks
from core.training.state import TrainingState
from core.trust.identity import Identity
from core.worker.bridge import TrainingBridge
from tests.conftest import MakeHost
from tests.training.conftest import AVERAGING, start_node

NEVER = 10**9
"""A round length the clock never reaches in a test: the test ends rounds itself."""
AVERAGING_PATIENT = replace(AVERAGING, max_matchmaking_time=20.0, reducer_timeout=20.0,
                            sender_timeout=10.0, allreduce_timeout=60.0)  # fmt: skip


def mse(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The test model's loss of one batch (``DPeer.train``'s)."""
    return torch.nn.functional.mse_loss(model(batch["x"]), batch["y"])


def fresh_model() -> torch.nn.Module:
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))


@dataclass
class DPeer:
    optimizer: DilocoOptimizer
    model: torch.nn.Module
    bridge: TrainingBridge
    dht: DHTNode
    averager: Averager
    swarm: str = "diloco"
    stopped: bool = False
    witness: Callable[[Any, float], None] | None = None
    """Told each microbatch after its backward pass (a peer that keeps round receipts)."""

    @property
    def address(self) -> str:
        return str(self.averager.host.addresses[0])

    async def train(self, steps: int, seed: int) -> None:
        """Inner steps on this peer's own batches."""
        generator = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            inputs = torch.randn(4, 8, generator=generator)
            targets = inputs[:, :2] * 2.0

            def backward(inputs: torch.Tensor = inputs, targets: torch.Tensor = targets) -> None:
                self.optimizer.fresh({"x": inputs, "y": targets})  # as the Trainer asks
                loss = torch.nn.functional.mse_loss(self.model(inputs), targets)
                loss.backward()  # type: ignore[no-untyped-call]
                if self.witness is not None:
                    self.witness({"x": inputs, "y": targets}, float(loss.detach()))

            await self.bridge.run(backward)
            await self.optimizer.step(4, 1.0)

    async def stop(self) -> None:
        """Stop this peer for good (its Host too), as a killed process would."""
        if self.stopped:
            return
        self.stopped = True
        self.optimizer.interrupt()
        await self.optimizer.close()
        await self.averager.close()
        await self.bridge.aclose()
        await self.dht.close()
        await self.averager.host.close()

    def anchor(self) -> bytes:
        return b"".join(a.tobytes() for a in self.optimizer.diloco.anchor)

    def parameters(self) -> bytes:
        return b"".join(p.detach().numpy().tobytes() for p in self.model.parameters())


MakeDPeer = Callable[..., Awaitable[DPeer]]


@pytest.fixture
async def make_dpeer(make_host: MakeHost) -> AsyncIterator[MakeDPeer]:
    made: list[DPeer] = []

    async def make(
        *,
        overlap: bool = False,
        codec: Codec = NONE,
        role: str = "trainer",
        lr: float = 0.7,
        matchmaking: float = 10.0,
        round_seconds: float = NEVER,
        unsent_file: Path | None = None,
        group_size: int | None = None,
        momentum: float = 0.9,
        residual_decay: float = 1.0,
        aggregation: AggregationConfig | None = None,
        unsent_every: float = 60.0,
        clock: Callable[[], float] = time.time,
        swarm: str = "diloco",
        steps_per_round: float | None = None,
        identity: Identity | None = None,
        confirmers: Collection[str] = (),
        start: bool = True,
        keep_rounds: bool = False,
        replays: bool = False,
    ) -> DPeer:
        """``swarm``: peers of another name form a swarm of their own (another DHT);
        ``confirmers``: the keys whose word confirms the collaboration's epoch (a manifest's
        ``access.confirmers``); ``start``: False leaves ``optimizer.start()`` to the test;
        ``keep_rounds``: rounds start afresh and the peer keeps and serves their receipts;
        ``replays``: it replays members' rounds when the backbone asks (``RoundReplayer``)."""
        first = next((p for p in made if p.swarm == swarm and not p.stopped), None)
        host, dht = await start_node(make_host, first.address if first else None, identity)
        compute = 0.0 if role == "backbone" else 1.0
        config = replace(AVERAGING_PATIENT, compute=compute, target_group_size=group_size)
        if aggregation is not None:
            config = replace(config, aggregation=aggregation)
        averager = Averager(host, dht, swarm, config)
        bridge = TrainingBridge()
        model = fresh_model()
        state = TrainingState(model, torch.optim.AdamW(model.parameters(), lr=0.01))
        diloco = DilocoState(state, outer_lr=lr, outer_momentum=momentum, overlap=overlap,
                             sparse=codec.sparse, clip_norm=None,
                             residual_decay=residual_decay,
                             fresh_moments=keep_rounds)  # fmt: skip
        config = DilocoConfig(round_seconds=round_seconds, role=role, matchmaking_time=matchmaking,
                              refresh_interval=0.2, unsent_file=unsent_file,
                              unsent_every=unsent_every,
                              steps_per_round=steps_per_round,
                              keep_rounds=keep_rounds)  # fmt: skip
        links = PeerLinks.create(averager, bridge, frozenset(confirmers))
        optimizer = DilocoOptimizer(diloco, links, config, codec=codec, clock=clock)
        peer = DPeer(optimizer, model, bridge, dht, averager, swarm)
        made.append(peer)
        if keep_rounds:
            peer.witness = optimizer.keep_receipts("float32")
        if replays:
            replica = fresh_model()
            inner = torch.optim.AdamW(replica.parameters(), lr=0.01)
            optimizer.replay_for_backbone(
                RoundReplayer(
                    replica_of(TrainingState(replica, inner), None), host,
                    bridge=TrainingBridge("round-replays"), loss=mse,
                )
            )  # fmt: skip
        if start:
            await optimizer.start()
        return peer

    yield make
    for peer in reversed(made):
        if peer.stopped:
            continue
        peer.optimizer.interrupt()
        await peer.optimizer.close()
        await peer.averager.close()
        await peer.bridge.aclose()
        await peer.dht.close()


def watch(peer: DPeer) -> list[AveragingResult]:
    """Every round result the peer's averager observes, from now on."""
    seen: list[AveragingResult] = []
    observe = peer.averager.observe

    def keep(result: AveragingResult) -> None:
        seen.append(result)
        observe(result)

    peer.averager.observe = keep  # type: ignore[method-assign]
    return seen


async def settle(peers: list[DPeer]) -> None:
    """Everyone has read everyone's progress record (who to expect in a round), each just
    published: a record ages out of a view after ``RECORD_TTL``, and a busy machine can hold the
    whole test's loop (every peer's publishing) that long, after which the peers plan a round
    from views that miss each other."""
    await asyncio.gather(*(p.optimizer._publish() for p in peers))
    for _ in range(100):
        await asyncio.gather(*(p.optimizer._refresh() for p in peers))
        if all(len(p.optimizer.view().peers) == len(peers) for p in peers):
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the peers never saw each other")


async def end_rounds(peers: list[DPeer]) -> None:
    await asyncio.gather(*(p.optimizer.end_round() for p in peers))
    await asyncio.gather(*(p.optimizer._exchange for p in peers if p.optimizer._exchange))


async def end_rounds_together(peers: list[DPeer]) -> None:
    """A round after a test's short, missed one: with the usual window, as a busy machine needs
    seconds for a group of two to form. Matchmaking may still split them into groups of one; then
    neither lands (each sees the other missing from its group), both carry the work into the next
    round, and that one lands it."""
    for peer in peers:
        peer.optimizer.config = replace(peer.optimizer.config, matchmaking_time=10.0)
    before = [p.optimizer.epoch for p in peers]
    await end_rounds(peers)
    if [p.optimizer.epoch for p in peers] == before:
        assert all(p.optimizer.rounds_missed >= 1 for p in peers)
        await end_rounds(peers)
