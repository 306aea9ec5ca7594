import pytest

from core.trust.errors import PeerIdError
from core.trust.identity import Identity
from core.trust.peer_id import PeerID


def test_printable_libp2p_style_and_round_trips() -> None:
    identity = Identity.generate()
    text = str(identity.peer_id)
    assert text.startswith("12D3KooW")
    assert PeerID.from_string(text) == identity.peer_id
    assert PeerID(identity.peer_id.to_bytes()) == identity.peer_id
    assert identity.peer_id.public_key_bytes == identity.public_key_bytes
    assert hash(PeerID.from_string(text)) == hash(identity.peer_id)


def test_signatures_verify_from_the_peer_id_alone() -> None:
    identity = Identity.generate()
    signature = identity.sign(b"payload")
    assert identity.peer_id.verify(signature, b"payload")
    assert not identity.peer_id.verify(signature, b"other payload")
    assert not Identity.generate().peer_id.verify(signature, b"payload")
    assert not identity.peer_id.verify(b"short", b"payload")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "12D3KooW",
        "QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N",
        "12D3KooW0OIl",
        "hello world",
    ],
)
def test_invalid_strings_are_refused_clearly(text: str) -> None:
    with pytest.raises(PeerIdError, match="invalid PeerID"):
        PeerID.from_string(text)


def test_wrong_key_length() -> None:
    with pytest.raises(PeerIdError, match="32 bytes"):
        PeerID.from_public_bytes(b"\x01" * 31)
