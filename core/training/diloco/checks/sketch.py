"""Sketches: what a trainer answers of a round it replayed for the backbone, a few thousand
numbers in place of the blocks of work the backbone drew.

A count sketch of ``WIDTH`` buckets under a key: each value of the blocks falls in one bucket with
a sign, both from a hash of the key and the value's position, and a bucket holds the signed sum of
its values. A sketch is linear (the sketch of a difference is the difference of the sketches), and
its squared length estimates the squared length of what it sketched without bias, within a
relative standard deviation of sqrt(2 / ``WIDTH``) whatever the values (2 % at 4,096 buckets; the
lengths themselves within 1.1 %). So ``replay.judge`` of the member's blocks sketched against the
replayer's sketch measures the relative distance it measures on the blocks, within a few percent of
it: a float32 member at 0 stays at 0, and the nearest cheat measured (0.63, ten times the float32
limit) stays far from every limit.

The backbone draws the key anew for each replay it hands out, after the member sealed its work.
The hash is splitmix64, written out here: a random generator's stream may change between numpy
versions, and the backbone and a replayer must bucket alike. Sums are taken in float64, in
position order, and rounded to float32: the same values under the same key sketch to the same
bytes on every machine.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

WIDTH = 4096
"""Buckets of a sketch: 16 KiB answered for the 256 KiB of blocks a check draws in the demo (4 MiB
at a billion parameters)."""
MAX_KEY = (1 << 64) - 1

_GOLDEN = 0x9E3779B97F4A7C15
_MIX = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))


def sketch(values: npt.ArrayLike, key: int, width: int | None = None) -> npt.NDArray[np.float32]:
    """The sketch of ``values`` (flat, in the order both sides hold them) under ``key`` in
    ``width`` buckets (``WIDTH``): the values themselves where they are no more (``size``)."""
    width = WIDTH if width is None else width
    if not 0 <= key <= MAX_KEY:
        raise ValueError(f"a sketch's key is an unsigned 64-bit integer, not {key}")
    if width < 1:
        raise ValueError(f"a sketch has 1 or more buckets, not {width}")
    if np.size(values) <= width:
        return np.asarray(values, np.float32).ravel()
    flat = np.asarray(values, np.float64).ravel()
    # positions offset by the key, then mixed: uint64 arithmetic wraps, as splitmix64 wants
    offset = np.uint64((key * _GOLDEN) % (1 << 64))
    z = np.arange(flat.size, dtype=np.uint64) + offset
    z = (z ^ (z >> np.uint64(30))) * _MIX[0]
    z = (z ^ (z >> np.uint64(27))) * _MIX[1]
    z ^= z >> np.uint64(31)
    bucket = (z % np.uint64(width)).astype(np.intp)
    sign = 1.0 - 2.0 * (z >> np.uint64(63)).astype(np.float64)
    return np.bincount(bucket, weights=sign * flat, minlength=width).astype(np.float32)


def size(values: int, width: int | None = None) -> int:
    """How many numbers the sketch of ``values`` numbers holds."""
    return min(values, WIDTH if width is None else width)
