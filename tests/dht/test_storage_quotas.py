"""Storage quotas per source: networks of addresses, tallies, and the accounting staying exact."""

from __future__ import annotations

import random
from typing import Any

import pytest

from core.dht.config import DHTConfig
from core.dht.quotas import LOCAL, Quotas, Source, Tally, network_of, source_of
from core.dht.records import StoredValue
from core.dht.storage import RecordStore, _key_cost, _value_cost
from core.trust.identity import Identity
from core.util.clock import FakeClock
from core.util.errors import ConfigError

QUOTAS = Quotas(peer_bytes=10_000, peer_values=20, network_bytes=25_000, network_values=50)


def value(data: bytes, expires_in: float, clock: FakeClock) -> StoredValue:
    return StoredValue(data, clock.time() + expires_in)


def check_accounting(store: RecordStore) -> None:
    """Every counter equals what the held records add up to."""
    total_bytes = total_values = 0
    by_source: dict[Source, list[int]] = {}
    for _, record in store.records():
        total_bytes += _key_cost(record.key)
        held: list[tuple[Any, StoredValue]] = list(record.subkeys.items())
        if record.plain is not None:
            held.append((None, record.plain))
        assert len(record.origins) == len(held)
        for subkey, stored in held:
            cost = _value_cost(subkey, stored)
            total_bytes += cost
            total_values += 1
            marker = next(
                m for m in record.origins if (m if subkey is not None else None) == subkey
            )
            counts = by_source.setdefault(record.origins[marker], [0, 0])
            counts[0] += _key_cost(record.key) + cost
            counts[1] += 1
    assert (store.bytes_held, store.values_held) == (total_bytes, total_values)
    for source, (nbytes, nvalues) in by_source.items():
        assert store.held_by(source) == (nbytes, nvalues)
    networks: dict[str, list[int]] = {}
    for source, (nbytes, nvalues) in by_source.items():
        counts = networks.setdefault(source.network, [0, 0])
        counts[0] += nbytes
        counts[1] += nvalues
    for network, (nbytes, nvalues) in networks.items():
        assert store.held_by_network(network) == (nbytes, nvalues)


def test_networks_are_slash_24_and_slash_48_and_relayed_peers_are_their_own() -> None:
    assert network_of("203.0.113.77") == "203.0.113.0/24"
    assert network_of("::ffff:203.0.113.77") == "203.0.113.0/24"
    assert network_of("2001:db8:1:2:3::9") == "2001:db8:1::/48"
    assert network_of("fe80::1%eth0") == "fe80::/48"
    assert network_of("relay:x") is None
    peer = Identity.generate().peer_id
    assert source_of(peer, "192.0.2.9") == Source(str(peer), "192.0.2.0/24")
    assert source_of(peer, None) == Source(str(peer), f"peer:{peer}")
    assert source_of(peer, None) != LOCAL


def test_a_tally_finds_the_largest_holder_as_totals_move() -> None:
    tally: Tally[str] = Tally()
    assert tally.largest() is None
    tally.add("a", 100, 1)
    tally.add("b", 50, 1)
    assert tally.largest() == "a"
    tally.add("b", 100, 1)
    assert tally.largest() == "b"
    tally.add("b", -150, -2)  # gone
    assert tally.largest() == "a"
    assert "b" not in tally.bytes
    for i in range(1000):  # stale entries do not pile up
        tally.add("a", 1, 0)
        tally.add(f"n{i % 3}", 1, 1)
    assert len(tally._heap) <= 2 * len(tally) + 64
    assert tally.largest() == "a"


def test_a_peer_over_its_quota_makes_room_with_its_own_soonest_values() -> None:
    clock = FakeClock()
    quotas = Quotas(peer_bytes=15_000, peer_values=20, network_bytes=50_000, network_values=50)
    store = RecordStore(clock, capacity=1000, quotas=quotas)
    peer, other = Source("p", "192.0.2.0/24"), Source("q", "198.51.100.0/24")
    assert store.store(0, "other", None, value(b"o" * 100, 60, clock), other)
    for i in range(30):
        assert store.store(i + 1, f"k{i}", None, value(b"x" * 100, 1000 + i, clock), peer)
    assert store.held_by(peer)[1] == 20  # peer_values
    assert store.get(1) is None  # the soonest of its own went
    assert store.get(30) is not None
    assert store.get(0) is not None  # nobody else's
    # a value expiring before all it holds would be the first to go: refused
    assert not store.store(99, "early", None, value(b"x" * 100, 10, clock), peer)
    assert store.refused_for_room == 1
    # one value larger than the quota is refused outright, changing nothing
    held = store.held_by(peer)
    assert not store.store(98, "huge", None, value(b"x" * 20_000, 5000, clock), peer)
    assert store.held_by(peer) == held
    check_accounting(store)


def test_our_own_values_have_no_quota() -> None:
    clock = FakeClock()
    store = RecordStore(clock, capacity=1000, quotas=QUOTAS)
    for i in range(100):
        assert store.store(i, f"k{i}", None, value(b"x" * 200, 100, clock), LOCAL)
    assert store.held_by(LOCAL)[1] == 100


def test_replacing_a_value_moves_its_charge_to_the_new_source() -> None:
    clock = FakeClock()
    store = RecordStore(clock, capacity=10, quotas=QUOTAS)
    first, second = Source("p", "192.0.2.0/24"), Source("q", "198.51.100.0/24")
    assert store.store(1, "k", "s", value(b"a", 10, clock), first)
    assert store.store(1, "k", "s", value(b"a", 10, clock), second)  # an identical copy: no change
    assert store.held_by(first)[1] == 1
    assert store.store(1, "k", "s", value(b"b", 20, clock), second)
    assert store.held_by(first) == (0, 0)
    assert store.held_by(second)[1] == 1
    assert store.store(1, "k", None, value(b"plain", 30, clock), first)  # replaces the dictionary
    assert store.held_by(second) == (0, 0)
    check_accounting(store)
    clock.advance(31)
    assert len(store) == 0
    assert store.held_by(first) == (0, 0)
    assert store.held_by_network(first.network) == (0, 0)


def test_the_accounting_stays_exact_under_random_stores_expiry_and_eviction() -> None:
    rng = random.Random(7)
    clock = FakeClock()
    store = RecordStore(clock, capacity=60, max_values_per_key=5, max_bytes=40_000, quotas=QUOTAS)
    sources = [Source(f"p{i}", f"192.0.{i % 4}.0/24") for i in range(12)] + [LOCAL]
    for step in range(4000):
        kid = rng.randrange(80)
        subkey = rng.choice([None, "a", "b", "c", "d", "e", "f", "g"])
        data = b"x" * rng.choice([10, 100, 1000, 3000])
        store.store(
            kid, f"k{kid}", subkey, value(data, rng.uniform(1, 100), clock), rng.choice(sources)
        )
        if step % 10 == 0:
            clock.advance(rng.uniform(0, 3))
        if step % 200 == 0:
            check_accounting(store)
        assert store.bytes_held <= 40_000
        assert len(store._records) <= 60
        for source in sources[:-1]:
            nbytes, nvalues = store.held_by(source)
            assert nbytes <= QUOTAS.peer_bytes
            assert nvalues <= QUOTAS.peer_values
        for network in {s.network for s in sources if s != LOCAL}:
            nbytes, nvalues = store.held_by_network(network)
            assert nbytes <= QUOTAS.network_bytes
            assert nvalues <= QUOTAS.network_values
    check_accounting(store)
    clock.advance(200)
    assert len(store) == 0
    assert (store.bytes_held, store.values_held) == (0, 0)
    assert not store._peers
    assert not store._expiring
    assert not len(store._networks)


def test_the_config_keeps_quotas_consistent() -> None:
    config = DHTConfig()
    assert config.peer_quota_bytes < config.network_quota_bytes < config.storage_bytes
    with pytest.raises(ConfigError):
        DHTConfig(peer_quota_bytes=64 * 1024)  # below one largest value
    with pytest.raises(ConfigError):
        DHTConfig(peer_quota_bytes=64 * 2**20)  # above its network's
    with pytest.raises(ConfigError):
        DHTConfig(peer_quota_values=100_000)
