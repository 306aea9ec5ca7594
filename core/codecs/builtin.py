"""The codecs Barnraise ships, in ``CODECS``: the one table that every other list derives from.

Error bounds (``max_abs_error``, which the tests check): none 0; float16 half a float16 step
(relative 2^-11) for values within +/-65504; uniform 8-bit (max-min)/510; blockwise 8-bit, per
block, absmax/254; top-k, the largest value it drops (``core.codecs.topk``). ``auto`` picks
per tensor by size: small tensors go as float16, large ones as
blockwise 8-bit.

Each kernel module is imported by its ``make_kernel``, on first use: the table itself loads
neither numpy nor torch.
"""

from __future__ import annotations

from core.codecs.by_size import BySize
from core.codecs.spec import Codec, Kernel, Tuning
from core.codecs.table import CodecTable

TOPK_DENSITY = 0.01
TOPK_BITS = 2
"""What the table's ``topk`` keeps, and what a manifest's ``averaging.density`` and ``bits`` are
unless it sets them (``core.codecs.topk.top_k`` makes the codec at its own)."""
AUTO_FP16_BELOW = 1 << 16
"""``auto`` sends tensors of fewer values as float16, larger ones as blockwise 8-bit."""


def _raw() -> Kernel:
    from core.codecs.raw import Raw  # noqa: PLC0415 - numpy loads with the first chunk

    return Raw()


def _half() -> Kernel:
    from core.codecs.half import Half  # noqa: PLC0415 - numpy and torch load with the first chunk

    return Half()


def _uniform8() -> Kernel:
    from core.codecs.uniform8 import Uniform8  # noqa: PLC0415 - numpy loads with the first chunk

    return Uniform8()


def _topk() -> Kernel:
    from core.codecs.topk import TopK  # noqa: PLC0415 - as in _half

    return TopK(TOPK_DENSITY, TOPK_BITS)


def _topk_sum(contributions: int) -> Codec:
    from core.codecs.topk import top_k  # noqa: PLC0415 - as in _half

    return top_k(TOPK_DENSITY, TOPK_BITS).for_sum(contributions)


def _topk_whole(contributions: int) -> Codec:
    from core.codecs.topk import top_k  # noqa: PLC0415 - as in _half

    return top_k(TOPK_DENSITY, TOPK_BITS).for_whole_sum(contributions)


def _topk_at(density: float, bits: int) -> Codec:
    from core.codecs.topk import top_k  # noqa: PLC0415 - as in _half

    return top_k(density, bits)


def _blockwise8() -> Kernel:
    from core.codecs.blockwise8 import Blockwise8  # noqa: PLC0415 - as in _half

    return Blockwise8()


NONE = Codec("none", 0, bytes_per_value=4.0, make_kernel=_raw, activations=True)
FP16 = Codec("fp16", 1, bytes_per_value=2.0, make_kernel=_half, activations=True)
UINT8 = Codec("uint8", 2, bytes_per_value=1.0, make_kernel=_uniform8, aliases=("8bit",))
BLOCKWISE8 = Codec("blockwise8", 3, bytes_per_value=1.0, make_kernel=_blockwise8)
TOPK = Codec(
    "topk",
    10,
    # 12-bit positions and the codes, and each block's bounds (two float32 per 4096 values)
    bytes_per_value=TOPK_DENSITY * (1.5 + TOPK_BITS / 8) + 8 / 4096,
    make_kernel=_topk,
    tuning=Tuning(bits=(2, 4, 8), make=_topk_at),
    summed=_topk_sum,
    whole=_topk_whole,
)
AUTO = Codec(
    "auto",
    9,
    bytes_per_value=2.0,
    picker=BySize(small=FP16, large=BLOCKWISE8, below=AUTO_FP16_BELOW),
)

CODECS = CodecTable((NONE, FP16, UINT8, BLOCKWISE8, AUTO, TOPK))
"""The built-in table, in the order manifests' error messages list the names."""
