"""``topk``: per block of ``block`` values, only the ``kept(n)`` values of largest magnitude travel,
each as its position in the block and a few bits; every other value decodes to 0.

What a sparse codec is for: sending a small fraction of a gradient (the caller keeps what was
dropped as its residual and adds it next round). ``fan_in`` sizes the codec for a sum or a mean of
up to ``fan_in`` such vectors, each with ``ceil(density * n)`` values a block: the union of their
supports fits, so re-encoding the sum drops nothing. A reducer's mean goes back with
``MEAN_FAN_IN`` (its largest values only; the senders keep the rest).

Selection: a block's values are ranked by magnitude (float32 bits without the sign, so NaN ranks
above infinity, and infinity above every finite value); ties at the smallest kept magnitude go to
the lowest positions. The choice is a function of the values alone, so the same input always gives
the same bytes.

The chunk, every number little-endian, for ``bits`` 2, 4 or 8:

- per block, two float32: ``lo`` and ``hi``, the smallest and largest magnitude it keeps;
- per block, its kept positions (ascending), blocks in order. With blocks of at most 4096 values a
  position takes 12 bits, two of them in three bytes (the first in the low 12 bits of the 24, the
  last pair padded with a zero position); with longer blocks, uint16. Positions are most of a
  sparse chunk's bytes, so the 4 bits saved are about a fifth of it;
- the codes, one per kept value in the same order, ``bits`` each, packed tightly: code ``i`` sits
  in bits ``(i % c) * bits`` up of byte ``i // c`` (``c = 8 // bits``; the first code in the low
  bits), the last byte padded with zero bits. A code's top bit is the sign, its other bits a level
  ``j`` in ``[0, L)``, ``L = 2 ** (bits - 1)``, and the magnitude is ``lo + (hi - lo) * (j + 0.5) /
  L`` (exactly ``lo`` where ``hi == lo``): a kept value is off by at most ``(hi - lo) / (2 L)``.
  With 4 or 8 bits, level 0 is an exact zero instead, ``lo`` is the smallest *nonzero* kept
  magnitude, and level ``j >= 1`` is ``lo + (hi - lo) * (j - 0.5) / (L - 1)``: the mean a reducer
  sends back keeps zeros where fewer members sent than it has room for, and they must stay zero.

For ``bits`` 16: the kept values as float16 (no ``lo``/``hi``), then the kept positions as above.
The fixed-width sections come first so that they stay aligned; the size depends on the count and
the kernel's fields only, never on the values.

Non-finite values do not fail: they rank first, so they are kept. With ``bits`` 16, NaN decodes to
NaN and infinities are clamped to float16's largest value (as ``fp16`` does). With fewer bits, a
block that keeps one gets a non-finite ``lo`` or ``hi``, and its kept values decode to NaN or
infinities: the damage shows, and stays in that block. ``error_bound`` is then infinite.

numpy only: the selection is one partition per block (vectorized over blocks) and every other step
runs over the kept values only.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from core.codecs.arrays import F32, SUBNORMAL_SCALE_ERROR, Buffer
from core.codecs.spec import Codec
from core.util.errors import WireFormatError

BLOCK = 4096
MAX_BLOCK = 1 << 16
"""Positions within a block travel as uint16 at most."""
PACKED_BLOCK = 1 << 12
"""Blocks up to this long send 12-bit positions."""
BITS = (2, 4, 8, 16)
FP16_MAX = 65504.0
WIRE_IDS_FROM = 1000
"""``top_k``'s wire ids lie above the built-in codecs'."""
BOUNDS_PER_VALUE = 8 / BLOCK
"""Each block's ``lo`` and ``hi`` (two float32), per value of the block."""
MEAN_FAN_IN = 1
"""How many contributions' worth of values a reducer's mean keeps per block: the mean of n sparse
contributions holds up to n times the values of one, and a reducer sends it to every other member,
so sending it whole made a member's upload grow with its group (a 1 B-parameter round took 159 s
at 20 Mbit/s in a group of 16). The mean keeps its largest values instead (a global top-k) and
each sender takes back into its residual what of its own the mean left out
(``core.averaging.round.feedback``): nothing is lost, it goes out in a later round."""

I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]


@dataclass(frozen=True)
class TopK:
    density: float
    """The fraction of each block one contribution keeps, in (0, 1]."""
    bits: int
    """2, 4 or 8: sign and level codes scaled per block; 16: float16 values."""
    fan_in: int = 1
    """How many contributions (each keeping ``ceil(density * n)`` a block) the encoded vector may
    sum: that many times as many values are kept."""
    block: int = BLOCK

    def __post_init__(self) -> None:
        if not 0.0 < self.density <= 1.0:
            raise ValueError(f"topk density must be in (0, 1], got {self.density!r}")
        if self.bits not in BITS:
            raise ValueError(f"topk bits must be one of {BITS}, got {self.bits!r}")
        if self.fan_in < 1:
            raise ValueError(f"topk fan_in must be at least 1, got {self.fan_in!r}")
        if not 1 <= self.block <= MAX_BLOCK:
            raise ValueError(f"topk block must be in [1, {MAX_BLOCK}], got {self.block!r}")

    def kept(self, n: int) -> int:
        """Values kept in a block of ``n`` values."""
        return 0 if n == 0 else min(n, self.fan_in * math.ceil(self.density * n))

    def total_kept(self, count: int) -> int:
        full, tail = divmod(count, self.block)
        return full * self.kept(self.block) + self.kept(tail)

    def encoded_size(self, count: int) -> int:
        kept = self.total_kept(count)
        if self.bits == 16:
            return kept * 2 + self.position_bytes(kept)
        blocks = -(-count // self.block)
        return blocks * 8 + self.position_bytes(kept) + -(-kept * self.bits // 8)

    def position_bytes(self, kept: int) -> int:
        return 3 * -(-kept // 2) if self.block <= PACKED_BLOCK else 2 * kept

    def encode(self, values: F32) -> memoryview:
        flat = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
        count = flat.size
        out = np.zeros(self.encoded_size(count), dtype=np.uint8)
        if count == 0:
            return out.data
        positions = self.select(flat)
        kept = flat[positions]
        kept_count = kept.size
        head = kept_count * 2 if self.bits == 16 else -(-count // self.block) * 8
        indices = (positions % self.block).astype(np.uint16)
        codes_at = head + self.position_bytes(kept_count)
        out[head:codes_at] = self.pack_positions(indices)
        if self.bits == 16:
            halves = np.clip(kept, -FP16_MAX, FP16_MAX).astype("<f2")
            out[:head] = halves.view(np.uint8)
            return out.data
        per_block = self.kept_per_block(count)
        starts = np.cumsum(per_block) - per_block
        magnitudes = np.abs(kept)
        lo, hi = self.bounds(magnitudes, starts)
        out[:head] = np.stack([lo, hi], axis=1).astype("<f4").reshape(-1).view(np.uint8)
        steps = self.steps
        lo64 = lo.astype(np.float64)
        # in float64: no overflow of steps / span, and the levels land where error_bound says
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            span = hi.astype(np.float64) - lo64
            scale = np.where(span > 0, steps / span, 0.0)
            above_lo = magnitudes - np.repeat(lo64, per_block)
            level = np.floor(above_lo * np.repeat(scale, per_block))
        # fmax/fmin turn NaN (a non-finite lo or hi) into level 0 instead of an invalid cast
        codes = np.fmin(np.fmax(level, 0.0), steps - 1).astype(np.uint8)
        if self.zero_code:
            codes += np.uint8(1)
            codes[magnitudes == 0] = 0
        codes |= np.signbit(kept).astype(np.uint8) << np.uint8(self.bits - 1)
        out[codes_at:] = self.pack(codes)
        return out.data

    def decode(self, data: Buffer, count: int, out: F32) -> None:
        if count == 0:
            return
        kept_count = self.total_kept(count)
        blocks = -(-count // self.block)
        head = kept_count * 2 if self.bits == 16 else blocks * 8
        per_block = self.kept_per_block(count)
        indices = self.unpack_positions(data, head, kept_count)
        lengths = np.full(blocks, self.block, dtype=np.int64)
        lengths[-1] = count - (blocks - 1) * self.block
        if np.any(indices >= np.repeat(lengths, per_block)):
            raise WireFormatError("topk chunk has a position beyond its block")
        block_of = np.repeat(np.arange(blocks, dtype=np.int64) * self.block, per_block)
        positions = block_of + indices
        if np.any(np.diff(positions) <= 0):
            raise WireFormatError("topk chunk has a block whose positions do not ascend")
        target = out[:count]
        target.fill(0.0)
        if self.bits == 16:
            halves = np.frombuffer(data, dtype="<f2", count=kept_count)
            target[positions] = halves.astype(np.float32)
            return
        bounds = np.frombuffer(data, dtype="<f4", count=blocks * 2).astype(np.float64)
        lo = np.repeat(bounds[0::2], per_block)
        hi = np.repeat(bounds[1::2], per_block)
        codes = self.unpack(data, head + self.position_bytes(kept_count), kept_count)
        level = (codes & np.uint8((1 << (self.bits - 1)) - 1)).astype(np.float64)
        if self.zero_code:
            level -= 1.0  # -1: an exact zero
        fraction = (level + 0.5) / self.steps
        with np.errstate(invalid="ignore", over="ignore"):
            magnitude = np.where(hi == lo, lo, lo + (hi - lo) * fraction)
            if self.zero_code:
                magnitude = np.where(level < 0, 0.0, magnitude)
        negative = (codes >> np.uint8(self.bits - 1)).astype(bool)
        target[positions] = np.where(negative, -magnitude, magnitude).astype(np.float32)

    def error_bound(self, values: F32) -> float:
        """Per block, the larger of its largest dropped magnitude and its kept values' worst
        error: ``(hi - lo) / (2 L)`` (float16: half a float16 step, or the clamp beyond 65504),
        plus float32 rounding. Infinite when the values are not all finite."""
        flat = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
        count = flat.size
        if count == 0:
            return 0.0
        positions = self.select(flat)
        magnitudes = np.abs(flat)
        kept = magnitudes[positions]
        dropped = magnitudes.copy()
        dropped[positions] = 0.0
        block_starts = np.arange(0, count, self.block, dtype=np.int64)
        per_block = self.kept_per_block(count)
        kept_starts = np.cumsum(per_block) - per_block
        largest_dropped = np.maximum.reduceat(dropped, block_starts).astype(np.float64)
        lo32, hi32 = self.bounds(kept, kept_starts)
        lo, hi = lo32.astype(np.float64), hi32.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            if self.bits == 16:
                worst_kept = np.maximum(hi * 2.0**-11, hi - FP16_MAX) + 2.0**-24
            else:
                worst_kept = (hi - lo) / (2 * self.steps) + hi * 2.0**-23
            bound = float(np.max(np.maximum(largest_dropped, worst_kept)))
        if not math.isfinite(bound):
            return math.inf
        return bound * 1.0001 + SUBNORMAL_SCALE_ERROR

    @property
    def zero_code(self) -> bool:
        """With 4 bits or more, level 0 is an exact zero (what a mean's padding and a sparse
        input's zeros are), and nonzero magnitudes take the other levels; 2 bits have too few
        levels to give one up."""
        return 4 <= self.bits < 16

    @property
    def steps(self) -> int:
        """Levels for nonzero magnitudes between ``lo`` and ``hi``."""
        levels = 1 << (self.bits - 1)
        return levels - 1 if self.zero_code else levels

    def bounds(self, magnitudes: F32, starts: I64) -> tuple[F32, F32]:
        """Each block's ``lo`` and ``hi``: the smallest and largest kept magnitude (with a zero
        code, the smallest nonzero one; 0 where all are zero)."""
        hi: F32 = np.maximum.reduceat(magnitudes, starts)
        if not self.zero_code:
            lo: F32 = np.minimum.reduceat(magnitudes, starts)
            return lo, hi
        nonzero = np.where(magnitudes == 0, np.float32(np.inf), magnitudes)
        lo = np.minimum.reduceat(nonzero, starts)
        lo[hi == 0] = 0.0
        return lo, hi

    def warm_up(self) -> None:
        pass  # numpy only, imported with this module

    def edges(self, values: F32) -> F32:
        """For a decoded chunk: at every position, the smallest nonzero magnitude of its block
        (0 in a block of zeros). A value at most about this large may be kept on one machine and
        dropped on another whose float32 sums round otherwise (``chunks.flip_edges``)."""
        flat = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
        if flat.size == 0:
            return flat.copy()
        starts = np.arange(0, flat.size, self.block, dtype=np.int64)
        magnitudes = np.abs(flat)
        nonzero = np.where(magnitudes == 0, np.float32(np.inf), magnitudes)
        smallest = np.minimum.reduceat(nonzero, starts)
        smallest[~np.isfinite(smallest)] = 0.0
        edges: F32 = np.repeat(smallest, np.diff(np.append(starts, flat.size)))
        return edges

    def kept_per_block(self, count: int) -> I64:
        full, tail = divmod(count, self.block)
        per_block = np.full(full + (tail > 0), self.kept(self.block), dtype=np.int64)
        if tail:
            per_block[-1] = self.kept(tail)
        return per_block

    def select(self, values: F32) -> I64:
        """The kept values' positions in the chunk, ascending (so grouped by block)."""
        count = values.size
        # sign cleared, float32 bits order like magnitudes, NaN above infinity
        keys = values.view(np.uint32) & np.uint32(0x7FFFFFFF)
        chosen = np.empty(count, dtype=bool)
        whole = count - count % self.block
        for start, stop in ((0, whole), (whole, count)):  # the full blocks, then the short one
            if stop > start:
                n = min(self.block, stop - start)
                grid = keys[start:stop].reshape(-1, n)
                chosen[start:stop] = _top(grid, self.kept(n)).reshape(-1)
        return np.flatnonzero(chosen)

    def pack_positions(self, indices: npt.NDArray[np.uint16]) -> U8:
        if self.block > PACKED_BLOCK:
            return indices.astype("<u2").view(np.uint8)
        pairs = np.zeros(2 * -(-indices.size // 2), dtype=np.uint32)
        pairs[: indices.size] = indices
        joined = pairs[0::2] | (pairs[1::2] << np.uint32(12))  # 24 bits: first low, second high
        packed: U8 = joined.astype("<u4").view(np.uint8).reshape(-1, 4)[:, :3].reshape(-1)
        return packed

    def unpack_positions(self, data: Buffer, offset: int, kept_count: int) -> I64:
        if self.block > PACKED_BLOCK:
            return np.frombuffer(data, dtype="<u2", count=kept_count, offset=offset).astype(
                np.int64
            )
        triples = np.frombuffer(data, dtype=np.uint8, count=self.position_bytes(kept_count),
                                offset=offset).reshape(-1, 3).astype(np.int64)  # fmt: skip
        joined = triples[:, 0] | (triples[:, 1] << 8) | (triples[:, 2] << 16)
        indices: I64 = np.stack([joined & 0xFFF, joined >> 12], axis=1).reshape(-1)[:kept_count]
        return indices

    def pack(self, codes: U8) -> U8:
        shifts = np.arange(0, 8, self.bits, dtype=np.uint8)
        padded = np.zeros(-(-codes.size // shifts.size) * shifts.size, dtype=np.uint8)
        padded[: codes.size] = codes
        packed: U8 = np.bitwise_or.reduce(padded.reshape(-1, shifts.size) << shifts, axis=1)
        return packed

    def unpack(self, data: Buffer, offset: int, kept_count: int) -> U8:
        shifts = np.arange(0, 8, self.bits, dtype=np.uint8)
        packed = np.frombuffer(
            data, dtype=np.uint8, count=-(-kept_count * self.bits // 8), offset=offset
        )
        mask = np.uint8((1 << self.bits) - 1)
        codes: U8 = ((packed[:, None] >> shifts) & mask).reshape(-1)[:kept_count]
        return codes


def _top(keys: npt.NDArray[np.uint32], k: int) -> npt.NDArray[np.bool_]:
    """Per row, a mask of the ``k`` largest keys; ties at the ``k``-th go to the first columns."""
    n = keys.shape[1]
    if k == n:
        return np.ones(keys.shape, dtype=bool)
    threshold = np.partition(keys, n - k, axis=1)[:, n - k : n - k + 1]
    chosen = keys >= threshold
    # rows with more than k at or above the threshold (rare, but all-zero blocks are common)
    tied_rows = np.flatnonzero(np.count_nonzero(chosen, axis=1) > k)
    if tied_rows.size:
        rows = keys[tied_rows]
        level = threshold[tied_rows]
        above = rows > level
        room = k - np.count_nonzero(above, axis=1, keepdims=True)
        tied = rows == level
        rank = np.cumsum(tied, axis=1, dtype=np.int32)  # int32: many times faster than int64
        chosen[tied_rows] = above | (tied & (rank <= room))
    return chosen


def top_k(density: float, bits: int, fan_in: int = 1) -> Codec:
    """The spec for one setting. Its name says the setting, so ``density`` must be exactly what
    its name shows (six significant digits); the wire id is a hash of the name."""
    kernel = TopK(density, bits, fan_in)
    name = f"topk-{density:g}-{bits}bit" + (f"-x{fan_in}" if fan_in > 1 else "")
    if float(f"{density:g}") != density:
        raise ValueError(f"topk density {density!r} is not what its name {name!r} says")
    digest = hashlib.sha256(name.encode()).digest()
    wire_id = int.from_bytes(digest[:8], "big") % (1 << 31) + WIRE_IDS_FROM
    sent = fan_in == 1 and bits < 16
    return Codec(
        name,
        wire_id,
        # 12-bit positions and the codes, and each block's lo and hi (8 bytes in 4096); a block
        # keeps at most all of its values, however many contributions it sums
        bytes_per_value=min(1.0, density * fan_in) * (1.5 + bits / 8)
        + BOUNDS_PER_VALUE * (bits < 16),
        make_kernel=lambda: kernel,
        # a mean goes back in 8-bit codes, its largest values only (``MEAN_FAN_IN``)
        summed=(lambda n: top_k(density, 8, min(n, MEAN_FAN_IN))) if bits < 16 else None,
        whole=(lambda n: top_k(density, 8, n)) if sent else None,
    )
