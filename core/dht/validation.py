"""Rules every record must pass, on store (by the node asked to keep it) and on get (by the reader).

``RecordRules`` checks sizes and expirations, then ownership (owned keys and subkeys need their owner's
signature), then any ``RecordSchema`` whose key matches. A reader applies the same rules to what other
nodes return, so a node that tampers with a record cannot make anyone believe it.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from core.dht.records import (
    InvalidRecord,
    StoredValue,
    check_subkey,
    required_signer,
    signing_payload,
)
from core.trust.peer_id import PeerID
from core.util.errors import WireFormatError
from core.util.msgpack_codec import pack, unpack
from core.util.wire import WireMessage

CLOCK_SLACK = 60.0
"""Seconds of clock difference between a writer and the nodes that check its expirations."""


def renewal_bound(ttl: float) -> float:
    """How far ahead a record that its writer renews every ``ttl`` seconds may expire: two TTLs
    (a renewal may be late) and some clock difference. A schema's ``max_ahead`` for such records:
    a stranger's entry then outlives its last store by minutes, not by the node's day."""
    return 2 * ttl + CLOCK_SLACK


@dataclass(frozen=True)
class RecordSchema:
    """The shape of a well-known record type, matched by its key.

    ``key`` is either a string prefix or a predicate. ``value`` is the ``WireMessage`` type every value
    must decode to. ``subkeys`` says whether the records use none, any, or only owned subkeys (one entry
    per peer that only that peer can write, as progress reports need).
    """

    name: str
    key: str | Callable[[Any], bool]
    value: type[WireMessage] | None = None
    subkeys: Literal["none", "any", "owned"] = "any"
    authorize: Callable[[PeerID | None, bytes], None] | None = None
    """Further checks of the record's signer and bytes, e.g. that the value carries a valid access
    pass bound to its signer (moderated projects); raises ``InvalidRecord`` to refuse."""
    authorize_entry: Callable[[Any, Any, bytes, PeerID | None], None] | None = None
    """The same with the key and subkey too: (key, subkey, bytes, signer)."""
    max_ahead: float | None = None
    """Seconds ahead an expiration may be for these records (tighter than the node's own limit,
    for records that are refreshed often); None: only the node's limit."""

    def matches(self, key: Any) -> bool:
        if callable(self.key):
            return self.key(key)
        return isinstance(key, str) and key.startswith(self.key)

    def check(self, key: Any, subkey: Any, data: bytes, signer: PeerID | None = None) -> None:
        if self.subkeys == "none" and subkey is not None:
            raise InvalidRecord(f"{self.name} records take no subkeys")
        if self.subkeys == "owned" and required_signer(None, subkey) is None:
            raise InvalidRecord(f"{self.name} records need an owned subkey ([owner:<PeerID>])")
        if self.value is not None:
            try:
                self.value.from_wire(unpack(data))
            except WireFormatError as exc:
                raise InvalidRecord(f"{self.name} value does not match its schema: {exc}") from None
        if self.authorize is not None:
            self.authorize(signer, data)
        if self.authorize_entry is not None:
            self.authorize_entry(key, subkey, data, signer)


@dataclass(frozen=True)
class Limits:
    max_key_bytes: int
    max_value_bytes: int
    max_expiration_ahead: float


VERIFIED_KEPT = 8192
"""Records a node remembers having checked (about a megabyte)."""


def _fingerprint(key: Any, subkey: Any, value: StoredValue) -> bytes:
    """What identifies a stored value for ``RecordRules.check_common``: everything it checks."""
    digest = hashlib.blake2b(pack([key, subkey, value.expiration]), digest_size=16)
    digest.update(value.data)
    digest.update(value.signature or b"-")
    return digest.digest()


class RecordRules:
    """Size, expiration, ownership and schema checks, in that order.

    A record that passed the common checks once is remembered (the last ``VERIFIED_KEPT``): a
    lookup's replies from several nodes carry the same records, and a key polled while peers look
    for a group returns them again and again; checking each copy (its signature, its owner's
    parsed id) dominated the time of a large swarm's lookups."""

    def __init__(self, limits: Limits, schemas: Sequence[RecordSchema] = ()) -> None:
        self.limits = limits
        self.schemas: list[RecordSchema] = list(schemas)
        self._verified: OrderedDict[bytes, None] = OrderedDict()

    def add_schema(self, schema: RecordSchema) -> None:
        self.schemas.append(schema)

    def check(self, key: Any, subkey: Any, value: StoredValue, now: float) -> None:
        """Raise ``InvalidRecord`` unless a node may keep (or a reader may trust) this value."""
        self.check_common(key, subkey, value, now)
        self.check_schemas(key, subkey, value, now)

    def check_common(self, key: Any, subkey: Any, value: StoredValue, now: float) -> None:
        """The rules every node keeps, whatever schemas it knows: sizes, expiration, signatures.
        A node that returns a value breaking them is lying."""
        seen = _fingerprint(key, subkey, value)
        if seen in self._verified:
            # passed before: the sizes and the signature are the same, and an expiration that was
            # not too far ahead then is not now
            self._verified.move_to_end(seen)
            return
        self._check_common(key, subkey, value, now)
        self._verified[seen] = None
        if len(self._verified) > VERIFIED_KEPT:
            self._verified.popitem(last=False)

    def _check_common(self, key: Any, subkey: Any, value: StoredValue, now: float) -> None:
        limits = self.limits
        if len(pack(key)) > limits.max_key_bytes:
            raise InvalidRecord(f"key longer than {limits.max_key_bytes} bytes")
        check_subkey(subkey)
        if subkey is not None and len(pack(subkey)) > limits.max_key_bytes:
            raise InvalidRecord(f"subkey longer than {limits.max_key_bytes} bytes")
        if len(value.data) > limits.max_value_bytes:
            raise InvalidRecord(
                f"value of {len(value.data)} bytes exceeds {limits.max_value_bytes}"
            )
        if value.expiration > now + limits.max_expiration_ahead:
            raise InvalidRecord(
                f"expiration {value.expiration - now:.0f} s ahead; at most "
                f"{limits.max_expiration_ahead:.0f} s are allowed"
            )
        signer = required_signer(key, subkey)
        if signer is not None:
            if value.signature is None:
                raise InvalidRecord(f"the record is owned by {signer} but carries no signature")
            payload = signing_payload(key, subkey, value.data, value.expiration)
            if not signer.verify(value.signature, payload):
                raise InvalidRecord(f"the record's signature is not {signer}'s")

    def check_schemas(self, key: Any, subkey: Any, value: StoredValue, now: float) -> None:
        """The rules of the schemas this node knows. A node that knows none of them (a plain
        ``barnraise dht`` node) keeps what breaks them in good faith."""
        signer = required_signer(key, subkey)
        for schema in self.schemas:
            if schema.matches(key):
                ahead = schema.max_ahead
                if ahead is not None and value.expiration > now + ahead:
                    raise InvalidRecord(
                        f"{schema.name} records expire at most {ahead:.0f} s ahead, not "
                        f"{value.expiration - now:.0f} s"
                    )
                schema.check(key, subkey, value.data, signer)
