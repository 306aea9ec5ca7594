"""Base58btc (the Bitcoin alphabet), as used by multibase and libp2p PeerIDs."""

from __future__ import annotations

from types import MappingProxyType

ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_INDEX = MappingProxyType({char: value for value, char in enumerate(ALPHABET)})
INVALID = 0xFF
_DIGITS = bytes(_INDEX.get(chr(code), INVALID) for code in range(256))
"""Byte -> digit value, ``INVALID`` outside the alphabet (a ``bytes.translate`` table)."""


def b58encode(data: bytes) -> str:
    """Encode bytes; each leading zero byte becomes a leading ``1``."""
    zeros = len(data) - len(data.lstrip(b"\0"))
    number = int.from_bytes(data, "big")
    digits: list[str] = []
    while number:
        number, rest = divmod(number, 58)
        digits.append(ALPHABET[rest])
    return "1" * zeros + "".join(reversed(digits))


def b58decode(text: str) -> bytes:
    """Decode a base58btc string; raises ``ValueError`` on a character outside the alphabet."""
    try:
        raw = text.encode("ascii")
    except UnicodeEncodeError:
        raw = b""
    # one C-level translate instead of a dict lookup per character (PeerIDs in every DHT answer)
    digits = raw.translate(_DIGITS) if len(raw) == len(text) else b"\xff"
    if INVALID in digits:
        position = next(i for i, c in enumerate(text) if c not in _INDEX)
        raise ValueError(f"invalid base58 character {text[position]!r} at position {position}")
    number = 0
    for value in digits:
        number = number * 58 + value
    zeros = len(text) - len(text.lstrip("1"))
    body = number.to_bytes((number.bit_length() + 7) // 8, "big") if number else b""
    return b"\0" * zeros + body
