"""Checks shared by the manifest's sections: TOML types, ranges, choices and unknown keys.

Each section is a frozen dataclass whose ``__post_init__`` starts with ``FieldCheck(self, ...)``:
that checks every field against its annotation (the annotation is the schema, written once) and
then offers the range and choice checks. Validating in ``__post_init__`` rather than in the TOML
reader means a section changed later with ``dataclasses.replace`` is held to the same rules.
"""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import math
import re
import typing
from collections.abc import Collection, Mapping
from typing import Any, NoReturn

from core.project.errors import ManifestError

_TOML_TYPES: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "float"),
    (str, "string"),
    ((list, tuple), "array"),
    (dict, "table"),
    ((datetime.date, datetime.time), "date-time"),
)


def describe(value: object) -> str:
    """A value as TOML names it, then the value itself (shortened): ``string 'abc'``."""
    text = str(value).lower() if isinstance(value, bool) else repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{_toml_type(value)} {text}"


def _toml_type(value: object) -> str:
    # bool before int: in Python a boolean is also an integer
    return next(
        (name for kinds, name in _TOML_TYPES if isinstance(value, kinds)), type(value).__name__
    )


def _expected(hint: object) -> str:
    """What a field's annotation asks for, in TOML's words."""
    names = {int: "integer", float: "number", str: "string", bool: "boolean"}
    if hint in names:
        return names[hint]
    args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item = args[0]
            return (
                "array of tables"
                if dataclasses.is_dataclass(item)
                else f"array of {_expected(item)}s"
            )
        return f"array of {len(args)} {' and '.join(sorted({_expected(a) + 's' for a in args}))}"
    return getattr(hint, "__name__", str(hint))


def _coerce(value: object, hint: object, key: str) -> object:
    """``value`` as the type ``hint`` names: integers widen to floats, arrays become tuples."""
    if typing.get_origin(hint) is tuple:
        if not isinstance(value, list | tuple):
            raise ManifestError(None, key, f"expected {_expected(hint)}, got {describe(value)}")
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            items = [args[0]] * len(value)
        elif len(value) == len(args):
            items = list(args)
        else:
            reason = f"expected {_expected(hint)}, got {len(value)} values"
            raise ManifestError(None, key, reason)
        return tuple(
            _coerce(item, item_hint, f"{key}[{i}]")
            for i, (item, item_hint) in enumerate(zip(value, items, strict=True))
        )
    if hint is float and isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an integer beyond any float
            raise ManifestError(None, key, "must be a finite number, got a huge integer") from None
        if not math.isfinite(number):
            raise ManifestError(None, key, f"must be a finite number, got {number}")
        return number
    # an exact type match, so that a boolean never passes for an integer
    if isinstance(hint, type) and type(value) is hint:
        return value
    raise ManifestError(None, key, f"expected {_expected(hint)}, got {describe(value)}")


def _short(value: object) -> str:
    """A number as said in an error, shortened should it have thousands of digits."""
    text = str(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} digits)"


def _bound(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        return f"must be in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if low is not None:
        return f"must be greater than {low}" if low_open else f"must be at least {low}"
    if high is not None:
        return f"must be less than {high}" if high_open else f"must be at most {high}"
    raise ValueError("a range needs at least one bound")


class FieldCheck:
    """Type-checks a section's fields on creation, then checks values one rule at a time.

    Errors name ``<prefix>.<field>`` and no file: the loader adds the file as the error passes.
    """

    def __init__(self, section: Any, prefix: str) -> None:
        self._section = section
        self._prefix = prefix
        hints = typing.get_type_hints(type(section))
        for field in dataclasses.fields(section):
            value = _coerce(getattr(section, field.name), hints[field.name], self.key(field.name))
            # frozen dataclass: this is the one place a section's value may be normalized
            object.__setattr__(section, field.name, value)

    def key(self, name: str) -> str:
        return f"{self._prefix}.{name}"

    def fail(self, name: str, reason: str) -> NoReturn:
        raise ManifestError(None, self.key(name), reason)

    def in_range(
        self,
        name: str,
        low: float | None = None,
        high: float | None = None,
        *,
        low_open: bool = False,
        high_open: bool = False,
    ) -> None:
        """``low <= value <= high``; an open end excludes its bound."""
        value: float = getattr(self._section, name)
        too_low = low is not None and (value <= low if low_open else value < low)
        too_high = high is not None and (value >= high if high_open else value > high)
        if too_low or too_high:
            self.fail(name, f"{_bound(low, high, low_open, high_open)}, got {_short(value)}")

    def one_of(self, name: str, choices: Collection[str]) -> None:
        value: str = getattr(self._section, name)
        if value not in choices:
            allowed = ", ".join(repr(c) for c in choices)
            self.fail(name, f"must be one of {allowed}; got {value!r}")

    def matches(self, name: str, pattern: re.Pattern[str], description: str) -> None:
        value: str = getattr(self._section, name)
        if not pattern.fullmatch(value):
            self.fail(name, f"must be {description}, got {value!r}")

    def at_most(self, name: str, limit: int) -> None:
        """A string of at most ``limit`` characters, or an array of at most ``limit`` entries."""
        value: str | tuple[object, ...] = getattr(self._section, name)
        if len(value) > limit:
            unit = "characters" if isinstance(value, str) else "entries"
            self.fail(name, f"must have at most {limit:,} {unit}, got {len(value):,}")

    def not_empty(self, name: str) -> None:
        if not getattr(self._section, name):
            self.fail(name, "must not be empty")


def unknown_key_reason(key: str, allowed: Collection[str], what: str = "key") -> str:
    """'unknown key; did you mean ...? allowed: ...', so that typos never pass silently."""
    close = difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown {what} {key!r}; {hint}allowed: {', '.join(allowed)}"


def check_keys(
    table: Mapping[str, object], allowed: Collection[str], prefix: str, what: str = "key"
) -> None:
    """Every key of ``table`` is in ``allowed`` (errors are keyed ``prefix.key``)."""
    for key in table:
        if key not in allowed:
            dotted = f"{prefix}.{key}" if prefix else key
            raise ManifestError(None, dotted, unknown_key_reason(key, allowed, what))
