"""A codec that Barnraise does not ship, for tests that add one to the table: float32 without its
lowest mantissa byte (three bytes a value, truncated towards zero, relative error below 2^-15)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.codecs import Codec
from core.codecs.arrays import F32, SUBNORMAL_SCALE_ERROR, Buffer


@dataclass(frozen=True)
class Float24:
    def encoded_size(self, count: int) -> int:
        return 3 * count

    def encode(self, values: F32) -> bytes:
        whole = np.ascontiguousarray(values, dtype="<f4").view(np.uint8).reshape(-1, 4)
        return whole[:, 1:].tobytes()

    def decode(self, data: Buffer, count: int, out: F32) -> None:
        whole = np.zeros((count, 4), dtype=np.uint8)
        whole[:, 1:] = np.frombuffer(data, dtype=np.uint8, count=3 * count).reshape(count, 3)
        out[:] = whole.view("<f4").reshape(-1)

    def error_bound(self, values: F32) -> float:
        # less than 2^8 float32 steps: 2^-15 of the value, or 2^8 subnormal steps near zero
        return float(np.max(np.abs(values))) * 2.0**-15 + SUBNORMAL_SCALE_ERROR

    def warm_up(self) -> None:
        pass


FLOAT24 = Codec(
    "float24", 77, bytes_per_value=3.0, make_kernel=Float24, aliases=("f24",), activations=True
)
