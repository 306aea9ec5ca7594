"""Which experts a server hosts: uids and globs over the grid, and free slots found in the DHT."""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator

import pytest

from core.dht import DHTConfig, DHTNode
from core.dht.memory import MemoryNetwork
from core.moe.announce import declare_experts
from core.moe.grid import ExpertGrid, GridError
from core.moe.server.selection import expand_uids, free_uids

GRID = ExpertGrid("ffn", (3, 4))


def test_uids_and_globs_expand_in_the_order_named() -> None:
    assert expand_uids(GRID, ["ffn.2.3", "ffn.0.*", "ffn.0.1"]) == [
        "ffn.2.3",
        "ffn.0.0",
        "ffn.0.1",
        "ffn.0.2",
        "ffn.0.3",
    ]
    assert expand_uids(GRID, ["ffn.[12].?"]) == [f"ffn.{i}.{j}" for i in (1, 2) for j in range(4)]
    assert len(expand_uids(GRID, ["ffn.*"])) == 12


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("ffn.3.0", "outside dimension 0"),
        ("ffn.0", "has 1 indices"),
        ("moe.*", "matches no expert"),
        ("ffn.01.0", "not a plain decimal number"),
    ],
)
def test_uids_off_the_grid_are_refused(pattern: str, message: str) -> None:
    with pytest.raises(GridError, match=message):
        expand_uids(GRID, [pattern])


@pytest.fixture
async def dht() -> AsyncIterator[DHTNode]:
    node = DHTNode(MemoryNetwork().transport(), DHTConfig())
    await node.start([])
    yield node
    await node.close()


async def test_free_slots_come_first_and_preferred_ones_before_others(dht: DHTNode) -> None:
    taken = [f"ffn.0.{j}" for j in range(4)] + ["ffn.1.0"]
    await declare_experts(dht, GRID, taken, "elsewhere", time.time() + 60)
    chosen = await free_uids(
        dht, GRID, 5, prefer=["ffn.2.2", "ffn.0.1", "nope"], rng=random.Random(1)
    )
    assert chosen[0] == "ffn.2.2"  # preferred and free; ffn.0.1 is preferred but served elsewhere
    assert len(set(chosen)) == 5
    assert set(chosen).isdisjoint(taken)
    # different volunteers draw different slots
    other = await free_uids(dht, GRID, 5, rng=random.Random(2))
    assert other != chosen[:5]


async def test_a_full_grid_adds_second_servers_of_announced_experts(dht: DHTNode) -> None:
    taken = list(GRID.all_uids())[:10]
    await declare_experts(dht, GRID, taken, "elsewhere", time.time() + 60)
    chosen = await free_uids(dht, GRID, 4, rng=random.Random(3))
    assert set(chosen[:2]) == {"ffn.2.2", "ffn.2.3"}  # the two free slots first
    assert set(chosen[2:]) <= set(taken)
    assert len(await free_uids(dht, GRID, 100)) == 12  # never more than the grid
    with pytest.raises(GridError):
        await free_uids(dht, GRID, 0)
