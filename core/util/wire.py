"""Small typed messages that travel as msgpack arrays.

A message is a frozen dataclass deriving from ``WireMessage``. ``to_wire()`` gives the field values in
declaration order; ``from_wire()`` checks every field against its annotation and raises
``WireFormatError`` naming the offending field. Trailing fields a newer peer adds are ignored and
trailing fields with defaults may be omitted, so messages can grow without breaking older peers.

Supported field types: ``bool int float str bytes``, ``X | None``, ``list[X]``, ``tuple[X, ...]``,
``dict[K, V]``, enums, nested messages, ``Any``, and any class with ``to_wire()`` and a classmethod
``from_wire(obj)`` (for example ``PeerID``).
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar, cast

from core.util.errors import WireFormatError

M = TypeVar("M", bound="WireMessage")
_Decode = Callable[[Any], Any]
_Encode = Callable[[Any], Any]


class _FieldError(WireFormatError):
    """A decoding failure deep inside a message; the path to it is filled in on the way out."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.parts: list[str] = []

    def at(self, part: str) -> _FieldError:
        self.parts.append(part)
        return self

    def final(self, root: str) -> WireFormatError:
        path = root + "".join(reversed(self.parts))
        return WireFormatError(f"{path}: {self.reason}")


def _identity(value: Any) -> Any:
    return value


def _fail(expected: str, value: Any) -> _FieldError:
    return _FieldError(f"expected {expected}, got {type(value).__name__}")


class _Codec:
    def __init__(self, cls: type[WireMessage]) -> None:
        hints = typing.get_type_hints(cls)
        self.cls = cls
        self.names: list[str] = []
        self.decoders: list[_Decode] = []
        self.encoders: list[_Encode | None] = []
        self.required = 0
        for field in dataclasses.fields(cls):  # type: ignore[arg-type]
            self.names.append(field.name)
            decode, encode = _converters(hints[field.name])
            self.decoders.append(decode)
            self.encoders.append(None if encode is _identity else encode)
            no_default = field.default is dataclasses.MISSING
            if no_default and field.default_factory is dataclasses.MISSING:
                self.required = len(self.names)
        self.count = len(self.names)

    def encode(self, message: WireMessage) -> list[Any]:
        out = []
        for name, encode in zip(self.names, self.encoders, strict=True):
            value = getattr(message, name)
            out.append(value if encode is None else encode(value))
        return out

    def decode(self, obj: Any) -> WireMessage:
        if not isinstance(obj, list | tuple):
            raise _fail(f"{self.cls.__name__} (an array)", obj)
        if len(obj) < self.required:
            raise _FieldError(
                f"{self.cls.__name__} needs at least {self.required} fields, got {len(obj)}"
            )
        values = []
        index = 0
        try:
            fields = zip(self.decoders, obj[: self.count], strict=False)  # older peers send fewer
            for index, (decode, value) in enumerate(fields):  # noqa: B007
                values.append(decode(value))
        except _FieldError as exc:
            raise exc.at(f".{self.names[index]}") from None
        return self.cls(*values)


def _codec_for(cls: type[WireMessage]) -> _Codec:
    codec = cls.__dict__.get("_wire_codec")
    if codec is None:
        codec = _Codec(cls)
        cls._wire_codec = (
            codec  # a per-class cache, built on first use (forward references resolve)
        )
    return cast(_Codec, codec)


class WireMessage:
    """Base class for frozen dataclasses sent over the network."""

    _wire_codec: ClassVar[_Codec | None] = None

    def to_wire(self) -> list[Any]:
        return _codec_for(type(self)).encode(self)

    @classmethod
    def from_wire(cls: type[M], obj: Any) -> M:
        try:
            return cast(M, _codec_for(cls).decode(obj))
        except _FieldError as exc:
            raise exc.final(cls.__name__) from None


def _scalar(expected: type, name: str) -> _Decode:
    def decode(value: Any) -> Any:
        if type(value) is not expected:
            raise _fail(name, value)
        return value

    return decode


def _decode_int(value: Any) -> Any:
    if type(value) is not int and (not isinstance(value, int) or isinstance(value, bool)):
        raise _fail("int", value)
    return value


def _decode_float(value: Any) -> Any:
    if type(value) is float:
        return value
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise _fail("float", value)
    return float(value)


def _decode_bytes(value: Any) -> Any:
    if type(value) is bytes:
        return value
    if not isinstance(value, bytes | bytearray | memoryview):
        raise _fail("bytes", value)
    return bytes(value)


def _converters(tp: Any) -> tuple[_Decode, _Encode]:  # noqa: PLR0911, PLR0912 - one branch per type
    if tp is Any or tp is object:
        return _identity, _identity
    if tp is bool:
        return _scalar(bool, "bool"), _identity
    if tp is int:
        return _decode_int, _identity
    if tp is float:
        return _decode_float, _identity
    if tp is str:
        return _scalar(str, "str"), _identity
    if tp is bytes:
        return _decode_bytes, _identity
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return _union(args)
    if origin is list:
        return _sequence(args[0], list)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return _sequence(args[0], tuple)
        return _fixed_tuple(args)
    if origin is dict:
        return _mapping(args[0], args[1])
    if isinstance(tp, type) and issubclass(tp, WireMessage):
        message_cls = tp

        def decode_message(value: Any) -> Any:
            return _codec_for(message_cls).decode(value)

        return decode_message, _encode_via_method
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum(tp)
    if isinstance(tp, type) and callable(getattr(tp, "from_wire", None)):
        custom = tp

        def decode_custom(value: Any) -> Any:
            try:
                return custom.from_wire(value)  # type: ignore[attr-defined]
            except (WireFormatError, TypeError, ValueError) as exc:
                raise _FieldError(f"invalid {custom.__name__}: {exc}") from None

        return decode_custom, _encode_via_method
    raise TypeError(f"unsupported wire field type {tp!r}")


def _encode_via_method(value: Any) -> Any:
    return value.to_wire()


def _union(args: tuple[Any, ...]) -> tuple[_Decode, _Encode]:
    options = [arg for arg in args if arg is not type(None)]
    optional = len(options) < len(args)
    pairs = [_converters(arg) for arg in options]
    names = " | ".join(getattr(arg, "__name__", repr(arg)) for arg in args)

    def decode(value: Any) -> Any:
        if value is None and optional:
            return None
        for option_decode, _ in pairs:
            try:
                return option_decode(value)
            except _FieldError:
                continue
        raise _fail(names, value)

    encoders = [encode for _, encode in pairs]
    if all(encode is _identity for encode in encoders):
        return decode, _identity
    typed = list(zip(options, encoders, strict=True))

    def encode(value: Any) -> Any:
        for option, option_encode in typed:
            if isinstance(option, type) and isinstance(value, option):
                return option_encode(value)
        return value

    return decode, encode


def _sequence(item_tp: Any, kind: type) -> tuple[_Decode, _Encode]:
    item_decode, item_encode = _converters(item_tp)
    scalar = item_tp if item_tp in (str, bytes, bool) else None

    def decode(value: Any) -> Any:
        if not isinstance(value, list | tuple):
            raise _fail("array", value)
        if scalar is not None and all(type(item) is scalar for item in value):
            return kind(value)  # the common case, checked without a call per item
        out = []
        index = 0
        try:
            for index, item in enumerate(value):  # noqa: B007
                out.append(item_decode(item))
        except _FieldError as exc:
            raise exc.at(f"[{index}]") from None
        return kind(out)

    if item_encode is _identity:
        return decode, _identity
    return decode, lambda value: [item_encode(item) for item in value]


def _fixed_tuple(item_tps: tuple[Any, ...]) -> tuple[_Decode, _Encode]:
    pairs = [_converters(tp) for tp in item_tps]

    def decode(value: Any) -> Any:
        if not isinstance(value, list | tuple) or len(value) != len(pairs):
            raise _fail(f"array of {len(pairs)}", value)
        out = []
        index = 0
        try:
            for index, ((item_decode, _), item) in enumerate(zip(pairs, value, strict=True)):  # noqa: B007
                out.append(item_decode(item))
        except _FieldError as exc:
            raise exc.at(f"[{index}]") from None
        return tuple(out)

    return decode, lambda value: [e(item) for (_, e), item in zip(pairs, value, strict=True)]


def _mapping(key_tp: Any, value_tp: Any) -> tuple[_Decode, _Encode]:
    key_decode, key_encode = _converters(key_tp)
    value_decode, value_encode = _converters(value_tp)

    def decode(value: Any) -> Any:
        if not isinstance(value, dict):
            raise _fail("map", value)
        out = {}
        for k, v in value.items():
            try:
                decoded_key = key_decode(k)
            except _FieldError as exc:
                raise exc.at("<key>") from None
            try:
                out[decoded_key] = value_decode(v)
            except _FieldError as exc:
                raise exc.at(f"[{k!r}]") from None
        return out

    if key_encode is _identity and value_encode is _identity:
        return decode, _identity
    return decode, lambda value: {key_encode(k): value_encode(v) for k, v in value.items()}


def _enum(enum_cls: type[enum.Enum]) -> tuple[_Decode, _Encode]:
    def decode(value: Any) -> Any:
        try:
            return enum_cls(value)
        except (ValueError, TypeError):
            raise _FieldError(f"{value!r} is not a valid {enum_cls.__name__}") from None

    return decode, lambda value: value.value
