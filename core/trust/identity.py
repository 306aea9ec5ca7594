"""A peer's long-lived Ed25519 identity key, kept private on disk.

The key file is PKCS#8 PEM, written atomically with mode 0600 (on Windows it lives in the user's
profile, which other users cannot read). A damaged file is never replaced silently: the error says
where it is, so the user can keep it or move it away.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import tempfile
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.trust.errors import IdentityError
from core.trust.peer_id import PeerID

log = logging.getLogger(__name__)


class Identity:
    """An Ed25519 private key and the PeerID derived from it."""

    __slots__ = ("_key", "peer_id", "public_key_bytes")

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key
        self.public_key_bytes = key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.peer_id = PeerID.from_public_bytes(self.public_key_bytes)

    @classmethod
    def generate(cls) -> Identity:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_seed(cls, seed: bytes) -> Identity:
        """A deterministic identity from 32 secret bytes (tests and fixed organizer keys)."""
        return cls(Ed25519PrivateKey.from_private_bytes(seed))

    def sign(self, data: bytes) -> bytes:
        return self._key.sign(data)

    @property
    def private_key(self) -> Ed25519PrivateKey:
        return self._key

    def to_pem(self) -> bytes:
        return self._key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    @classmethod
    def from_pem(cls, data: bytes, source: str = "key data") -> Identity:
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise IdentityError(f"{source} is not a valid identity key: {exc}") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise IdentityError(f"{source} holds a {type(key).__name__}, not an Ed25519 key")
        return cls(key)

    @classmethod
    def load(cls, path: Path) -> Identity:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise IdentityError(f"cannot read identity file {path}: {exc.strerror}") from None
        identity = cls.from_pem(
            data, f"{path} (move it away to create a new identity, or restore it from a backup)"
        )
        _tighten_permissions(path)
        return identity

    @classmethod
    def load_or_create(cls, path: Path) -> Identity:
        """Load the key at ``path``; create and save a new one if no file is there."""
        if path.exists():
            return cls.load(path)
        identity = cls.generate()
        try:
            identity.save(path)
        except FileExistsError:  # another process created it first: use theirs
            return cls.load(path)
        log.info("created a new identity %s in %s", identity.peer_id, path)
        return identity

    def save(self, path: Path) -> None:
        """Write the key to a new file readable only by this user; never overwrites."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd, tmp = tempfile.mkstemp(prefix=".identity-", dir=path.parent)
        except OSError as exc:
            raise IdentityError(f"cannot write identity file {path}: {exc.strerror}") from None
        try:
            with os.fdopen(fd, "wb") as handle:
                os.chmod(tmp, 0o600)
                handle.write(self.to_pem())
                handle.flush()
                os.fsync(handle.fileno())
            # link() refuses to replace an existing file, so two first runs cannot overwrite each other
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise
            except OSError:  # a filesystem without hard links: exclusive create instead
                _write_exclusive(path, self.to_pem())
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _write_exclusive(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _tighten_permissions(path: Path) -> None:
    if os.name != "posix":
        return
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        log.warning("identity file %s was readable by others (mode %o); setting 0600", path, mode)
        os.chmod(path, 0o600)
