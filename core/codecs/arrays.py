"""The arrays every kernel reads and writes: float32 values in, bytes out, and back.

Kernels are vectorized (no per-element Python) and written against numpy 2.4's rules: explicit
dtypes, no deprecated casting.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
Buffer = bytes | bytearray | memoryview
"""What an encoded chunk arrives as: a received frame, a buffer filled in place, or a view."""

SUBNORMAL_SCALE_ERROR = 256 * float(np.finfo(np.float32).smallest_subnormal)
"""A float32 scale in the subnormal range is itself coarse: up to 255 codes times its spacing."""


def writable(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """torch shares only writable memory; read-only input (bytes) is copied."""
    return array if array.flags.writeable else array.copy()
