"""DHT swarms on real loopback TLS connections, in one process."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import replace
from typing import Any

import pytest

from core.dht import DHTError, DHTNode, InvalidRecord, owner_marker
from core.dht.ids import key_id
from core.dht.messages import STORE, StoreItem, StoreRequest, WireValue
from core.dht.records import signing_payload
from core.net import Identity
from core.net.errors import AddressError
from core.util.clock import FakeClock
from core.util.msgpack_codec import pack
from tests.dht.conftest import FAST_DHT, MakeSwarm
from tests.support.leaks import wait_until


def soon(seconds: float = 60.0) -> float:
    return time.time() + seconds


async def test_two_nodes(make_swarm: MakeSwarm) -> None:
    a, b = await make_swarm(2)
    assert await a.store("greeting", {"text": "hi", "n": (1, 2)}, soon())
    found = await b.get("greeting")
    assert found is not None
    assert found.value == {"text": "hi", "n": (1, 2)}
    assert await b.get("missing") is None


EDGE = [0, "", False, (), [], None, b"", {}, 0.0]


@pytest.mark.parametrize("edge", EDGE, ids=repr)
async def test_edge_case_keys_and_values_keep_their_types(make_swarm: MakeSwarm, edge: Any) -> None:
    a, b = await make_swarm(2)
    assert await a.store(edge, edge, soon())
    found = await b.get(edge, latest=True)
    assert found is not None
    assert found.value == edge
    assert type(found.value) is type(edge)
    if edge not in ([], {}, None) and not isinstance(edge, list | dict):
        assert await a.store("subkeys", "v", soon(), subkey=edge)
        got = await b.get("subkeys", latest=True)
        assert got is not None
        (subkey,) = got.value
        assert subkey == edge
        assert type(subkey) is type(edge)


async def test_fifty_nodes_replicate_on_the_nearest_and_serve_every_node(
    make_swarm: MakeSwarm,
) -> None:
    nodes = await make_swarm(50)
    rng = random.Random(1)
    keys = [f"key-{i}" for i in range(30)]
    for i, key in enumerate(keys):
        assert await rng.choice(nodes).store(key, i, soon())
    for i, key in enumerate(keys):
        getter = rng.choice(nodes)
        found = await getter.get(key)
        assert found is not None, key
        assert found.value == i, key
    # replication: the record ends up on (nearly all of) the 20 nodes truly nearest its key
    # (store() returns at a quorum of 3; the other copies follow in the background)
    kid = key_id(keys[0])
    nearest = sorted(nodes, key=lambda n: n.state.node_id ^ kid)[:20]
    await wait_until(lambda: sum(n.storage.get(kid) is not None for n in nearest) >= 18)


async def test_expiry_newer_wins_and_subkeys_across_the_network(make_swarm: MakeSwarm) -> None:
    clock = FakeClock(time.time())  # records expire by the nodes' clock, which the test moves
    nodes = await make_swarm(8, clock=clock)
    a, b, c = nodes[0], nodes[3], nodes[6]
    assert await a.store("short", "v", clock.time() + 1.0)
    assert (await c.get("short")) is not None
    clock.advance(1.2)
    assert [await n.get("short", latest=True) for n in nodes] == [None] * len(nodes)

    assert await a.store("k", "first", soon(60))
    assert not await b.store("k", "older", soon(30))
    assert (await c.get("k", latest=True)).value == "first"  # type: ignore[union-attr]
    assert await b.store("k", "newer", soon(90))
    assert (await a.get("k", latest=True)).value == "newer"  # type: ignore[union-attr]

    assert await a.store("peers", "from-a", soon(60), subkey="a")
    assert await b.store("peers", "from-b", soon(60), subkey="b")
    merged = await c.get("peers", latest=True)
    assert merged is not None
    assert {s: v.value for s, v in merged.value.items()} == {"a": "from-a", "b": "from-b"}


async def test_owned_records_only_their_owner_can_write(make_swarm: MakeSwarm) -> None:
    nodes = await make_swarm(6)
    owner, other, reader = nodes[0], nodes[1], nodes[4]
    mine = owner_marker(owner.peer_id)
    assert await owner.store("progress", {"samples": 10}, soon(), subkey=mine)
    found = await reader.get("progress", latest=True)
    assert found is not None
    assert found.value[mine].value == {"samples": 10}
    with pytest.raises(InvalidRecord, match="only that peer can store it"):
        await other.store("progress", {"samples": 10**9}, soon(), subkey=mine)
    # a hand-made store with a forged signature is refused by the node that receives it
    data, expiration = pack({"samples": 10**9}), soon()
    forged = other.state.identity.sign(signing_payload("progress", mine, data, expiration))
    item = StoreItem("progress", mine, WireValue(data, expiration, forged))
    host = other.state.transport._host  # type: ignore[attr-defined]
    reply = await host.call(reader.peer_id, STORE, StoreRequest([item], False))
    assert reply.accepted == [False]
    found = await reader.get("progress", latest=True)
    assert found is not None
    assert found.value[mine].value == {"samples": 10}


async def test_client_mode_nodes_are_never_routed_to(make_swarm: MakeSwarm) -> None:
    servers = await make_swarm(10)
    (client,) = await make_swarm(1, replace(FAST_DHT, client_mode=True), join=servers)
    assert await client.store("from-client", 1, soon())
    assert (await client.get("from-client")) is not None
    assert (await servers[5].get("from-client")).value == 1  # type: ignore[union-attr]
    for server in servers:
        assert client.peer_id not in server.table
    assert client.storage.get(key_id("from-client")) is None  # clients keep nothing for others


async def test_batched_gets_and_coalesced_stores_share_traversals(make_swarm: MakeSwarm) -> None:
    nodes = await make_swarm(20, replace(FAST_DHT, replicas=3))
    a, b = nodes[0], nodes[13]
    keys = [f"batch-{i}" for i in range(20)]
    before = a.state.stats.sent["find"]
    results = await asyncio.gather(*(a.store(k, k, soon()) for k in keys))
    coalesced = a.state.stats.sent["find"] - before
    assert all(results)
    before = b.state.stats.sent["find"]
    values = await b.get_many(keys, latest=True)
    batched = b.state.stats.sent["find"] - before
    assert [v.value for v in values if v is not None] == keys
    before = b.state.stats.sent["find"]
    for k in keys:
        await b.get(k, latest=True)
    one_by_one = b.state.stats.sent["find"] - before
    assert batched * 2 < one_by_one
    assert coalesced < len(keys) * 3


async def test_bad_bootstrap_is_a_clear_error(make_swarm: MakeSwarm) -> None:
    (node,) = await make_swarm(1)
    ghost = Identity.generate().peer_id
    other = DHTNode(node.state.transport)
    with pytest.raises(DHTError, match="could not reach any initial peer"):
        await other.bootstrap([f"/ip4/127.0.0.1/tcp/9/p2p/{ghost}"])
    with pytest.raises(AddressError, match="names no PeerID"):
        await other.bootstrap(["/ip4/127.0.0.1/tcp/9"])
    with pytest.raises(InvalidRecord, match="already passed"):
        await node.store("k", "v", time.time() - 1)
    stats = node.stats_snapshot()
    for field in ("routing_table_size", "records", "requests_served", "requests_sent"):
        assert field in stats
