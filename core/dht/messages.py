"""The DHT's three calls: ping, find (nodes and values, many keys at once) and store (many records).

Every request says whether its sender is a client; servers never put clients in their routing tables.
Keys travel as 20-byte ids in ``find`` (the reader knows its key) and in full in ``store`` (the keeper
needs them to check ownership and schemas).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.dht.records import StoredValue
from core.net.wire.rpc import Method
from core.trust.peer_id import PeerID
from core.util.wire import WireMessage

MAX_KEYS_PER_REQUEST = 256
"""Keys one find may ask about; more is refused (bounds the work one request can cause)."""
MAX_ITEMS_PER_STORE = 256
"""Records one store may carry; senders split larger batches."""


@dataclass(frozen=True, slots=True)
class NodeRef(WireMessage):
    peer: PeerID
    addresses: list[str]


@dataclass(frozen=True, slots=True)
class WireValue(WireMessage):
    data: bytes
    expiration: float
    signature: bytes | None = None

    @classmethod
    def of(cls, value: StoredValue) -> WireValue:
        return cls(value.data, value.expiration, value.signature)

    def stored(self) -> StoredValue:
        return StoredValue(self.data, self.expiration, self.signature)


@dataclass(frozen=True, slots=True)
class WireSubkey(WireMessage):
    subkey: Any
    value: WireValue


@dataclass(frozen=True, slots=True)
class FoundRecord(WireMessage):
    plain: WireValue | None
    subkeys: list[WireSubkey] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PingRequest(WireMessage):
    client: bool


@dataclass(frozen=True, slots=True)
class PingResponse(WireMessage):
    client: bool
    time: float
    """The responder's wall clock, so peers can notice clocks that disagree."""


@dataclass(frozen=True, slots=True)
class FindRequest(WireMessage):
    keys: list[bytes]
    want_values: bool
    client: bool


@dataclass(frozen=True, slots=True)
class FindResult(WireMessage):
    record: FoundRecord | None
    nearest: list[NodeRef]


@dataclass(frozen=True, slots=True)
class FindResponse(WireMessage):
    results: list[FindResult]


@dataclass(frozen=True, slots=True)
class StoreItem(WireMessage):
    key: Any
    subkey: Any
    value: WireValue
    in_cache: bool = False


@dataclass(frozen=True, slots=True)
class StoreRequest(WireMessage):
    items: list[StoreItem]
    client: bool


@dataclass(frozen=True, slots=True)
class StoreResponse(WireMessage):
    accepted: list[bool]


PING = Method("dht.ping", PingRequest, PingResponse)
FIND = Method("dht.find", FindRequest, FindResponse)
STORE = Method("dht.store", StoreRequest, StoreResponse)
