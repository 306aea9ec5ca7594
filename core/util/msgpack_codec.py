"""msgpack with Barnraise's conventions.

Tuples survive a round trip (as an extension type), so that ``()`` and ``[]`` stay different things.
Decoding untrusted bytes raises ``WireFormatError`` and nothing else.
"""

from __future__ import annotations

from typing import Any

import msgpack

from core.util.errors import WireFormatError

_EXT_TUPLE = 1


def _default(obj: object) -> Any:
    if isinstance(obj, tuple):
        return msgpack.ExtType(_EXT_TUPLE, pack(list(obj)))
    if isinstance(obj, int) and not isinstance(obj, bool):  # IntEnum and other int subclasses
        return int(obj)
    if isinstance(obj, str):  # StrEnum and other str subclasses
        return str(obj)
    if isinstance(obj, memoryview | bytearray):
        return bytes(obj)
    raise TypeError(f"cannot serialize {type(obj).__name__} to msgpack")


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _EXT_TUPLE:
        items = unpack(data)
        if not isinstance(items, list):
            raise WireFormatError("malformed tuple extension")
        return tuple(items)
    raise WireFormatError(f"unknown msgpack extension type {code}")


def pack(obj: Any) -> bytes:
    """Serialize ``obj``; raises ``TypeError`` for values msgpack cannot carry."""
    data: bytes = msgpack.packb(obj, use_bin_type=True, strict_types=True, default=_default)
    return data


def unpack(data: bytes | bytearray | memoryview) -> Any:
    """Deserialize one complete msgpack value; any malformation raises ``WireFormatError``."""
    try:
        return msgpack.unpackb(
            data, raw=False, use_list=True, strict_map_key=False, ext_hook=_ext_hook
        )
    except WireFormatError:
        raise
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise WireFormatError(f"malformed msgpack data: {type(exc).__name__}: {exc}") from None
