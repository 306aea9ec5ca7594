"""Swarms of DHT nodes on real loopback connections, in one process."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from core.dht import DHTConfig, DHTNode, HostTransport
from core.net import Host, NetConfig
from core.util.clock import Clock
from tests.conftest import MakeHost

# connecting on loopback takes milliseconds, and fails at once if nobody listens: the timeouts only
# guard against a hang (a busy machine's TLS handshakes can take seconds: a node's first request to
# a peer, which opens the connection, once took over 2 s beside two CPU-bound processes)
FAST_DHT = DHTConfig(rpc_timeout=20.0, lookup_timeout=30.0)
QUIET_NET = NetConfig(dial_timeout=20.0, handshake_timeout=20.0, call_timeout=10.0, close_grace=0.2)

MakeSwarm = Callable[..., Awaitable[list[DHTNode]]]


@pytest.fixture
async def make_swarm(make_host: MakeHost) -> AsyncIterator[MakeSwarm]:
    """``await make_swarm(n)``: n DHT nodes, each bootstrapped from up to three earlier ones (all
    reading ``clock`` if one is given)."""
    nodes: list[DHTNode] = []

    async def make(
        count: int,
        config: DHTConfig = FAST_DHT,
        *,
        seed: int = 0,
        join: list[DHTNode] | None = None,
        clock: Clock | None = None,
    ) -> list[DHTNode]:
        rng = random.Random(seed)
        made: list[DHTNode] = []
        for _ in range(count):
            host: Host = await make_host(QUIET_NET)
            node = DHTNode(HostTransport(host), config, clock=clock)
            pool = (join or []) + made
            initial = [
                str(n.state.transport.addresses()[0]) for n in rng.sample(pool, min(3, len(pool)))
            ]
            await node.start(initial)
            made.append(node)
            nodes.append(node)
        for node in made:
            await node.wait_bootstrapped()
        return made

    yield make
    for node in nodes:
        await node.close()
