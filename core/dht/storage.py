"""A node's local records: expiring values, newer-wins, dictionaries merged per subkey.

Rules (the same for every node, so replicas converge):

- a value is kept until its expiration, or until a value with a *later* expiration replaces it; an
  identical copy (same data, same expiration) is accepted without change, so republishing is harmless;
- a store with an earlier expiration is refused and changes nothing at all (hivemind's storage lets a
  refused store shorten the kept value's life; see the test for that);
- a subkey store turns a plain value into a dictionary only when it expires later than the plain value,
  and a plain store replaces a dictionary only when it expires later than every subkey in it;
- when full, the records that expire soonest make room.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from core.dht.records import StoredValue
from core.util.clock import Clock

_NO_SUBKEY = (
    object()
)  # heap marker for plain values (None is not a subkey, but keep it unambiguous)


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


class RecordStore:
    """Records by key id, with expiry driven by a heap (entries for replaced values are skipped)."""

    def __init__(self, clock: Clock, capacity: int, max_subkeys: int = 10_000) -> None:
        self._clock = clock
        self.capacity = capacity
        self.max_subkeys = max_subkeys
        self._records: dict[int, Record] = {}
        self._heap: list[tuple[float, int, int, Any]] = []
        self._counter = 0  # tie-breaker, so the heap never compares subkeys

    def __len__(self) -> int:
        self.expire()
        return len(self._records)

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
        if subkey is None:
            verdict = self._store_plain(record, value)
        else:
            verdict = self._store_subkey(record, subkey, value)
        if verdict == "changed":
            self._counter += 1
            marker = _NO_SUBKEY if subkey is None else subkey
            heapq.heappush(self._heap, (value.expiration, self._counter, key_id, marker))
        elif record.empty:
            del self._records[key_id]
        return verdict != "refused"

    @staticmethod
    def _store_plain(record: Record, value: StoredValue) -> str:
        if record.plain is not None:
            if record.plain == value:
                return "held"
            if value.expiration <= record.plain.expiration:
                return "refused"
        elif record.subkeys and value.expiration <= record.expiration:
            return "refused"
        record.plain = value
        record.subkeys = {}
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
        elif len(record.subkeys) >= self.max_subkeys:
            return "refused"
        record.plain = None
        record.subkeys[subkey] = value
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
        record = self._records.get(key_id)
        if record is None:
            return
        if marker is _NO_SUBKEY:
            if record.plain is not None and record.plain.expiration == expiration:
                record.plain = None
        else:
            held = record.subkeys.get(marker)
            if held is not None and held.expiration == expiration:
                del record.subkeys[marker]
        if record.empty:
            del self._records[key_id]

    def _make_room(self, incoming_expiration: float) -> bool:
        """Evict the record expiring soonest, if it expires before the incoming value would."""
        victim = min(self._records.items(), key=lambda item: item[1].expiration, default=None)
        if victim is None or victim[1].expiration >= incoming_expiration:
            return False
        del self._records[victim[0]]
        return True
