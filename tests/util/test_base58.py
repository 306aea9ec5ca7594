import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.util.base58 import b58decode, b58encode


def test_known_vectors() -> None:
    assert b58encode(b"") == ""
    assert b58encode(b"\0\0\x01") == "112"
    assert b58encode(b"hello world") == "StV1DL6CwTryKyV"
    assert b58decode("StV1DL6CwTryKyV") == b"hello world"


@given(st.binary(max_size=64))
def test_round_trip(data: bytes) -> None:
    assert b58decode(b58encode(data)) == data


@pytest.mark.parametrize("bad", ["0abc", "Oops", "Il", "abc!"])
def test_rejects_characters_outside_the_alphabet(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid base58 character"):
        b58decode(bad)
