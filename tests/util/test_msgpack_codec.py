import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.util.errors import WireFormatError
from core.util.msgpack_codec import pack, unpack

EDGE_VALUES: list[Any] = [
    0,
    "",
    False,
    (),
    [],
    None,
    b"",
    {},
    0.0,
    -1,
    2**63 - 1,
    ((),),
    [()],
    {"a": ()},
]


@pytest.mark.parametrize("value", EDGE_VALUES, ids=repr)
def test_edge_values_keep_their_types(value: Any) -> None:
    decoded = unpack(pack(value))
    assert decoded == value
    assert type(decoded) is type(value)


def test_tuples_and_lists_stay_distinct() -> None:
    assert unpack(pack([(1, 2), [3]])) == [(1, 2), [3]]
    assert isinstance(unpack(pack((1, [2])))[1], list)


def test_unserializable_values_raise_type_error() -> None:
    with pytest.raises(TypeError, match="cannot serialize"):
        pack(object())


@given(st.binary(max_size=512))
def test_garbage_only_ever_raises_wire_format_error(data: bytes) -> None:
    with contextlib.suppress(WireFormatError):
        unpack(data)


def test_unknown_extension_is_refused() -> None:
    import msgpack

    with pytest.raises(WireFormatError, match="unknown msgpack extension"):
        unpack(msgpack.packb(msgpack.ExtType(42, b"x")))
