"""Encoding and decoding chunks with any codec: what every codec shares (the size check, the
output array, refusing a codec that picks per tensor), the rest is its kernel's."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from core.codecs.arrays import F32, Buffer
from core.codecs.spec import Codec
from core.util.errors import WireFormatError


def encode(codec: Codec, values: F32) -> bytes | memoryview:
    """Encode a contiguous float32 array (a codec that picks per tensor must be resolved first)."""
    return codec.kernel.encode(values)


def decode(codec: Codec, data: Buffer, count: int, out: F32 | None = None) -> F32:
    """Decode ``count`` values; raises ``WireFormatError`` if ``data`` has the wrong size."""
    kernel = codec.kernel
    size = kernel.encoded_size(count)
    if len(data) != size:
        raise WireFormatError(f"{codec.name} chunk has {len(data)} bytes, expected {size}")
    result = out if out is not None else np.empty(count, dtype=np.float32)
    kernel.decode(data, count, result)
    return result


def encoded_size(codec: Codec, count: int) -> int:
    return codec.kernel.encoded_size(count)


def max_abs_error(codec: Codec, values: F32) -> float:
    """The worst error ``decode(encode(values))`` may have for these values."""
    return 0.0 if values.size == 0 else codec.kernel.error_bound(values)


@runtime_checkable
class Edged(Protocol):
    """A sparse kernel whose kept values are its blocks' largest (``topk.TopK.edges``)."""

    def edges(self, values: F32) -> F32: ...


def flip_edges(codec: Codec, values: F32) -> F32 | None:
    """For a sparse codec, per position of a decoded chunk: how large a value may be that one
    machine keeps and another drops (a tie at its block's smallest kept magnitude that float32
    rounding breaks otherwise); None for a codec that keeps every position."""
    kernel = codec.kernel
    return kernel.edges(values) if codec.sparse and isinstance(kernel, Edged) else None


def warm_up(codec: Codec) -> None:
    """Import what ``codec`` needs now, not in the middle of the first round (torch takes seconds)."""
    for concrete in (codec,) if codec.picker is None else codec.picker.candidates:
        concrete.kernel.warm_up()
