"""A node's local records: expiring values, newer-wins, dictionaries merged per subkey.

Rules (the same for every node, so replicas converge):

- a value is kept until its expiration, or until a value with a *later* expiration replaces it; an
  identical copy (same data, same expiration) is accepted without change, so republishing is harmless;
- a store with an earlier expiration is refused and changes nothing at all (hivemind's storage lets a
  refused store shorten the kept value's life; see the test for that);
- a subkey store turns a plain value into a dictionary only when it expires later than the plain value,
  and a plain store replaces a dictionary only when it expires later than every subkey in it;
- when full, the records that expire soonest make room: full is ``capacity`` records, or ``max_bytes``
  over every key, subkey and value held (which strangers' stores could otherwise grow without end).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from core.dht.records import StoredValue
from core.util.clock import Clock
from core.util.msgpack_codec import pack

_NO_SUBKEY = (
    object()
)  # heap marker for plain values (None is not a subkey, but keep it unambiguous)

ENTRY_OVERHEAD = 256
"""Bytes counted for each key and value beyond its own (Python objects, dict slot, heap entry), so
that the byte budget also bounds how many tiny values a stranger can make us keep."""

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
"""Far above what a swarm's records need (progress, declarations, experts: a few KiB a peer)."""

_HEAP_SLACK = 1024
"""The expiry heap is rebuilt once its entries for replaced values outnumber the live ones by this
much (a value renewed every few seconds would otherwise leave an entry per renewal for a day)."""


@dataclass(slots=True)
class Record:
    """Everything a node holds under one key id."""

    key: Any
    plain: StoredValue | None = None
    subkeys: dict[Any, StoredValue] = field(default_factory=dict)

    @property
    def expiration(self) -> float:
        if self.plain is not None:
            return self.plain.expiration
        return max((v.expiration for v in self.subkeys.values()), default=0.0)

    @property
    def empty(self) -> bool:
        return self.plain is None and not self.subkeys


def _key_cost(key: Any) -> int:
    return ENTRY_OVERHEAD + len(pack(key))


def _value_cost(subkey: Any, value: StoredValue) -> int:
    cost = ENTRY_OVERHEAD + len(value.data) + len(value.signature or b"")
    return cost if subkey is None else cost + len(pack(subkey))


class RecordStore:
    """Records by key id, with expiry driven by a heap (entries for replaced values are skipped)."""

    def __init__(
        self,
        clock: Clock,
        capacity: int,
        max_subkeys: int = 10_000,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self._clock = clock
        self.capacity = capacity
        self.max_subkeys = max_subkeys
        self.max_bytes = max_bytes
        self._records: dict[int, Record] = {}
        self._heap: list[tuple[float, int, int, Any]] = []
        self._counter = 0  # tie-breaker, so the heap never compares subkeys
        self._bytes = 0
        self._values = 0

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

    def store(self, key_id: int, key: Any, subkey: Any, value: StoredValue) -> bool:
        """Keep ``value`` if the rules allow it; True when it is (or already was) held."""
        now = self._clock.time()
        self.expire(now)
        if value.expiration <= now:
            return False
        record = self._records.get(key_id)
        if record is None:
            if len(self._records) >= self.capacity and not self._make_room(value.expiration):
                return False
            record = Record(key)
            self._records[key_id] = record
            self._bytes += _key_cost(key)
        if subkey is None:
            verdict = self._store_plain(record, value)
        else:
            verdict = self._store_subkey(record, subkey, value)
        if verdict == "changed":
            self._counter += 1
            marker = _NO_SUBKEY if subkey is None else subkey
            heapq.heappush(self._heap, (value.expiration, self._counter, key_id, marker))
            if self._bytes > self.max_bytes:
                self._shrink()
                return self._holds(key_id, subkey, value)
            self._compact()
        elif record.empty:
            self._delete(key_id)
        return verdict != "refused"

    def _store_plain(self, record: Record, value: StoredValue) -> str:
        if record.plain is not None:
            if record.plain == value:
                return "held"
            if value.expiration <= record.plain.expiration:
                return "refused"
        elif record.subkeys and value.expiration <= record.expiration:
            return "refused"
        self._uncount_values(record)
        record.plain = value
        record.subkeys = {}
        self._count(None, value, +1)
        return "changed"

    def _store_subkey(self, record: Record, subkey: Any, value: StoredValue) -> str:
        if record.plain is not None and value.expiration <= record.plain.expiration:
            return "refused"
        held = record.subkeys.get(subkey)
        if held is not None:
            if held == value:
                return "held"
            if value.expiration <= held.expiration:
                return "refused"
            self._count(subkey, held, -1)
        elif len(record.subkeys) >= self.max_subkeys:
            return "refused"
        if record.plain is not None:
            self._count(None, record.plain, -1)
            record.plain = None
        record.subkeys[subkey] = value
        self._count(subkey, value, +1)
        return "changed"

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
            self._drop(key_id, marker, expiration)

    def _drop(self, key_id: int, marker: Any, expiration: float) -> None:
        """Drop the value a heap entry stands for, unless a newer one replaced it since."""
        record = self._records.get(key_id)
        if record is None:
            return
        if marker is _NO_SUBKEY:
            if record.plain is not None and record.plain.expiration == expiration:
                self._count(None, record.plain, -1)
                record.plain = None
        else:
            held = record.subkeys.get(marker)
            if held is not None and held.expiration == expiration:
                self._count(marker, held, -1)
                del record.subkeys[marker]
        if record.empty:
            self._delete(key_id)

    def _make_room(self, incoming_expiration: float) -> bool:
        """Evict the record expiring soonest, if it expires before the incoming value would."""
        victim = min(self._records.items(), key=lambda item: item[1].expiration, default=None)
        if victim is None or victim[1].expiration >= incoming_expiration:
            return False
        self._delete(victim[0])
        return True

    def _shrink(self) -> None:
        """Over ``max_bytes``: drop the values that expire soonest (the newest one may be among
        them) until the rest fits."""
        heap = self._heap
        while heap and self._bytes > self.max_bytes:
            expiration, _, key_id, marker = heapq.heappop(heap)
            self._drop(key_id, marker, expiration)

    def _holds(self, key_id: int, subkey: Any, value: StoredValue) -> bool:
        record = self._records.get(key_id)
        if record is None:
            return False
        return (record.plain if subkey is None else record.subkeys.get(subkey)) is value

    def _compact(self) -> None:
        """Rebuild the heap from the live values once replaced ones dominate it."""
        if len(self._heap) <= 2 * self._values + _HEAP_SLACK:
            return
        heap: list[tuple[float, int, int, Any]] = []
        for key_id, record in self._records.items():
            if record.plain is not None:
                self._counter += 1
                heap.append((record.plain.expiration, self._counter, key_id, _NO_SUBKEY))
            for subkey, value in record.subkeys.items():
                self._counter += 1
                heap.append((value.expiration, self._counter, key_id, subkey))
        heapq.heapify(heap)
        self._heap = heap

    def _delete(self, key_id: int) -> None:
        # the record object is left as it was: a caller may still be reading it
        record = self._records.pop(key_id)
        self._uncount_values(record)
        self._bytes -= _key_cost(record.key)

    def _uncount_values(self, record: Record) -> None:
        if record.plain is not None:
            self._count(None, record.plain, -1)
        for subkey, value in record.subkeys.items():
            self._count(subkey, value, -1)

    def _count(self, subkey: Any, value: StoredValue, sign: int) -> None:
        self._bytes += sign * _value_cost(subkey, value)
        self._values += sign
