"""Identifiers in the DHT's 160-bit space, and the XOR distance between them."""

from __future__ import annotations

import hashlib
import random
from typing import Any

from core.trust.peer_id import PeerID
from core.util.msgpack_codec import pack

ID_BITS = 160
ID_BYTES = ID_BITS // 8
MAX_ID = 1 << ID_BITS


def _digest(domain: bytes, data: bytes) -> int:
    return int.from_bytes(hashlib.sha256(domain + data).digest()[:ID_BYTES], "big")


def node_id(peer: PeerID) -> int:
    """Where a peer sits in the DHT: a hash of its PeerID, so nobody chooses their own place."""
    return _digest(b"barnraise/dht/node:", peer.to_bytes())


def key_id(key: Any) -> int:
    """Where a key's records live: a hash of the key's msgpack form (so ``(1,)`` and ``[1]`` differ)."""
    return _digest(b"barnraise/dht/key:", pack(key))


def id_to_bytes(value: int) -> bytes:
    return value.to_bytes(ID_BYTES, "big")


def id_from_bytes(data: bytes) -> int:
    if len(data) != ID_BYTES:
        raise ValueError(f"a DHT id has {ID_BYTES} bytes, not {len(data)}")
    return int.from_bytes(data, "big")


def random_id_between(lower: int, upper: int, rng: random.Random | None = None) -> int:
    """A random id in ``[lower, upper)``; used to refresh one bucket's range."""
    return (rng or random).randrange(lower, upper)
