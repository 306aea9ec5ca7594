"""A stranger cannot point a live server's experts at a dead address.

The attack as it was seen: a peer stored, for each expert of a live server, the uid entry, its
last-level prefix entry and the upper prefix entry, each with an expiration 24 h ahead and a dead
address; since the later expiration won, trainers were sent to the dead address for a day, and the
server's own re-announcing could not win its entries back. Here the attacker runs a DHT node without
the experts' rules (its own modified client) and tries that, then every variant the rules allow it
to try: its own signed entries for the same experts, at the dead address and at its own.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import pytest
import torch

from core.dht import DHTConfig, DHTNode
from core.dht.memory import MemoryNetwork
from core.dht.records import owner_marker
from core.dht.validation import renewal_bound
from core.moe.announce import declare_experts, expert_schema, get_experts
from core.moe.client.beam_search import MoEBeamSearch
from core.moe.grid import ExpertGrid
from core.trust.identity import Identity
from core.util.clock import FakeClock

GRID = ExpertGrid("ffn", (2, 2))
TTL = 30.0
DAY = 24 * 3600.0
DEAD = f"/ip4/203.0.113.9/tcp/4001/p2p/{Identity.generate().peer_id}"


def address_of(node: DHTNode) -> str:
    return f"/ip4/127.0.0.1/tcp/4001/p2p/{node.peer_id}"


@pytest.fixture
async def swarm() -> AsyncIterator[tuple[FakeClock, list[DHTNode], DHTNode]]:
    """Six honest nodes with the experts' rules, and an attacker's node without them."""
    clock = FakeClock()
    rng = random.Random(1)
    network = MemoryNetwork()
    config = DHTConfig(refresh_interval=3600, republish_interval=3600)
    nodes: list[DHTNode] = []
    for index in range(7):
        node = DHTNode(network.transport(), config, clock=clock)
        if index < 6:
            node.rules.add_schema(expert_schema(GRID, TTL))
        pool = rng.sample(nodes, min(3, len(nodes)))
        await node.start([str(n.state.transport.addresses()[0]) for n in pool])
        await node.wait_bootstrapped()
        nodes.append(node)
    yield clock, nodes[:6], nodes[6]
    for node in nodes:
        await node.close()


async def test_a_day_long_hijack_of_a_live_servers_experts_is_refused(
    swarm: tuple[FakeClock, list[DHTNode], DHTNode],
) -> None:
    clock, honest, attacker = swarm
    server, trainer = honest[0], honest[-1]
    uids = GRID.all_uids()
    ok = await declare_experts(server, GRID, uids, address_of(server), clock.time() + TTL)
    assert all(ok.values())

    later = clock.time() + DAY
    mine = owner_marker(attacker.peer_id)
    attacks = []
    for uid in uids:
        coords = GRID.parse(uid)
        row = GRID.key(coords[:-1])
        attacks += [
            (uid, DEAD, later),  # the plain entry the old format used
            (row, DEAD, later, coords[-1]),
            (GRID.key(()), 1, later, coords[0]),
            (uid, DEAD, later, mine),  # its own signed entries, a day long
            (row, DEAD, later, f"{coords[-1]}{mine}"),
            # within the time limit, but at an address that is not its own
            (uid, DEAD, clock.time() + TTL, mine),
            (row, DEAD, clock.time() + TTL, f"{coords[-1]}{mine}"),
        ]
    accepted = await attacker.store_many(attacks)
    assert not any(accepted), [a for a, ok in zip(attacks, accepted, strict=True) if ok]

    # trainers still find the live server, now and after a re-announcement
    assert await get_experts(trainer, uids) == dict.fromkeys(uids, address_of(server))
    search = MoEBeamSearch(trainer, GRID, cache_ttl=0, complete_records=True)
    found = await search.find_best_experts([torch.zeros(1, 2), torch.zeros(1, 2)], k=4)
    assert {e.address for e in found[0]} == {address_of(server)}
    clock.advance(TTL / 3)
    await declare_experts(server, GRID, uids, address_of(server), clock.time() + TTL)
    assert await get_experts(trainer, uids) == dict.fromkeys(uids, address_of(server))


async def test_a_strangers_own_entry_for_a_live_expert_costs_at_most_one_failed_call(
    swarm: tuple[FakeClock, list[DHTNode], DHTNode],
) -> None:
    clock, honest, _ = swarm
    server, intruder, trainer = honest[0], honest[1], honest[-1]
    uid = "ffn.1.1"
    await declare_experts(server, GRID, [uid], address_of(server), clock.time() + TTL)
    # the intruder follows the rules: its own address, the longest life allowed, later than ours
    await declare_experts(intruder, GRID, [uid], address_of(intruder), clock.time() + 2 * TTL)
    search = MoEBeamSearch(trainer, GRID, cache_ttl=0, complete_records=True)
    scores = [torch.tensor([[0.0, 1.0]]), torch.tensor([[0.0, 1.0]])]
    (first,) = (await search.find_best_experts(scores, k=1))[0]
    assert first.address == address_of(intruder)  # the freshest entry is tried first
    search.doubt(uid, first.address)  # its call failed: it serves no such expert
    (second,) = (await search.find_best_experts(scores, k=1))[0]
    assert second.address == address_of(server)


def test_the_longest_life_an_announcement_may_have_is_minutes() -> None:
    assert renewal_bound(TTL) == 2 * TTL + 60
    assert renewal_bound(TTL) < DAY / 100
