"""Local record storage under a fake clock."""

from __future__ import annotations

from core.dht.quotas import Source
from core.dht.records import StoredValue
from core.dht.storage import RecordStore
from core.util.clock import FakeClock

PEER = Source("12D3KooWpeer", "192.0.2.0/24")


def value(data: bytes, expires_in: float, clock: FakeClock) -> StoredValue:
    return StoredValue(data, clock.time() + expires_in)


def test_values_expire() -> None:
    clock = FakeClock()
    store = RecordStore(clock, capacity=10)
    assert store.store(1, "k", None, value(b"v", 10, clock), PEER)
    clock.advance(9.9)
    assert store.get(1) is not None
    clock.advance(0.2)
    assert store.get(1) is None
    assert len(store) == 0


def test_newer_wins_and_older_is_refused() -> None:
    clock = FakeClock()
    store = RecordStore(clock, capacity=10)
    assert store.store(1, "k", None, value(b"old", 10, clock), PEER)
    assert store.store(1, "k", None, value(b"new", 20, clock), PEER)
    assert not store.store(1, "k", None, value(b"older", 15, clock), PEER)
    record = store.get(1)
    assert record is not None
    assert record.plain is not None
    assert record.plain.data == b"new"


def test_an_identical_copy_is_accepted_without_change() -> None:
    clock = FakeClock()
    store = RecordStore(clock, capacity=10)
    copy = value(b"v", 10, clock)
    assert store.store(1, "k", None, copy, PEER)
    assert store.store(1, "k", None, copy, PEER)  # republishing is harmless
    assert not store.store(1, "k", None, StoredValue(b"other", copy.expiration), PEER)


def test_a_refused_store_does_not_shorten_the_kept_value() -> None:
    """hivemind 1.1.12 evicts the kept value when a refused, earlier-expiring store's time passes."""
    clock = FakeClock()
    store = RecordStore(clock, capacity=10)
    assert store.store(1, "k", None, value(b"new", 100, clock), PEER)
    assert not store.store(1, "k", None, value(b"old", 1, clock), PEER)
    clock.advance(1.5)
    record = store.get(1)
    assert record is not None
    assert record.plain is not None
    assert record.plain.data == b"new"


def test_subkeys_merge_and_expire_one_by_one() -> None:
    clock = FakeClock()
    store = RecordStore(clock, capacity=10)
    assert store.store(1, "k", "a", value(b"a1", 10, clock), PEER)
    assert store.store(1, "k", "b", value(b"b1", 20, clock), PEER)
    assert not store.store(1, "k", "a", value(b"a0", 5, clock), PEER)
    assert store.store(1, "k", "a", value(b"a2", 15, clock), PEER)
    record = store.get(1)
    assert record is not None
    assert {s: v.data for s, v in record.subkeys.items()} == {"a": b"a2", "b": b"b1"}
    assert record.expiration == clock.time() + 20
    clock.advance(16)
    record = store.get(1)
    assert record is not None
    assert set(record.subkeys) == {"b"}


def test_plain_and_dictionary_values_replace_each_other_only_when_newer() -> None:
    clock = FakeClock()
    store = RecordStore(clock, capacity=10)
    assert store.store(1, "k", None, value(b"plain", 10, clock), PEER)
    assert not store.store(1, "k", "s", value(b"sub", 5, clock), PEER)
    assert store.store(1, "k", "s", value(b"sub", 15, clock), PEER)
    record = store.get(1)
    assert record is not None
    assert record.plain is None
    assert set(record.subkeys) == {"s"}
    # the dictionary lives to 15
    assert not store.store(1, "k", None, value(b"plain2", 12, clock), PEER)
    assert store.store(1, "k", None, value(b"plain3", 30, clock), PEER)
    record = store.get(1)
    assert record is not None
    assert record.plain is not None
    assert not record.subkeys


def test_expired_values_are_refused_and_full_stores_evict_the_soonest() -> None:
    """With one source, the largest holder is that source: its values expiring soonest make room."""
    clock = FakeClock()
    store = RecordStore(clock, capacity=2)
    assert not store.store(1, "k", None, value(b"late", -1, clock), PEER)
    assert store.store(1, "a", None, value(b"a", 10, clock), PEER)
    assert store.store(2, "b", None, value(b"b", 20, clock), PEER)
    # evicts "a", the soonest to expire
    assert store.store(3, "c", None, value(b"c", 30, clock), PEER)
    assert store.get(1) is None
    assert store.get(2) is not None
    assert store.get(3) is not None
    # expires before everything held
    assert not store.store(4, "d", None, value(b"d", 5, clock), PEER)


def test_a_byte_budget_bounds_what_strangers_can_make_us_keep() -> None:
    """Keys are capped by ``capacity``, but thousands of subkeys a key and large values are not: the
    byte budget is, and (all from one source here) the values that expire soonest make room."""
    clock = FakeClock()
    store = RecordStore(clock, capacity=1_000_000, max_bytes=200_000)
    for i in range(10_000):
        assert store.store(
            i % 7, f"key{i % 7}", f"sub{i}", value(b"x" * 100, 1000 + i, clock), PEER
        )
        assert store.bytes_held <= 200_000
    assert store.values_held < 10_000 // 10
    newest = store.get(9_999 % 7)
    assert newest is not None
    assert "sub9999" in newest.subkeys  # the latest-expiring values are the ones kept
    # a value expiring before everything held does not push anything out
    assert not store.store(99, "other", None, value(b"y" * 100, 10, clock), PEER)
    assert store.get(99) is None


def test_the_byte_count_follows_expiry_and_replacement() -> None:
    clock = FakeClock()
    store = RecordStore(clock, capacity=10)
    assert store.store(1, "k", None, value(b"plain", 10, clock), PEER)
    # turns the record into a dictionary
    assert store.store(1, "k", "a", value(b"a", 20, clock), PEER)
    assert store.store(1, "k", "b", value(b"b", 30, clock), PEER)
    assert store.store(1, "k", "a", value(b"a2", 25, clock), PEER)
    assert store.values_held == 2
    assert store.store(1, "k", None, value(b"plain2", 40, clock), PEER)
    assert store.values_held == 1
    clock.advance(41)
    assert len(store) == 0
    assert (store.bytes_held, store.values_held) == (0, 0)


def test_the_expiry_heap_does_not_grow_with_renewals() -> None:
    """A value renewed every second for a day leaves no heap entry per renewal behind."""
    clock = FakeClock()
    store = RecordStore(clock, capacity=10)
    for _ in range(20_000):
        assert store.store(1, "k", "s", value(b"v", 86_400, clock), PEER)
        clock.advance(1.0)
    assert store.values_held == 1
    assert len(store._heap) <= 2 * store.values_held + 1024
    clock.advance(86_400)
    assert store.get(1) is None
    assert not store._heap
