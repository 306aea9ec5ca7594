"""``uint8``: one byte per value on a uniform grid from the chunk's minimum to its maximum.

The chunk starts with the grid (minimum and step, two float32). numpy is faster than torch here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from core.codecs.arrays import F32, SUBNORMAL_SCALE_ERROR, Buffer

HEADER = struct.Struct("<ff")


@dataclass(frozen=True)
class Uniform8:
    def encoded_size(self, count: int) -> int:
        return HEADER.size + count

    def encode(self, values: F32) -> bytes:
        low = float(values.min()) if values.size else 0.0
        high = float(values.max()) if values.size else 0.0
        step = (high - low) / 255.0 or 1.0
        codes = np.rint((values - np.float32(low)) / np.float32(step))
        np.clip(codes, 0, 255, out=codes)
        payload: bytes = codes.astype(np.uint8).tobytes()
        return HEADER.pack(low, step) + payload

    def decode(self, data: Buffer, count: int, out: F32) -> None:
        low, step = HEADER.unpack_from(data, 0)
        codes = np.frombuffer(data, dtype=np.uint8, count=count, offset=HEADER.size)
        np.multiply(codes, np.float32(step), out=out, casting="unsafe")
        out += np.float32(low)

    def error_bound(self, values: F32) -> float:
        """Half a step: (max - min) / 510."""
        spread = float(values.max()) - float(values.min())
        return spread / 510.0 * 1.0001 + SUBNORMAL_SCALE_ERROR

    def warm_up(self) -> None:
        pass
