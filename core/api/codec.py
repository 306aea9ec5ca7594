"""Dataclasses to JSON and back, checked against their type hints.

The schema's classes are plain frozen dataclasses; this turns them into JSON-ready dicts and rebuilds
them from untrusted JSON, refusing anything whose shape does not match (a clear ``BadRequest``
naming the path, e.g. ``project.initial_peers[2]``) instead of letting a wrong type travel further.
A ``Literal`` field marked with ``Fallback`` (a list a newer engine may extend, like reason codes)
reads a value this side does not know as the fallback when decoding tolerantly.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from core.api.errors import BadRequest

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Fallback:
    """``Annotated[Literal[...], Fallback(value)]``: tolerant decoding (``strict=False``, the
    clients') reads a string outside the ``Literal`` as ``value``, one of its members; strict
    decoding still refuses it."""

    value: str


def encode(value: Any) -> Any:
    """A dataclass (or list/dict of them, or a scalar) as JSON-ready data."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no inf/nan; the schema marks such fields optional
    return value


def decode(cls: type[T], data: Any, path: str = "", *, strict: bool = True) -> T:
    """Rebuild ``cls`` from JSON data, checking every field.

    ``strict`` refuses fields the dataclass does not have: right for requests the engine receives.
    Clients decode answers with ``strict=False`` and drop such fields, so that a newer engine that
    added an optional field (a compatible change, see ``schema``) does not break an older GUI."""
    result: T = _decode(cls, data, path or cls.__name__, strict)
    return result


def _decode(tp: Any, data: Any, path: str, strict: bool) -> Any:  # noqa: PLR0911, PLR0912
    origin = get_origin(tp)
    if tp is Any:
        return data
    if origin is typing.Annotated:
        inner, *extras = get_args(tp)
        fallback = next((e for e in extras if isinstance(e, Fallback)), None)
        unknown = isinstance(data, str) and data not in get_args(inner)
        if fallback is not None and not strict and get_origin(inner) is typing.Literal and unknown:
            return fallback.value
        return _decode(inner, data, path, strict)
    if origin is Union or origin is types.UnionType:
        args = get_args(tp)
        if data is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _decode(arg, data, path, strict)
            except BadRequest as exc:
                errors.append(str(exc))
        raise BadRequest(errors[0] if errors else f"{path}: unexpected value")
    if origin is typing.Literal:
        if data not in get_args(tp):
            allowed = ", ".join(repr(a) for a in get_args(tp))
            raise BadRequest(f"{path}: must be one of {allowed}, not {data!r}")
        return data
    if origin in (list, tuple):
        if not isinstance(data, list):
            raise BadRequest(f"{path}: expected a list, got {type(data).__name__}")
        (item,) = get_args(tp)[:1] or (Any,)
        items = [_decode(item, v, f"{path}[{i}]", strict) for i, v in enumerate(data)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(data, dict):
            raise BadRequest(f"{path}: expected an object, got {type(data).__name__}")
        _, vt = get_args(tp) or (str, Any)
        return {str(k): _decode(vt, v, f"{path}.{k}", strict) for k, v in data.items()}
    if dataclasses.is_dataclass(tp):
        return _decode_dataclass(tp, data, path, strict)
    return _decode_scalar(tp, data, path)


def _decode_dataclass(cls: Any, data: Any, path: str, strict: bool) -> Any:
    if not isinstance(data, dict):
        raise BadRequest(f"{path}: expected an object, got {type(data).__name__}")
    hints = get_type_hints(cls, include_extras=True)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown and strict:
        raise BadRequest(f"{path}: unknown field(s) {', '.join(unknown)}")
    values = {}
    for name, field in fields.items():
        if name in data:
            values[name] = _decode(hints[name], data[name], f"{path}.{name}", strict)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise BadRequest(f"{path}: missing field {name}")
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"{path}: {exc}") from None


def _decode_scalar(tp: Any, data: Any, path: str) -> Any:
    if tp is bool:
        if isinstance(data, bool):
            return data
    elif tp is int:
        if isinstance(data, int) and not isinstance(data, bool):
            return data
    elif tp is float:
        if isinstance(data, int | float) and not isinstance(data, bool):
            return float(data)
    elif tp is str:
        if isinstance(data, str):
            return data
    elif tp is type(None):
        if data is None:
            return None
    else:
        raise BadRequest(f"{path}: cannot decode type {tp!r}")
    name = getattr(tp, "__name__", str(tp))
    raise BadRequest(f"{path}: expected {name}, got {type(data).__name__} {data!r}"[:300])
