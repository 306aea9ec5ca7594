"""Churn, maintenance, caching and hostile nodes, on real loopback connections."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import replace

from core.dht import owner_marker
from core.dht.ids import key_id, node_id
from core.dht.messages import FindRequest, FindResponse, FoundRecord, WireSubkey, WireValue
from core.dht.records import InvalidRecord
from core.dht.serving import RequestServer
from core.dht.transport import Caller
from core.dht.validation import RecordSchema
from core.net import Host
from core.util.msgpack_codec import unpack
from tests.dht.conftest import FAST_DHT, MakeSwarm
from tests.support.leaks import wait_until


def soon(seconds: float = 120.0) -> float:
    return time.time() + seconds


def host_of(node: object) -> Host:
    return node.state.transport._host  # type: ignore[attr-defined, no-any-return]


async def test_churn_loses_no_record(make_swarm: MakeSwarm) -> None:
    nodes = await make_swarm(60, seed=7)
    rng = random.Random(7)
    keys = [f"churn-{i}" for i in range(40)]
    for i, key in enumerate(keys):
        assert await rng.choice(nodes).store(key, i, soon())
    lost = rng.sample(nodes, 18)  # 30 % of the swarm goes away at once
    for node in lost:
        await node.close()
        await host_of(node).close()
    survivors = [n for n in nodes if n not in lost]
    for i, key in enumerate(keys):
        found = await rng.choice(survivors).get(key, latest=True)
        assert found is not None, key
        assert found.value == i, key


async def test_dead_contacts_are_evicted(make_swarm: MakeSwarm) -> None:
    nodes = await make_swarm(6)
    watcher, victim = nodes[0], nodes[3]
    assert victim.peer_id in watcher.table
    await victim.close()
    await host_of(victim).close()
    for _ in range(3):
        await watcher.find_nodes(node_id(victim.peer_id))
    assert victim.peer_id not in watcher.table


async def test_owners_republish_after_the_holders_leave(make_swarm: MakeSwarm) -> None:
    config = replace(FAST_DHT, replicas=2, republish_interval=0.3, refresh_interval=3600)
    nodes = await make_swarm(10, config)
    owner = nodes[0]
    assert await owner.store("kept-alive", "v", soon())
    kid = key_id("kept-alive")
    await wait_until(lambda: sum(n.storage.get(kid) is not None for n in nodes) == 2)
    holders = [n for n in nodes if n is not owner and n.storage.get(kid) is not None]
    assert holders
    for node in holders:
        await node.close()
        await host_of(node).close()
    others = [n for n in nodes if n is not owner and n not in holders]
    await wait_until(lambda: any(n.storage.get(kid) is not None for n in others))


async def test_idle_buckets_are_refreshed(make_swarm: MakeSwarm) -> None:
    config = replace(FAST_DHT, refresh_interval=0.3, republish_interval=3600)
    nodes = await make_swarm(5, config)
    before = nodes[2].state.stats.sent["find"]
    await wait_until(lambda: nodes[2].state.stats.sent["find"] > before + 2)


class Slow(RequestServer):
    """Answers finds after a pause, so that other nodes' answers arrive first."""

    async def on_find(self, caller: Caller, request: FindRequest) -> FindResponse:
        await asyncio.sleep(0.3)
        return await super().on_find(caller, request)


async def test_values_found_are_cached_along_the_path(make_swarm: MakeSwarm) -> None:
    nodes = await make_swarm(20, replace(FAST_DHT, replicas=2))
    kid = key_id("popular")
    assert await nodes[0].store("popular", "v", soon())
    # store() returns at the quorum; wait until both copies are placed
    await wait_until(lambda: sum(n.storage.get(kid) is not None for n in nodes) == 2)
    holders = [n for n in nodes if n.storage.get(kid) is not None]
    for holder in holders:  # nodes without the value answer first, so the lookup passes them
        holder.state.transport.unserve()
        holder.state.transport.serve(Slow(holder.state, holder.contacts))
    reader = next(n for n in nodes if n not in holders and n is not nodes[0])
    assert (await reader.get("popular")) is not None
    assert reader.state.cache.get(kid) is not None
    others = [n for n in nodes if n is not reader and n not in holders]
    await wait_until(lambda: any(n.state.cache.get(kid) is not None for n in others))


class Tamperer(RequestServer):
    """Answers finds with every value's bytes changed."""

    async def on_find(self, caller: Caller, request: FindRequest) -> FindResponse:
        response = await super().on_find(caller, request)
        results = []
        for result in response.results:
            record = result.record
            if record is not None:
                record = FoundRecord(
                    None,
                    [
                        WireSubkey(
                            e.subkey, WireValue(b"\xa4fake", e.value.expiration, e.value.signature)
                        )
                        for e in record.subkeys
                    ],
                )
            results.append(replace(result, record=record))
        return FindResponse(results)


class Babbler(RequestServer):
    """Answers finds with the wrong number of results."""

    async def on_find(self, caller: Caller, request: FindRequest) -> FindResponse:
        return FindResponse([])


async def test_a_node_that_tampers_with_records_is_ignored(make_swarm: MakeSwarm) -> None:
    nodes = await make_swarm(6)
    liar, owner, reader = nodes[2], nodes[0], nodes[4]
    mine = owner_marker(owner.peer_id)
    assert await owner.store("signed", {"loss": 1.5}, soon(), subkey=mine)
    liar.state.transport.unserve()
    liar.state.transport.serve(Tamperer(liar.state, liar.contacts))
    found = await reader.get("signed", latest=True)
    assert found is not None
    assert found.value[mine].value == {"loss": 1.5}
    assert reader.contacts.penalties.is_banned(liar.peer_id)
    assert liar.peer_id not in reader.table
    assert reader.state.stats.garbage_answers >= 1


async def test_a_node_that_answers_garbage_is_dropped(make_swarm: MakeSwarm) -> None:
    nodes = await make_swarm(6)
    babbler, asker = nodes[1], nodes[5]
    babbler.state.transport.unserve()
    babbler.state.transport.serve(Babbler(babbler.state, babbler.contacts))
    await asker.find_nodes(node_id(babbler.peer_id))
    assert asker.contacts.penalties.is_banned(babbler.peer_id)
    assert babbler.peer_id not in asker.table
    assert await asker.store("still-works", 1, soon())
    assert (await nodes[0].get("still-works", latest=True)) is not None


async def test_nodes_without_the_readers_rules_are_not_blamed_for_what_only_those_refuse(
    make_swarm: MakeSwarm,
) -> None:
    nodes = await make_swarm(6)
    reader, stranger = nodes[5], nodes[1]

    def refuse_the_beast(key: object, subkey: object, data: bytes, signer: object) -> None:
        if unpack(data) == 666:
            raise InvalidRecord("not in this project")

    reader.rules.add_schema(RecordSchema("strict", "strict.", authorize_entry=refuse_the_beast))
    assert await stranger.store("strict.x", 1, soon(), subkey="honest")
    assert await stranger.store("strict.x", 666, soon(), subkey="beast")  # the others keep it
    found = await reader.get("strict.x", latest=True)
    assert found is not None
    assert {k: v.value for k, v in found.value.items()} == {"honest": 1}
    assert reader.contacts.penalties.banned_count() == 0
    assert reader.state.stats.garbage_answers == 0
    assert reader.state.stats.refused_records >= 1
