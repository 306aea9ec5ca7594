"""Collaborations of peers on real loopback connections, in one process.

Each peer has its own Host, DHT node, averager, state sharing, progress board and training thread, as
it would in its own engine; the model and optimizer come from the test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass, replace

import pytest
import torch

from core.averaging import Averager, AveragerConfig
from core.dht import DHTConfig, DHTNode, HostTransport
from core.net import Host, NetConfig
from core.training.checkpoints import CheckpointStore
from core.training.dedloc.backbone import DedlocBackbone, DedlocBackboneConfig
from core.training.dedloc.optimizer import DedlocConfig, DedlocOptimizer
from core.training.links import PeerLinks
from core.training.state import TrainingState
from core.trust.identity import Identity
from core.worker.bridge import TrainingBridge
from tests.conftest import MakeHost

# connecting on loopback takes milliseconds, and fails at once if nobody listens: the timeouts only
# guard against a hang (a busy machine's TLS handshakes can take seconds)
NET = NetConfig(dial_timeout=20.0, handshake_timeout=20.0, call_timeout=10.0, close_grace=0.2)
AVERAGING = AveragerConfig(
    min_group_size=1,
    min_matchmaking_time=1.0,
    max_matchmaking_time=4.0,
    sender_timeout=2.0,
    reducer_timeout=4.0,
    allreduce_timeout=15.0,
    request_timeout=2.0,
)


@dataclass
class Peer:
    optimizer: DedlocOptimizer
    model: torch.nn.Module
    bridge: TrainingBridge
    dht: DHTNode
    averager: Averager

    @property
    def address(self) -> str:
        return str(self.averager.host.addresses[0])


MakePeer = Callable[..., Awaitable[Peer]]


async def start_node(
    make_host: MakeHost, join: str | None, identity: Identity | None = None
) -> tuple[Host, DHTNode]:
    """A started Host and DHT node, joined to ``join`` (the first peer's address) if given."""
    host = await make_host(NET, identity)
    dht = DHTNode(HostTransport(host), DHTConfig(rpc_timeout=2.0))
    await dht.start([join] if join else [])
    if join:
        await dht.wait_bootstrapped()
    return host, dht


@dataclass
class Aux:
    peer: DedlocBackbone
    bridge: TrainingBridge
    dht: DHTNode
    averager: Averager


async def start_aux(
    first: Peer,
    make_host: MakeHost,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    config: DedlocBackboneConfig,
    checkpoints: CheckpointStore | None = None,
    prefix: str = "collab",
    identity: Identity | None = None,
    confirmers: Collection[str] = (),
) -> Aux:
    host, dht = await start_node(make_host, first.address, identity)
    averager = Averager(host, dht, prefix, replace(AVERAGING, compute=0.0))
    bridge = TrainingBridge()
    aux = DedlocBackbone(
        TrainingState(model, optimizer),
        PeerLinks.create(averager, bridge, frozenset(confirmers)),
        config,
        checkpoints=checkpoints,
    )
    return Aux(aux, bridge, dht, averager)


async def close_aux(aux: Aux) -> None:
    await aux.averager.close()
    await aux.bridge.aclose()
    await aux.dht.close()


@pytest.fixture
async def make_peer(make_host: MakeHost) -> AsyncIterator[MakePeer]:
    """``await make_peer(model, optimizer, config)``: a started collaborative peer; closed at the end."""
    made: list[Peer] = []

    async def make(
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        config: DedlocConfig,
        *,
        averaging: AveragerConfig = AVERAGING,
        prefix: str = "collab",
        start: bool = True,
        confirmers: Collection[str] = (),
    ) -> Peer:
        host, dht = await start_node(make_host, made[0].address if made else None)
        averager = Averager(host, dht, prefix, replace(averaging, compute=1.0))
        bridge = TrainingBridge()
        links = PeerLinks.create(averager, bridge, frozenset(confirmers))
        collaborative = DedlocOptimizer(TrainingState(model, optimizer), links, config)
        peer = Peer(collaborative, model, bridge, dht, averager)
        made.append(peer)
        if start:
            await collaborative.start()
        return peer

    yield make
    for peer in reversed(made):
        await peer.optimizer.close()
        await peer.averager.close()
        await peer.bridge.aclose()
        await peer.dht.close()


@dataclass
class Node:
    """One peer's network side and training thread (a trainer's or the backbone's)."""

    bridge: TrainingBridge
    dht: DHTNode
    averager: Averager
    links: PeerLinks
    closed: bool = False

    @property
    def address(self) -> str:
        return str(self.averager.host.addresses[0])

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            await self.averager.close()
            await self.bridge.aclose()
            await self.dht.close()
            await self.averager.host.close()  # gone from the network, as a stopped process is


@pytest.fixture
async def nodes(make_host: MakeHost) -> AsyncIterator[list[Node]]:
    made: list[Node] = []

    async def make(join: str | None, *, backbone: bool = False) -> Node:
        host, dht = await start_node(make_host, join)
        averager = Averager(
            host, dht, "collab", replace(AVERAGING, compute=0.0 if backbone else 1.0)
        )
        bridge = TrainingBridge()
        node = Node(bridge, dht, averager, PeerLinks.create(averager, bridge))
        made.append(node)
        return node

    yield make  # type: ignore[misc]
    for node in reversed(made):
        await node.close()
