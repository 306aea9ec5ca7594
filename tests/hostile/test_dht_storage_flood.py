"""Strangers storing large, day-long values cannot push the swarm's records out of a DHT node.

Seen on real processes: a client stored 300 values of 0.9 MB with a 24 h expiry at a backbone node in
20 s; its memory grew by 271 MB and an honest record with a 10-minute life, stored earlier, was
evicted (a full store made room with what expires soonest). Each value is now charged to its sender
and its sender's network, and a full store makes its largest holder give way.
"""

from __future__ import annotations

import time

from core.dht import DHTConfig, DHTNode, HostTransport
from core.dht.config import MiB
from core.dht.ids import key_id
from core.dht.memory import MemoryNetwork
from core.dht.messages import STORE, StoreItem, StoreRequest, WireValue
from core.dht.quotas import Quotas, Source
from core.dht.records import StoredValue
from core.dht.storage import RecordStore
from core.net import NetConfig
from core.util.clock import FakeClock
from core.util.msgpack_codec import pack
from tests.conftest import MakeHost

DAY = 24 * 3600.0
BIG = pack(b"x" * 900_000)  # one 0.9 MB value, shared by every store (no memory per copy)
QUIET_NET = NetConfig(dial_timeout=20.0, handshake_timeout=20.0, call_timeout=20.0, close_grace=0.2)
DEFAULTS = DHTConfig()
QUOTAS = Quotas(
    DEFAULTS.peer_quota_bytes,
    DEFAULTS.peer_quota_values,
    DEFAULTS.network_quota_bytes,
    DEFAULTS.network_quota_values,
)


def honest(clock: FakeClock) -> StoredValue:
    return StoredValue(pack({"samples": 1234, "epoch": 7}), clock.time() + 600)


def flood_value(clock: FakeClock) -> StoredValue:
    return StoredValue(BIG, clock.time() + DAY - 60)


# ---- (a) one peer, real nodes over loopback --------------------------------------------------------


async def test_a_flood_from_one_peer_leaves_the_honest_record_and_stays_within_its_quota(
    make_host: MakeHost,
) -> None:
    """The seen attack at a smaller scale: the backbone's store is made small enough (24 MiB) that
    the flood would fill it, so without quotas the 10-minute record would be what makes room.

    The flooder and the honest peer both come from 127.0.0.1, one network: the flooder's own quota
    binds first, and its own soonest-expiring values make room for its new ones."""
    config = DHTConfig(
        rpc_timeout=20.0,
        lookup_timeout=30.0,
        storage_bytes=24 * MiB,
        peer_quota_bytes=4 * MiB,
        network_quota_bytes=8 * MiB,
    )
    backbone = DHTNode(HostTransport(await make_host(QUIET_NET)), config)
    client_config = DHTConfig(rpc_timeout=20.0, lookup_timeout=30.0, client_mode=True)
    peer = DHTNode(HostTransport(await make_host(QUIET_NET)), client_config)
    flooder = await make_host(QUIET_NET)
    nodes = [backbone, peer]
    try:
        await backbone.start()
        address = backbone.state.transport.addresses()[0]
        await peer.start([address])
        assert await peer.store("progress", {"samples": 1234}, time.time() + 600)
        honest_bytes = backbone.storage.bytes_held

        expiration = time.time() + DAY - 60
        for batch in range(10):  # 40 values of 0.9 MB, four to a request
            items = [
                StoreItem(f"flood-{batch}-{i}", None, WireValue(BIG, expiration + batch))
                for i in range(4)
            ]
            response = await flooder.call(address, STORE, StoreRequest(items, client=True))
            assert len(response.accepted) == 4
            assert backbone.storage.bytes_held <= config.peer_quota_bytes + honest_bytes

        flooder_source = Source(str(flooder.peer_id), "127.0.0.0/24")
        flood_bytes, flood_values = backbone.storage.held_by(flooder_source)
        assert 0 < flood_bytes <= config.peer_quota_bytes  # charged by the address seen: 127.0.0.1
        assert flood_values <= 4
        assert backbone.state.storage.evicted >= 36
        found = await peer.get("progress")
        assert found is not None
        assert found.value == {"samples": 1234}
        assert backbone.storage.get(key_id("progress")) is not None
    finally:
        for node in nodes:
            await node.close()


# ---- (b) many identities in one /24 --------------------------------------------------------------


async def test_a_flood_of_fresh_identities_from_one_network_is_bounded_by_its_quota() -> None:
    """300 PeerIDs in 203.0.113.0/24, each storing two 0.9 MB day-long values through the in-memory
    network (the requests go through ``on_store``, which takes the network from the caller's
    address). A peer in another network and one inside the flooded /24 keep their records."""
    network = MemoryNetwork()
    backbone = DHTNode(network.transport(ip="192.0.2.1"), DHTConfig())
    outsider = network.transport(ip="198.51.100.20")
    neighbour = network.transport(ip="203.0.113.250")  # shares the flooders' /24
    await backbone.start()
    try:
        contact = backbone.contacts.make(
            backbone.peer_id, tuple(backbone.state.transport.addresses())
        )
        now = time.time()
        for who, key in ((outsider, "outsider"), (neighbour, "neighbour")):
            item = StoreItem(key, None, WireValue(pack("progress"), now + 600))
            assert (await who.store(contact, StoreRequest([item], True), 5.0)).accepted == [True]
        honest_bytes = backbone.storage.bytes_held
        for n in range(300):
            flooder = network.transport(ip=f"203.0.113.{n % 200 + 1}")
            items = [
                StoreItem(f"flood-{n}-{i}", None, WireValue(BIG, now + DAY - 60)) for i in range(2)
            ]
            await flooder.store(contact, StoreRequest(items, True), 5.0)
        held, values = backbone.storage.held_by_network("203.0.113.0/24")
        assert held <= DEFAULTS.network_quota_bytes
        assert backbone.storage.bytes_held <= DEFAULTS.network_quota_bytes + honest_bytes
        assert values < 2 * 300
        assert backbone.storage.get(key_id("outsider")) is not None
        assert backbone.storage.get(key_id("neighbour")) is not None
    finally:
        await backbone.close()


# ---- (c) a full store: the largest holder gives way ------------------------------------------------


def test_a_full_store_evicts_its_largest_holder_not_the_soonest_expiring_records() -> None:
    clock = FakeClock()
    store = RecordStore(clock, capacity=100_000, max_bytes=64 * MiB, quotas=QUOTAS)
    # the swarm's records: 50 peers in 50 networks, ten-minute progress records
    swarm = [Source(f"peer{i}", f"10.{i}.0.0/24") for i in range(50)]
    for i, source in enumerate(swarm):
        assert store.store(i, f"progress-{i}", None, honest(clock), source)
    # flooders in 8 networks, each up to its quota: together more than the store holds
    for n in range(8 * 40):
        source = Source(f"flooder{n}", f"203.0.{n % 8}.0/24")
        store.store(1000 + n, f"flood-{n}", None, flood_value(clock), source)
        clock.advance(0.01)
        assert store.bytes_held <= 64 * MiB
    assert store.evicted > 0
    for i in range(len(swarm)):
        assert store.get(i) is not None  # every honest record is still there
    # a newcomer's store into the full store pushes out the largest holder's value
    flooded = [f"203.0.{n}.0/24" for n in range(8)]

    def largest_network() -> str:
        return max(flooded, key=lambda network: store.held_by_network(network)[0])

    largest = largest_network()
    before = store.held_by_network(largest)[0]
    assert store.store(5000, "late", None, flood_value(clock), Source("new", "192.0.2.0/24"))
    assert store.held_by_network(largest)[0] < before
    # the largest holder's own store takes room from itself, never from the others
    largest = largest_network()
    others = {network: store.held_by_network(network) for network in flooded if network != largest}
    store.store(5001, "more", None, flood_value(clock), Source("again", largest))
    assert {network: store.held_by_network(network) for network in others} == others
    for i in range(len(swarm)):
        assert store.get(i) is not None


# ---- (d) values per key ------------------------------------------------------------------------------


def test_a_key_holds_a_bounded_number_of_values_and_a_flood_cannot_lock_others_out() -> None:
    clock = FakeClock()
    store = RecordStore(clock, capacity=100_000, quotas=QUOTAS)
    limit = DEFAULTS.max_values_per_key
    for n in range(limit + 1000):  # one peer per subkey, all in one /24
        source = Source(f"sybil{n}", "203.0.113.0/24")
        store.store(1, "progress", f"[owner:sybil{n}]", honest(clock), source)
    record = store.get(1)
    assert record is not None
    assert len(record.subkeys) == limit
    # an honest peer elsewhere still gets its subkey in: a sybil's value makes room
    assert store.store(1, "progress", "[owner:me]", honest(clock), Source("me", "192.0.2.0/24"))
    record = store.get(1)
    assert record is not None
    assert "[owner:me]" in record.subkeys
    assert len(record.subkeys) == limit
    # and the flooding network cannot push it out again: its own network holds the most
    assert not store.store(1, "progress", "extra", honest(clock), Source("x", "203.0.113.0/24"))
    assert "[owner:me]" in record.subkeys
