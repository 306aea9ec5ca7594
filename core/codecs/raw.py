"""``none``: float32 values as they are, four bytes each."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.codecs.arrays import F32, Buffer


@dataclass(frozen=True)
class Raw:
    def encoded_size(self, count: int) -> int:
        return count * 4

    def encode(self, values: F32) -> memoryview:
        return values.data.cast("B")

    def decode(self, data: Buffer, count: int, out: F32) -> None:
        out[:] = np.frombuffer(data, dtype=np.float32, count=count)

    def error_bound(self, values: F32) -> float:
        return 0.0

    def warm_up(self) -> None:
        pass
