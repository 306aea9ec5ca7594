"""A node's local records: expiring values, newer-wins, dictionaries merged per subkey, quotas per source.

Rules (the same for every node, so replicas converge):

- a value is kept until its expiration, or until a value with a *later* expiration replaces it; an
  identical copy (same data, same expiration) is accepted without change, so republishing is harmless;
- a store with an earlier expiration is refused and changes nothing at all (hivemind's storage lets a
  refused store shorten the kept value's life; see the test for that);
- a subkey store turns a plain value into a dictionary only when it expires later than the plain value,
  and a plain store replaces a dictionary only when it expires later than every subkey in it.

Room (``core.dht.quotas`` says why): every value is charged to the ``Source`` that stored it, its bytes
counted with its key's. Whoever holds the most gives way first, and within a holder the values that
expire soonest go first; a value that would itself be the first to go is refused. So:

- a peer over its quota of bytes or values gives way with its own values;
- a network over its quota gives way with the values of its peer that holds the most bytes (so a peer
  sharing a /24 with a flood of fresh identities keeps its few records);
- a full store (``capacity`` records, or ``max_bytes`` over every key, subkey and value held) gives way
  with the network holding the most bytes, not with what expires soonest: a flood of long-lived values
  can push out only its own sender's values, never the short-lived records the swarm depends on;
- a key holds at most ``max_values_per_key`` values; a new subkey in a full key pushes out a value of
  the network holding the most of that key's values, and is refused if that is its own network.

``LOCAL`` (our own stores and caches) has no quota but counts in the store's budget. A store built
without ``quotas`` (merging copies for a reader) applies only the budget and the key's bound.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from core.dht.quotas import LOCAL, Quotas, Source, Tally
from core.dht.records import StoredValue
from core.util.clock import Clock
from core.util.msgpack_codec import pack

_NO_SUBKEY = (
    object()
)  # heap marker for plain values (None is not a subkey, but keep it unambiguous)

ENTRY_OVERHEAD = 256
"""Bytes counted for each key and value beyond its own (Python objects, dict slot, heap entries),
so that the byte budget and the quotas also bound how many tiny values a stranger can make us keep."""

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
"""Far above what a swarm's records need (progress, declarations, experts: a few KiB a peer)."""

DEFAULT_MAX_VALUES_PER_KEY = 4096
"""The widest expert grid's prefix record has one subkey per index (``MAX_GRID_WIDTH``)."""

_HEAP_SLACK = 1024
"""The expiry heap is rebuilt once its entries for replaced values outnumber the live ones by this
much (a value renewed every few seconds would otherwise leave an entry per renewal for a day)."""

_SOURCE_HEAP_SLACK = 16
"""The same for each source's own heap (there are many sources, most holding a few values)."""

_Entry = tuple[float, int, int, Any]
"""A heap entry: (expiration, tie-breaker, key id, subkey or ``_NO_SUBKEY``)."""


@dataclass(slots=True)
class Record:
    """Everything a node holds under one key id."""

    key: Any
    plain: StoredValue | None = None
    subkeys: dict[Any, StoredValue] = field(default_factory=dict)
    key_cost: int = 0
    origins: dict[Any, Source] = field(default_factory=dict)
    """Who stored each value (the plain one under ``_NO_SUBKEY``)."""
    networks: Counter[str] | None = None
    """How many of the subkeys each network stored (made with the first subkey)."""

    @property
    def expiration(self) -> float:
        if self.plain is not None:
            return self.plain.expiration
        return max((v.expiration for v in self.subkeys.values()), default=0.0)

    @property
    def empty(self) -> bool:
        return self.plain is None and not self.subkeys

    def value_at(self, marker: Any) -> StoredValue | None:
        return self.plain if marker is _NO_SUBKEY else self.subkeys.get(marker)


def _key_cost(key: Any) -> int:
    return ENTRY_OVERHEAD + len(pack(key))


def _value_cost(subkey: Any, value: StoredValue) -> int:
    cost = ENTRY_OVERHEAD + len(value.data) + len(value.signature or b"")
    return cost if subkey is None else cost + len(pack(subkey))


def _subkey(marker: Any) -> Any:
    return None if marker is _NO_SUBKEY else marker


class RecordStore:
    """Records by key id, with expiry driven by a heap (entries for replaced values are skipped)."""

    def __init__(
        self,
        clock: Clock,
        capacity: int,
        max_values_per_key: int = DEFAULT_MAX_VALUES_PER_KEY,
        max_bytes: int = DEFAULT_MAX_BYTES,
        quotas: Quotas | None = None,
    ) -> None:
        self._clock = clock
        self.capacity = capacity
        self.max_values_per_key = max_values_per_key
        self.max_bytes = max_bytes
        self.quotas = quotas
        self._records: dict[int, Record] = {}
        self._heap: list[_Entry] = []
        self._counter = 0  # tie-breaker, so the heap never compares subkeys
        self._bytes = 0
        self._values = 0
        self._networks: Tally[str] = Tally()
        self._peers: dict[str, Tally[Source]] = {}  # by network
        self._expiring: dict[Source, list[_Entry]] = {}  # each source's values, soonest first
        self.refused_for_room = 0
        """Values refused (or pushed out at once) by a quota, a full key or a full store."""
        self.evicted = 0
        """Values pushed out to make room for others."""

    def __len__(self) -> int:
        self.expire()
        return len(self._records)

    @property
    def bytes_held(self) -> int:
        """What the held keys, subkeys and values count against ``max_bytes``."""
        return self._bytes

    @property
    def values_held(self) -> int:
        """Plain values and subkeys held, over every record."""
        return self._values

    def held_by(self, source: Source) -> tuple[int, int]:
        """The bytes and values charged to ``source`` (each value with its key's bytes)."""
        tally = self._peers.get(source.network)
        if tally is None:
            return 0, 0
        return tally.bytes.get(source, 0), tally.values.get(source, 0)

    def held_by_network(self, network: str) -> tuple[int, int]:
        """The bytes and values charged to the sources of ``network``."""
        return self._networks.bytes.get(network, 0), self._networks.values.get(network, 0)

    def store(self, key_id: int, key: Any, subkey: Any, value: StoredValue, source: Source) -> bool:
        """Keep ``value`` from ``source`` if the rules allow it; True when it is (or already was) held."""
        now = self._clock.time()
        self.expire(now)
        if value.expiration <= now:
            return False
        record = self._records.get(key_id)
        verdict = "new" if record is None else _verdict(record, subkey, value)
        if verdict != "new":
            return verdict == "held"
        key_cost = _key_cost(key) if record is None else record.key_cost
        if not self._may_hold(source, key_cost + _value_cost(subkey, value)):
            self.refused_for_room += 1
            return False
        if record is None:
            record = Record(key, key_cost=key_cost)
            self._records[key_id] = record
            self._bytes += key_cost
        elif (
            subkey is not None
            and subkey not in record.subkeys
            and len(record.subkeys) >= self.max_values_per_key
            and not self._room_in_key(record, source)
        ):
            self.refused_for_room += 1
            return False
        if subkey is None:
            for marker in list(record.origins):
                self._take(record, marker)
            self._put(key_id, record, _NO_SUBKEY, value, source)
        else:
            if record.plain is not None:
                self._take(record, _NO_SUBKEY)
            if subkey in record.subkeys:
                self._take(record, subkey)
            self._put(key_id, record, subkey, value, source)
        self._counter += 1
        heapq.heappush(self._heap, (value.expiration, self._counter, key_id, _marker(subkey)))
        self._make_room(source)
        self._compact()
        if self._holds(key_id, subkey, value):
            return True
        self.refused_for_room += 1
        return False

    def _may_hold(self, source: Source, charge: int) -> bool:
        """Whether one value of this size could be held at all (alone, within the quotas)."""
        quotas = self.quotas
        if quotas is None or source == LOCAL:
            return True
        return charge <= quotas.peer_bytes and charge <= quotas.network_bytes

    def _room_in_key(self, record: Record, source: Source) -> bool:
        """Make room for one more subkey in a full key: a value of the network holding the most of
        its values goes, unless that is the newcomer's own network (then False)."""
        counts = record.networks
        if not counts:
            return False
        victim, most = max(counts.items(), key=itemgetter(1))
        if counts.get(source.network, 0) >= most:
            return False
        # the victim holds the most of this key's values, so one is found early
        marker = next(m for m, s in record.origins.items() if s.network == victim)
        self._take(record, marker)
        self.evicted += 1
        return True

    def get(self, key_id: int) -> Record | None:
        self.expire()
        return self._records.get(key_id)

    def records(self) -> list[tuple[int, Record]]:
        self.expire()
        return list(self._records.items())

    def expire(self, now: float | None = None) -> None:
        """Drop every value whose expiration has passed."""
        now = self._clock.time() if now is None else now
        heap = self._heap
        while heap and heap[0][0] <= now:
            expiration, _, key_id, marker = heapq.heappop(heap)
            record = self._records.get(key_id)
            if record is not None and _is(record.value_at(marker), expiration):
                self._remove(key_id, record, marker)

    # ---- making room -----------------------------------------------------------------------------

    def _make_room(self, source: Source) -> None:
        """After a store by ``source``: bring it, its network and the whole store back within bounds."""
        quotas = self.quotas
        if quotas is not None and source != LOCAL:
            network = source.network
            while self._over(
                self._peers.get(network), source, quotas.peer_bytes, quotas.peer_values
            ):
                if not self._evict_soonest(source):
                    break
            while self._over(self._networks, network, quotas.network_bytes, quotas.network_values):
                peers = self._peers.get(network)
                largest = peers.largest() if peers is not None else None
                if largest is None or not self._evict_soonest(largest):
                    break
        while len(self._records) > self.capacity or self._bytes > self.max_bytes:
            crowded = self._networks.largest()
            peers = self._peers.get(crowded) if crowded is not None else None
            largest = peers.largest() if peers is not None else None
            if largest is None or not self._evict_soonest(largest):
                break

    @staticmethod
    def _over(tally: Tally[Any] | None, holder: Any, max_bytes: int, max_values: int) -> bool:
        if tally is None:
            return False
        return tally.bytes.get(holder, 0) > max_bytes or tally.values.get(holder, 0) > max_values

    def _evict_soonest(self, source: Source) -> bool:
        """Drop the value of ``source`` that expires soonest; False if it holds none."""
        heap = self._expiring.get(source)
        while heap:
            entry = heapq.heappop(heap)
            record = self._live(entry, source)
            if record is not None:
                self.evicted += 1
                self._remove(entry[2], record, entry[3])
                return True
        return False

    def _live(self, entry: _Entry, source: Source) -> Record | None:
        """The record holding the value a source's heap entry stands for, if it is still there."""
        expiration, _, key_id, marker = entry
        record = self._records.get(key_id)
        if record is None or record.origins.get(marker) != source:
            return None
        return record if _is(record.value_at(marker), expiration) else None

    # ---- accounting ------------------------------------------------------------------------------

    def _put(
        self, key_id: int, record: Record, marker: Any, value: StoredValue, source: Source
    ) -> None:
        if marker is _NO_SUBKEY:
            record.plain = value
        else:
            record.subkeys[marker] = value
            if record.networks is None:
                record.networks = Counter()
            record.networks[source.network] += 1
        record.origins[marker] = source
        cost = _value_cost(_subkey(marker), value)
        self._bytes += cost
        self._values += 1
        self._charge(source, record.key_cost + cost, 1)
        heap = self._expiring.setdefault(source, [])
        self._counter += 1
        heapq.heappush(heap, (value.expiration, self._counter, key_id, marker))
        if len(heap) > 2 * self.held_by(source)[1] + _SOURCE_HEAP_SLACK:
            live = [entry for entry in heap if self._live(entry, source) is not None]
            heapq.heapify(live)
            self._expiring[source] = live

    def _take(self, record: Record, marker: Any) -> None:
        """Take one value out of ``record`` (which stays, even if empty) and uncount it."""
        if marker is _NO_SUBKEY:
            value = record.plain
            record.plain = None
        else:
            value = record.subkeys.pop(marker)
        assert value is not None
        source = record.origins.pop(marker)
        if marker is not _NO_SUBKEY and record.networks is not None:
            record.networks[source.network] -= 1
            if not record.networks[source.network]:
                del record.networks[source.network]
        cost = _value_cost(_subkey(marker), value)
        self._bytes -= cost
        self._values -= 1
        self._charge(source, -(record.key_cost + cost), -1)

    def _charge(self, source: Source, nbytes: int, nvalues: int) -> None:
        network = source.network
        self._networks.add(network, nbytes, nvalues)
        peers = self._peers.get(network)
        if peers is None:
            peers = self._peers[network] = Tally()
        peers.add(source, nbytes, nvalues)
        if source not in peers.values:
            self._expiring.pop(source, None)
            if not len(peers):
                del self._peers[network]

    def _remove(self, key_id: int, record: Record, marker: Any) -> None:
        """Take one value out, and the record with it once it is empty."""
        self._take(record, marker)
        if record.empty:
            # the record object is left as it was: a caller may still be reading it
            del self._records[key_id]
            self._bytes -= record.key_cost

    def _holds(self, key_id: int, subkey: Any, value: StoredValue) -> bool:
        record = self._records.get(key_id)
        if record is None:
            return False
        return (record.plain if subkey is None else record.subkeys.get(subkey)) is value

    def _compact(self) -> None:
        """Rebuild the heap from the live values once replaced ones dominate it."""
        if len(self._heap) <= 2 * self._values + _HEAP_SLACK:
            return
        heap: list[_Entry] = []
        for key_id, record in self._records.items():
            for marker in record.origins:
                value = record.value_at(marker)
                assert value is not None
                self._counter += 1
                heap.append((value.expiration, self._counter, key_id, marker))
        heapq.heapify(heap)
        self._heap = heap


def _marker(subkey: Any) -> Any:
    return _NO_SUBKEY if subkey is None else subkey


def _is(value: StoredValue | None, expiration: float) -> bool:
    return value is not None and value.expiration == expiration


def _verdict(record: Record, subkey: Any, value: StoredValue) -> str:
    """What the rules say of a store into a held record: "held", "refused" or "new"."""
    if subkey is None:
        return _plain_verdict(record, value)
    if record.plain is not None and value.expiration <= record.plain.expiration:
        return "refused"
    return _replacing(record.subkeys.get(subkey), value)


def _plain_verdict(record: Record, value: StoredValue) -> str:
    if record.plain is None:
        # a dictionary gives way only to a plain value that outlives all of it
        return "new" if value.expiration > record.expiration else "refused"
    return _replacing(record.plain, value)


def _replacing(held: StoredValue | None, value: StoredValue) -> str:
    if held is None:
        return "new"
    if held == value:
        return "held"
    return "new" if value.expiration > held.expiration else "refused"
