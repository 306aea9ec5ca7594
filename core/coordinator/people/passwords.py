"""Password hashes: scrypt with a random 16-byte salt, parameters stored with each hash.

A stored hash reads ``scrypt$<n>$<r>$<p>$<salt>$<key>`` (salt and key in unpadded URL-safe
base64). Because the parameters travel with the hash, they can be raised later: a login that
succeeds against older, weaker parameters re-hashes the password with the current ones
(``needs_rehash``). The default n=2**14, r=8, p=1 costs about 16 MiB and some 50 ms per check, which
makes guessing expensive while a login stays quick; tests lower n to 2**10.

Checking is constant-time (``Scrypt.verify`` compares with ``bytes_eq``). Hashing is CPU-bound: the
service runs it on a worker thread so the event loop keeps serving.
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass

from cryptography.exceptions import InvalidKey
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from core.coordinator.people.names import Password

SALT_BYTES = 16
KEY_BYTES = 32
_SCHEME = "scrypt"
# A hash read from the database must not make one login cost gigabytes.
_MAX_N = 2**20
_MAX_RP = 64


@dataclass(frozen=True, slots=True)
class ScryptParams:
    n: int = 2**14
    r: int = 8
    p: int = 1

    def __post_init__(self) -> None:
        if self.n < 2 or self.n & (self.n - 1) or self.n > _MAX_N:
            raise ValueError(f"scrypt n must be a power of two from 2 to {_MAX_N}, got {self.n}")
        if not (1 <= self.r <= _MAX_RP and 1 <= self.p <= _MAX_RP):
            raise ValueError(f"scrypt r and p must be 1 to {_MAX_RP}, got r={self.r} p={self.p}")

    def cost(self) -> int:
        """Work per check, to compare two parameter sets."""
        return self.n * self.r * self.p


DEFAULT_PARAMS = ScryptParams()


def hash_password(password: Password, params: ScryptParams = DEFAULT_PARAMS) -> str:
    salt = os.urandom(SALT_BYTES)
    key = _kdf(salt, params).derive(password.encode())
    return "$".join((_SCHEME, str(params.n), str(params.r), str(params.p), _b64(salt), _b64(key)))


def verify_password(password: Password, stored: str) -> bool:
    """Whether ``password`` matches ``stored``; False for a hash this module cannot read."""
    parsed = _parse(stored)
    if parsed is None:
        return False
    params, salt, key = parsed
    try:
        _kdf(salt, params, len(key)).verify(password.encode(), key)
    except InvalidKey:
        return False
    return True


def needs_rehash(stored: str, params: ScryptParams) -> bool:
    """Whether ``stored`` was made with cheaper parameters than ``params``."""
    parsed = _parse(stored)
    return parsed is None or parsed[0].cost() < params.cost()


def _kdf(salt: bytes, params: ScryptParams, length: int = KEY_BYTES) -> Scrypt:
    return Scrypt(salt=salt, length=length, n=params.n, r=params.r, p=params.p)


def _parse(stored: str) -> tuple[ScryptParams, bytes, bytes] | None:
    parts = stored.split("$")
    if len(parts) != 6 or parts[0] != _SCHEME:
        return None
    try:
        params = ScryptParams(int(parts[1]), int(parts[2]), int(parts[3]))
        salt, key = _unb64(parts[4]), _unb64(parts[5])
    except (ValueError, binascii.Error):
        return None
    if not salt or not 16 <= len(key) <= 64:
        return None
    return params, salt, key


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
