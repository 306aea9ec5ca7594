"""What the DHT stores: values with absolute expirations, plain or as dictionaries of subkeys.

Values travel and rest as msgpack bytes, so nodes never re-encode them and signatures stay valid.
A key or subkey that is a string containing ``[owner:<PeerID>]`` is *owned*: only that peer may write
it, and every copy carries the owner's signature over (key, subkey, value, expiration).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from core.trust.errors import PeerIdError
from core.trust.peer_id import PeerID
from core.util.errors import BarnraiseError
from core.util.msgpack_codec import pack

OWNER_PREFIX = "[owner:"
_SIGNATURE_DOMAIN = b"barnraise/dht/record/v1"


class InvalidRecord(BarnraiseError):
    """A record that breaks a rule of the DHT (size, expiration, ownership, schema)."""


@dataclass(frozen=True, slots=True)
class StoredValue:
    """One value as held by a node: msgpack bytes, expiration, and the owner's signature if owned."""

    data: bytes
    expiration: float
    signature: bytes | None = None


@dataclass(frozen=True, slots=True)
class ValueWithExpiration:
    """What ``get`` returns. For dictionary records ``value`` maps each subkey to one of these."""

    value: Any
    expiration: float


def owner_marker(peer: PeerID) -> str:
    """The text that makes a key or subkey owned by ``peer``."""
    return f"{OWNER_PREFIX}{peer}]"


def owner_of(name: Any) -> PeerID | None:
    """The owner a key or subkey names, or None; a malformed marker is an ``InvalidRecord``."""
    if not isinstance(name, str):
        return None
    start = name.find(OWNER_PREFIX)
    if start < 0:
        return None
    end = name.find("]", start)
    if end < 0:
        raise InvalidRecord(f"unterminated owner marker in {name!r}")
    try:
        return PeerID.from_string(name[start + len(OWNER_PREFIX) : end])
    except PeerIdError as exc:
        raise InvalidRecord(f"bad owner marker in {name!r}: {exc}") from None


def required_signer(key: Any, subkey: Any) -> PeerID | None:
    """Who must sign a record under ``key``/``subkey``: the key's owner, else the subkey's."""
    key_owner, subkey_owner = owner_of(key), owner_of(subkey)
    if key_owner is not None and subkey_owner is not None and key_owner != subkey_owner:
        raise InvalidRecord("a key owned by one peer cannot hold a subkey owned by another")
    return key_owner or subkey_owner


def signing_payload(key: Any, subkey: Any, data: bytes, expiration: float) -> bytes:
    return pack([_SIGNATURE_DOMAIN, key, subkey, data, float(expiration)])


def check_subkey(subkey: Any) -> None:
    """Subkeys must be hashable msgpack values; ``None`` means "no subkey" and cannot be one."""
    if subkey is None:
        return
    if isinstance(subkey, list | dict | bytearray) or not isinstance(subkey, Hashable):
        raise InvalidRecord(f"a subkey must be hashable, not {type(subkey).__name__}")
    if isinstance(subkey, tuple):
        for item in subkey:
            check_subkey(item)
