"""Combining copies of a record from several nodes by the storage rules, and turning them into results.

The merging stores are a reader's scratch space for one key: no quota applies to them.
"""

from __future__ import annotations

from typing import Any

from core.dht.ids import key_id
from core.dht.messages import FoundRecord, WireSubkey, WireValue
from core.dht.quotas import LOCAL
from core.dht.records import InvalidRecord, StoredValue, ValueWithExpiration, check_subkey
from core.dht.storage import Record, RecordStore
from core.util.clock import Clock
from core.util.msgpack_codec import unpack


def merge_record(
    clock: Clock, merged: RecordStore | None, record: Record | None
) -> RecordStore | None:
    """Add a locally held record to ``merged`` (created on first use)."""
    if record is None:
        return merged
    merged = merged or RecordStore(clock, capacity=1)
    kid = key_id(record.key)
    if record.plain is not None:
        merged.store(kid, record.key, None, record.plain, LOCAL)
    for subkey, value in record.subkeys.items():
        merged.store(kid, record.key, subkey, value, LOCAL)
    return merged


def merge_found(
    clock: Clock, merged: RecordStore | None, key: Any, kid: int, found: FoundRecord
) -> RecordStore:
    """Add a record another node returned (already validated) to ``merged``."""
    merged = merged or RecordStore(clock, capacity=1)
    if found.plain is not None:
        merged.store(kid, key, None, found.plain.stored(), LOCAL)
    for entry in found.subkeys:
        try:
            check_subkey(entry.subkey)
        except InvalidRecord:
            continue
        merged.store(kid, key, entry.subkey, entry.value.stored(), LOCAL)
    return merged


def to_result(merged: RecordStore | None, kid: int) -> ValueWithExpiration | None:
    record = merged.get(kid) if merged is not None else None
    if record is None:
        return None
    if record.plain is not None:
        return ValueWithExpiration(unpack(record.plain.data), record.plain.expiration)
    return ValueWithExpiration(
        {s: ValueWithExpiration(unpack(v.data), v.expiration) for s, v in record.subkeys.items()},
        record.expiration,
    )


def found_record(*records: Record | None) -> FoundRecord | None:
    """The wire form of what a node holds for a key (freshest copy per subkey across its stores)."""
    plain: StoredValue | None = None
    subkeys: dict[Any, StoredValue] = {}
    for record in records:
        if record is None:
            continue
        if record.plain is not None and (
            plain is None or record.plain.expiration > plain.expiration
        ):
            plain = record.plain
        for subkey, value in record.subkeys.items():
            held = subkeys.get(subkey)
            if held is None or value.expiration > held.expiration:
                subkeys[subkey] = value
    if plain is None and not subkeys:
        return None
    return FoundRecord(
        WireValue.of(plain) if plain is not None else None,
        [WireSubkey(s, WireValue.of(v)) for s, v in subkeys.items()],
    )
