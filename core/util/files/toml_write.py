"""Writing TOML for Barnraise's own small files (the standard library only reads it).

Covers what our settings and manifests need: tables of strings, booleans, integers, finite floats
and lists of these, arrays of such tables, and arrays of tables inside a table
(``[[data.sources]]``). Anything else is refused, so a value that would not read back the same never
reaches the disk.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from core.util.errors import ConfigError


def dumps(document: Mapping[str, Mapping[str, Any] | Sequence[Mapping[str, Any]]]) -> str:
    """``{"table": {...}, "array": [{...}, ...]}`` as TOML text."""
    lines: list[str] = []
    for name, body in document.items():
        _check_key(name)
        if isinstance(body, Mapping):
            lines.append(f"[{name}]")
            lines.extend(_pairs(body, name))
            lines.append("")
            for key, items in body.items():
                if _is_table_array(items):
                    for item in items:
                        lines.append(f"[[{name}.{key}]]")
                        lines.extend(_pairs(item, f"{name}.{key}"))
                        lines.append("")
        else:
            for item in body:
                lines.append(f"[[{name}]]")
                lines.extend(_pairs(item, name))
                lines.append("")
    return "\n".join(lines)


def _pairs(table: Mapping[str, Any], where: str) -> list[str]:
    out = []
    for key, value in table.items():
        _check_key(key)
        if _is_table_array(value):
            continue  # written after the table's own keys, as [[table.key]] sections
        out.append(f"{key} = {_value(value, f'{where}.{key}')}")
    return out


def _value(value: Any, where: str) -> str:
    if isinstance(value, list | tuple) and all(
        isinstance(v, str | int | float) and not isinstance(v, Mapping) for v in value
    ):
        return "[" + ", ".join(scalar_value(v, where) for v in value) + "]"
    return scalar_value(value, where)


def scalar_value(value: Any, where: str) -> str:
    """A bool, integer, finite float or string as TOML; ``ConfigError`` for anything else, or for
    what would not read back the same (``where`` names it)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"{where}: {value} cannot be written to TOML")
        return repr(value)
    if isinstance(value, str):
        if any(0xD800 <= ord(char) < 0xE000 for char in value):
            raise ConfigError(f"{where}: {value!r} is not valid Unicode text")
        # JSON's escapes are TOML basic-string escapes; DEL is the one character JSON leaves bare
        # that a TOML basic string may not hold
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    raise ConfigError(f"{where}: cannot write a {type(value).__name__} to TOML")


def _is_table_array(value: Any) -> bool:
    return (
        isinstance(value, list | tuple)
        and bool(value)
        and all(isinstance(v, Mapping) for v in value)
    )


def _check_key(key: str) -> None:
    if not key or not all(c.isascii() and (c.isalnum() or c in "-_") for c in key):
        raise ConfigError(f"{key!r} is not a plain TOML key")
