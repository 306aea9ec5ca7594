import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from core.trust.errors import IdentityError
from core.trust.identity import Identity


def test_created_once_private_and_stable(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "identity.key"
    first = Identity.load_or_create(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = Identity.load_or_create(path)
    assert again.peer_id == first.peer_id
    assert Identity.load(path).peer_id == first.peer_id
    assert [p.name for p in path.parent.iterdir()] == ["identity.key"]  # no temp files left


def test_save_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "identity.key"
    Identity.generate().save(path)
    before = path.read_bytes()
    with pytest.raises(FileExistsError):
        Identity.generate().save(path)
    assert path.read_bytes() == before


def test_damaged_file_is_reported_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "identity.key"
    path.write_bytes(b"-----BEGIN PRIVATE KEY-----\ngarbage\n")
    with pytest.raises(IdentityError, match=str(path)):
        Identity.load_or_create(path)
    assert path.read_bytes() == b"-----BEGIN PRIVATE KEY-----\ngarbage\n"


def test_a_key_of_another_type_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "identity.key"
    key = ec.generate_private_key(ec.SECP256R1())
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(IdentityError, match="not an Ed25519 key"):
        Identity.load(path)


def test_loose_permissions_are_tightened(tmp_path: Path) -> None:
    path = tmp_path / "identity.key"
    Identity.generate().save(path)
    path.chmod(0o644)
    Identity.load(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_unreadable_location_gives_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(IdentityError, match="cannot write identity file"):
        Identity.generate().save(blocker / "identity.key")


def test_seeded_identity_is_deterministic() -> None:
    assert Identity.from_seed(b"\x07" * 32).peer_id == Identity.from_seed(b"\x07" * 32).peer_id
