from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import pytest

from core.trust.identity import Identity
from core.trust.peer_id import PeerID
from core.util.errors import WireFormatError
from core.util.msgpack_codec import pack, unpack
from core.util.wire import WireMessage


class Color(enum.IntEnum):
    RED = 1
    BLUE = 2


@dataclass(frozen=True)
class Inner(WireMessage):
    name: str
    weight: float = 1.0


@dataclass(frozen=True)
class Outer(WireMessage):
    count: int
    flag: bool
    blob: bytes
    inner: Inner
    items: list[Inner]
    pair: tuple[int, str]
    scores: dict[str, float]
    maybe: int | None
    color: Color
    peer: PeerID
    anything: Any = None
    tags: tuple[str, ...] = ()
    extra: list[int] = field(default_factory=list)


def sample() -> Outer:
    return Outer(
        count=3,
        flag=True,
        blob=b"\x00\x01",
        inner=Inner("a", 0.5),
        items=[Inner("b"), Inner("c", 2.0)],
        pair=(1, "x"),
        scores={"loss": 1.5},
        maybe=None,
        color=Color.BLUE,
        peer=Identity.generate().peer_id,
        anything={"k": [1, (2,)]},
        tags=("t1", "t2"),
    )


def test_round_trip_through_msgpack() -> None:
    message = sample()
    assert Outer.from_wire(unpack(pack(message.to_wire()))) == message


def test_wrong_type_names_the_field() -> None:
    wire = sample().to_wire()
    wire[0] = "three"
    with pytest.raises(WireFormatError, match=r"Outer\.count: expected int, got str"):
        Outer.from_wire(wire)


def test_bool_is_not_an_int_and_ints_widen_to_float() -> None:
    wire = sample().to_wire()
    wire[0] = True
    with pytest.raises(WireFormatError, match="count"):
        Outer.from_wire(wire)
    assert Inner.from_wire(["x", 3]).weight == 3.0


def test_nested_errors_carry_the_path() -> None:
    wire = sample().to_wire()
    wire[4] = [["ok"], [5]]
    with pytest.raises(WireFormatError, match=r"Outer\.items\[1\]\.name"):
        Outer.from_wire(wire)


def test_missing_required_fields_and_optional_defaults() -> None:
    with pytest.raises(WireFormatError, match="at least"):
        Outer.from_wire([1, True])
    assert Inner.from_wire(["only-name"]) == Inner("only-name", 1.0)


def test_trailing_fields_from_newer_peers_are_ignored() -> None:
    assert Inner.from_wire(["n", 2.0, "a field from the future"]) == Inner("n", 2.0)


def test_invalid_enum_and_peer_id() -> None:
    wire = sample().to_wire()
    wire[8] = 7
    with pytest.raises(WireFormatError, match="not a valid Color"):
        Outer.from_wire(wire)
    wire = sample().to_wire()
    wire[9] = b"not a peer id"
    with pytest.raises(WireFormatError, match="peer"):
        Outer.from_wire(wire)


def test_not_an_array_at_all() -> None:
    with pytest.raises(WireFormatError, match="an array"):
        Inner.from_wire({"name": "x"})
