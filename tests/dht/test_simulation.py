"""A thousand nodes on the in-memory network: every lookup succeeds within ceil(log2 N) + 2 hops."""

from __future__ import annotations

import math
import random
import time

import pytest

from core.dht import DHTConfig, DHTNode
from core.dht.ids import key_id
from core.dht.memory import MemoryNetwork
from core.dht.traversal import Search

N = 1000
HOP_LIMIT = math.ceil(math.log2(N)) + 2


async def build(network: MemoryNetwork, count: int, rng: random.Random) -> list[DHTNode]:
    config = DHTConfig(refresh_interval=3600, republish_interval=3600)
    nodes: list[DHTNode] = []
    for _ in range(count):
        node = DHTNode(network.transport(), config)
        pool = rng.sample(nodes, min(3, len(nodes)))
        await node.start([str(n.state.transport.addresses()[0]) for n in pool])
        await node.wait_bootstrapped()
        nodes.append(node)
    return nodes


def where_it_went(
    key: str, nodes: list[DHTNode], storer: DHTNode, getter: DHTNode, search: Search
) -> str:
    """Why a lookup missed a record: who holds it and whom the lookup asked, as ranks by distance."""
    kid = key_id(key)
    ranked = sorted(nodes, key=lambda n: n.state.node_id ^ kid)
    rank = {n.peer_id: r for r, n in enumerate(ranked)}
    holders = [r for r, n in enumerate(ranked) if n.state.storage.get(kid) is not None]
    asked = sorted(rank[c.contact.peer_id] for c in search.nearest(search.k))
    return (
        f"{key} not found: held at ranks {holders}; stored by rank {rank[storer.peer_id]}, "
        f"looked up by rank {rank[getter.peer_id]}, whose lookup heard from ranks {asked} "
        f"(done={search.done}, {len(search.failed)} failed)"
    )


@pytest.mark.timeout(
    600
)  # CPU-bound: a busy machine multiplies its time (the limit is a hang guard)
async def test_a_thousand_nodes() -> None:
    rng = random.Random(42)
    network = MemoryNetwork()
    nodes = await build(network, N, rng)
    try:
        by_id = sorted(nodes, key=lambda n: n.state.node_id)
        # node lookups: the closest node found is the true closest, by brute force
        worst = 0
        for _ in range(200):
            target = rng.getrandbits(160)
            asker = rng.choice(nodes)
            search = await asker.find_nodes(target)
            truth = min(
                (n for n in by_id if n is not asker), key=lambda n: n.state.node_id ^ target
            )
            assert search.nearest(1)[0].contact.peer_id == truth.peer_id
            worst = max(worst, search.hops)
        assert worst <= HOP_LIMIT, f"a lookup took {worst} hops (limit {HOP_LIMIT})"

        # values: stored from random nodes, found from others, within the same hop limit
        expiration = time.time() + 600
        keys = [f"sim-{i}" for i in range(100)]
        storers = [rng.choice(nodes) for _ in keys]
        for i, key in enumerate(keys):
            assert await storers[i].store(key, i, expiration)
        for i, key in enumerate(keys):
            getter = rng.choice(nodes)
            searches = await getter.lookups.run(
                [key_id(key)], want_values=True, stop_on_value=True, keys={key_id(key): key}
            )
            assert searches[0].records, where_it_went(key, nodes, storers[i], getter, searches[0])
            assert searches[0].hops <= HOP_LIMIT
            found = await getter.get(key)
            assert found is not None
            assert found.value == i
    finally:
        for node in nodes:
            await node.close()
