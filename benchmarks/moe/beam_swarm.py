"""The simulated DHT swarm of ``beam.py``: wide-area latency between regions, and two ways to
build a swarm of thousands of in-memory nodes (by joins, as real peers do, or directly, filling
each routing table as a long-running node's would be), with lookups checked against brute force."""

from __future__ import annotations

import asyncio
import bisect
import random
import time
from typing import Any

# ---- latency ---------------------------------------------------------------------------------------


class RegionLatency:
    """Round trips between nodes placed in regions: gamma-distributed between regions, fixed within."""

    def __init__(self, regions: int, mean_s: float, sd_s: float, local_s: float, seed: int) -> None:
        self.regions = max(1, regions)
        self.local_s = local_s
        self.mean_s = mean_s
        # gamma with this mean and sd: shape (m/s)^2, scale s^2/m (positive, skewed to the right)
        self._shape = (mean_s / sd_s) ** 2 if sd_s > 0 else 0.0
        self._scale = sd_s**2 / mean_s if sd_s > 0 and mean_s > 0 else 0.0
        self._rng = random.Random(seed)
        self._region: dict[Any, int] = {}

    def place(self, peer: Any) -> None:
        self._region[peer] = self._rng.randrange(self.regions)

    def __call__(self, sender: Any, target: Any) -> float:
        if self.regions > 1 and self._region.get(sender) == self._region.get(target):
            return self.local_s
        if self._shape == 0.0:
            return self.mean_s
        return self._rng.gammavariate(self._shape, self._scale)


# ---- building a swarm ------------------------------------------------------------------------------


def dht_config() -> Any:
    from core.dht import DHTConfig

    # no bucket refresh or republishing during the run: the swarm stays as built
    return DHTConfig(refresh_interval=3600, republish_interval=3600)


async def build_join(network: Any, count: int, rng: random.Random) -> list[Any]:
    """Nodes started one by one, each joining through up to three random earlier nodes."""
    from core.dht import DHTNode

    config = dht_config()
    nodes: list[Any] = []
    for _ in range(count):
        node = DHTNode(network.transport(), config)
        pool = rng.sample(nodes, min(3, len(nodes)))
        await node.start([str(n.state.transport.addresses()[0]) for n in pool])
        await node.wait_bootstrapped()
        nodes.append(node)
    return nodes


async def build_direct(network: Any, count: int, rng: random.Random) -> list[Any]:
    """Nodes whose routing tables are filled at once from the sorted ids (see the module doc)."""
    from core.dht import DHTNode
    from core.dht.ids import ID_BITS
    from core.dht.routing import Contact

    config = dht_config()
    nodes = [DHTNode(network.transport(), config) for _ in range(count)]
    for node in nodes:
        await node.start([])  # serve; nothing to join yet
    order = sorted(range(count), key=lambda i: nodes[i].state.node_id)
    ids = [nodes[i].state.node_id for i in order]
    refs = [(nodes[i].peer_id, tuple(nodes[i].state.transport.addresses())) for i in order]
    k = config.k
    for node in nodes:
        own = node.state.node_id
        now = node.state.clock.monotonic()
        for depth in range(ID_BITS):
            width = 1 << (ID_BITS - depth - 1)  # ids per subtree one level below this prefix
            sibling = (own ^ width) & ~(width - 1)  # our first depth bits, then the other bit
            lo = bisect.bisect_left(ids, sibling)
            hi = bisect.bisect_left(ids, sibling + width)
            for j in rng.sample(range(lo, hi), min(k, hi - lo)):
                peer, addresses = refs[j]
                node.table.add(Contact(peer, ids[j], addresses, now))
            mine = own & ~(width - 1)
            if bisect.bisect_left(ids, mine + width) - bisect.bisect_left(ids, mine) <= 1:
                break  # we are alone in our subtree: every deeper sibling is empty
    return nodes


async def quiet(network: Any) -> None:
    """Wait until no request is on its way (background replication and caching included)."""
    for _ in range(10_000):
        await network.quiet()
        await asyncio.sleep(0.01)  # tasks spawned as the last request ended get to send theirs
        if not network.in_flight:
            return


async def validate(nodes: list[Any], checks: int, rng: random.Random) -> dict[str, Any]:
    """Node lookups against brute force, and records found from other nodes than their storer's."""
    from core.dht.ids import ID_BITS

    closest_ok, worst_hops = 0, 0
    for _ in range(checks):
        target = rng.getrandbits(ID_BITS)
        asker = rng.choice(nodes)
        search = await asker.find_nodes(target)
        truth = min((n for n in nodes if n is not asker), key=lambda n: n.state.node_id ^ target)
        closest_ok += search.nearest(1)[0].contact.peer_id == truth.peer_id
        worst_hops = max(worst_hops, search.hops)
    expiration = time.time() + 600
    found_ok = 0
    for i in range(checks):
        storer, getter = rng.sample(nodes, 2)
        key = f"validation-{rng.getrandbits(64):x}"
        await storer.store(key, i, expiration)
        record = await getter.get(key)
        found_ok += record is not None and record.value == i
    return {
        "nearest_found": closest_ok,
        "records_found": found_ok,
        "checks": checks,
        "worst_lookup_hops": worst_hops,
    }
