"""PeerIDs: who a peer is, derived from its Ed25519 public key.

The format is libp2p's: an identity multihash of the protobuf-encoded public key, printed in base58btc
(strings start with ``12D3KooW``). Because the key is inside the ID, anyone holding a PeerID can check
that peer's signatures without asking anyone for its key.
"""

from __future__ import annotations

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from core.trust.errors import PeerIdError
from core.util.base58 import b58decode, b58encode

# identity multihash (code 0x00, 36 bytes) of protobuf PublicKey{Type: Ed25519 (1), Data: 32 bytes}
_PREFIX = bytes([0x00, 0x24, 0x08, 0x01, 0x12, 0x20])
_KEY_LEN = 32


class PeerID:
    """An immutable, hashable peer identifier."""

    __slots__ = ("_raw", "_text")

    def __init__(self, raw: bytes) -> None:
        raw = bytes(raw)
        if len(raw) != len(_PREFIX) + _KEY_LEN or not raw.startswith(_PREFIX):
            raise PeerIdError("not an Ed25519 PeerID (expected an identity multihash of 38 bytes)")
        self._raw = raw
        self._text: str | None = (
            None  # base58 is costly and most PeerIDs off the wire are never printed
        )

    @classmethod
    def from_public_bytes(cls, public_key: bytes) -> PeerID:
        if len(public_key) != _KEY_LEN:
            raise PeerIdError(f"an Ed25519 public key has 32 bytes, not {len(public_key)}")
        return cls(_PREFIX + public_key)

    @classmethod
    def from_string(cls, text: str) -> PeerID:
        try:
            raw = b58decode(text.strip())
        except ValueError as exc:
            raise PeerIdError(f"invalid PeerID {text!r}: {exc}") from None
        try:
            return cls(raw)
        except PeerIdError as exc:
            raise PeerIdError(f"invalid PeerID {text!r}: {exc}") from None

    def to_bytes(self) -> bytes:
        return self._raw

    @property
    def public_key_bytes(self) -> bytes:
        return self._raw[len(_PREFIX) :]

    def public_key(self) -> Ed25519PublicKey:
        return Ed25519PublicKey.from_public_bytes(self.public_key_bytes)

    def verify(self, signature: bytes, data: bytes) -> bool:
        """True when ``signature`` is this peer's Ed25519 signature of ``data``."""
        try:
            self.public_key().verify(signature, data)
        except (InvalidSignature, ValueError):
            return False
        return True

    def short(self) -> str:
        """The last characters, enough to tell peers apart in logs."""
        return f"…{str(self)[-6:]}"

    # wire conversion, so PeerID can be a WireMessage field
    def to_wire(self) -> bytes:
        return self._raw

    @classmethod
    def from_wire(cls, obj: object) -> PeerID:
        if not isinstance(obj, bytes):
            raise PeerIdError(f"expected PeerID bytes, got {type(obj).__name__}")
        return cls(obj)

    def __str__(self) -> str:
        if self._text is None:
            self._text = b58encode(self._raw)
        return self._text

    def __repr__(self) -> str:
        return f"PeerID({self})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PeerID) and other._raw == self._raw

    def __hash__(self) -> int:
        return hash(self._raw)

    def __lt__(self, other: PeerID) -> bool:
        return self._raw < other._raw
