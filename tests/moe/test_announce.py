"""Expert announcements on a small in-memory DHT: what is stored, who finds it, expiry and refresh."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import pytest

from core.dht import DHTConfig, DHTNode
from core.dht.memory import MemoryNetwork
from core.dht.records import owner_marker
from core.moe.announce import Announcer, declare_experts, get_experts
from core.moe.grid import ExpertGrid, GridError
from core.util.clock import Clock, FakeClock
from tests.support.leaks import wait_until

GRID = ExpertGrid("ffn", (4, 5))


async def build_swarm(count: int, clock: Clock | None = None, seed: int = 0) -> list[DHTNode]:
    """``count`` DHT nodes on one in-memory network (no sockets), each joined through earlier ones."""
    rng = random.Random(seed)
    network = MemoryNetwork()
    config = DHTConfig(refresh_interval=3600, republish_interval=3600)
    nodes: list[DHTNode] = []
    for _ in range(count):
        node = DHTNode(network.transport(), config, clock=clock)
        pool = rng.sample(nodes, min(3, len(nodes)))
        await node.start([str(n.state.transport.addresses()[0]) for n in pool])
        await node.wait_bootstrapped()
        nodes.append(node)
    return nodes


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def swarm(clock: FakeClock) -> AsyncIterator[list[DHTNode]]:
    nodes = await build_swarm(6, clock)
    yield nodes
    for node in nodes:
        await node.close()


async def test_declared_experts_are_found_from_another_node(
    swarm: list[DHTNode], clock: FakeClock
) -> None:
    server_a, server_b, trainer = swarm[0], swarm[1], swarm[-1]
    expiration = clock.time() + 60
    ok = await declare_experts(server_a, GRID, ["ffn.0.1", "ffn.0.3", "ffn.2.4"], "A", expiration)
    assert ok == {"ffn.0.1": True, "ffn.0.3": True, "ffn.2.4": True}
    # B shares the entry "ffn" -> 0 with A: same expiration, identical data, accepted
    assert await declare_experts(server_b, GRID, ["ffn.0.2"], "B", expiration) == {"ffn.0.2": True}

    found = await get_experts(trainer, ["ffn.0.1", "ffn.0.2", "ffn.2.4", "ffn.3.3"])
    assert found == {"ffn.0.1": "A", "ffn.0.2": "B", "ffn.2.4": "A"}
    # the prefix tables: both servers' entries sit under the same keys, one subkey per next index
    root = await trainer.get("ffn", latest=True)
    assert root is not None
    assert sorted(root.value) == [0, 2]
    row = await trainer.get("ffn.0", latest=True)
    assert row is not None
    # one entry per server of each index, which only that server can write
    a, b = owner_marker(server_a.peer_id), owner_marker(server_b.peer_id)
    assert {index: entry.value for index, entry in row.value.items()} == {
        f"1{a}": "A",
        f"2{b}": "B",
        f"3{a}": "A",
    }


async def test_records_vanish_after_their_expiration(
    swarm: list[DHTNode], clock: FakeClock
) -> None:
    await declare_experts(swarm[0], GRID, ["ffn.1.1"], "A", clock.time() + 30)
    assert await get_experts(swarm[3], ["ffn.1.1"]) == {"ffn.1.1": "A"}
    clock.advance(31)
    for node in swarm:
        assert await get_experts(node, ["ffn.1.1"]) == {}
        assert await node.get("ffn.1", latest=True) is None


async def test_bad_uids_store_nothing(swarm: list[DHTNode], clock: FakeClock) -> None:
    with pytest.raises(GridError, match="outside"):
        await declare_experts(swarm[0], GRID, ["ffn.1.1", "ffn.9.1"], "A", clock.time() + 30)
    assert await get_experts(swarm[2], ["ffn.1.1"]) == {}
    with pytest.raises(GridError, match="non-empty text"):
        await get_experts(swarm[2], [""])
    with pytest.raises(GridError, match="not on grid"):
        Announcer(swarm[0], GRID, ["mlp.1.1"], "A", ttl=30)


async def test_junk_under_an_expert_key_reads_as_absent(
    swarm: list[DHTNode], clock: FakeClock
) -> None:
    await swarm[1].store("ffn.3.3", {"not": "an address"}, clock.time() + 30)
    await swarm[1].store("ffn.3.4", "", clock.time() + 30)
    assert await get_experts(swarm[4], ["ffn.3.3", "ffn.3.4"]) == {}


async def test_announcer_refreshes_until_closed() -> None:
    nodes = await build_swarm(4, seed=1)  # real clock: the announcer sleeps ttl / 3 for real
    announcer = Announcer(nodes[0], GRID, ["ffn.2.2"], "A", ttl=0.6)
    try:
        await announcer.start()
        assert announcer.rounds == 1
        assert announcer.last_report == {"ffn.2.2": True}
        first = await nodes[2].get("ffn.2.2", latest=True)
        assert first is not None
        await wait_until(lambda: announcer.rounds >= 3)
        later = await nodes[2].get("ffn.2.2", latest=True)
        assert later is not None
        assert later.expiration > first.expiration
        await announcer.close()
        rounds = announcer.rounds
        # an observation window, not a wait: a running announcer would store twice in it (every
        # ttl / 3 = 0.2 s, on the real clock)
        await asyncio.sleep(0.5)
        assert announcer.rounds == rounds  # closed means no more stores
    finally:
        await announcer.close()
        for node in nodes:
            await node.close()
