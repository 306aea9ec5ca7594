"""How tensor chunks travel: raw float32, float16, or 8 bits per value (uniform or per block).

All codecs are vectorized numpy (no per-element Python) and written against numpy 2.4's rules: every
dtype is explicit and nothing relies on deprecated casting. ``Codec.AUTO`` picks per tensor by size:
small tensors go as float16, large ones as blockwise 8-bit (whose per-block scales keep the error of
each block proportional to that block's own range).

Error bounds (what ``max_abs_error`` returns and the tests check): none 0; float16 half a float16 step
(relative 2^-11) for values within +/-65504; uniform 8-bit (max-min)/510; blockwise 8-bit, per block,
absmax/254.
"""

from __future__ import annotations

import enum
import struct

import numpy as np
import numpy.typing as npt

from core.util.errors import WireFormatError

F32 = npt.NDArray[np.float32]
BLOCK = 4096
AUTO_FP16_BELOW = 1 << 16
_FP16_MAX = 65504.0
_HEADER = struct.Struct("<ff")


class Codec(enum.IntEnum):
    NONE = 0
    FP16 = 1
    UINT8 = 2
    BLOCKWISE8 = 3
    AUTO = 9

    def resolve(self, tensor_numel: int) -> Codec:
        """The concrete codec for a tensor of ``tensor_numel`` values."""
        if self is not Codec.AUTO:
            return self
        return Codec.FP16 if tensor_numel < AUTO_FP16_BELOW else Codec.BLOCKWISE8

    @classmethod
    def parse(cls, name: str) -> Codec:
        aliases = {
            "none": cls.NONE,
            "fp16": cls.FP16,
            "uint8": cls.UINT8,
            "8bit": cls.UINT8,
            "blockwise8": cls.BLOCKWISE8,
            "auto": cls.AUTO,
        }
        try:
            return aliases[name.lower()]
        except KeyError:
            raise ValueError(
                f"unknown compression {name!r}; use one of {sorted(aliases)}"
            ) from None


def encode(codec: Codec, values: F32) -> bytes | memoryview:
    """Encode a contiguous float32 array (``Codec.AUTO`` must be resolved first)."""
    if codec is Codec.NONE:
        return values.data.cast("B")
    if codec is Codec.FP16:
        return np.clip(values, -_FP16_MAX, _FP16_MAX).astype(np.float16).tobytes()
    if codec is Codec.UINT8:
        return _encode_uniform(values)
    if codec is Codec.BLOCKWISE8:
        return _encode_blockwise(values)
    raise ValueError(f"cannot encode with {codec!r}")


def decode(
    codec: Codec, data: bytes | bytearray | memoryview, count: int, out: F32 | None = None
) -> F32:
    """Decode ``count`` values; raises ``WireFormatError`` if ``data`` has the wrong size."""
    result = out if out is not None else np.empty(count, dtype=np.float32)
    if codec is Codec.NONE:
        _expect(data, count * 4, codec)
        result[:] = np.frombuffer(data, dtype=np.float32, count=count)
    elif codec is Codec.FP16:
        _expect(data, count * 2, codec)
        result[:] = np.frombuffer(data, dtype=np.float16, count=count)
    elif codec is Codec.UINT8:
        _expect(data, _HEADER.size + count, codec)
        low, step = _HEADER.unpack_from(data, 0)
        codes = np.frombuffer(data, dtype=np.uint8, count=count, offset=_HEADER.size)
        np.multiply(codes, np.float32(step), out=result, casting="unsafe")
        result += np.float32(low)
    elif codec is Codec.BLOCKWISE8:
        blocks = -(-count // BLOCK)
        _expect(data, blocks * 4 + count, codec)
        scales = np.frombuffer(data, dtype=np.float32, count=blocks)
        codes = np.frombuffer(data, dtype=np.int8, count=count, offset=blocks * 4)
        per_value = np.repeat(scales, BLOCK)[:count]
        np.multiply(codes, per_value, out=result, casting="unsafe")
    else:
        raise ValueError(f"cannot decode {codec!r}")
    return result


def encoded_size(codec: Codec, count: int) -> int:
    if codec is Codec.NONE:
        return count * 4
    if codec is Codec.FP16:
        return count * 2
    if codec is Codec.UINT8:
        return _HEADER.size + count
    if codec is Codec.BLOCKWISE8:
        return -(-count // BLOCK) * 4 + count
    raise ValueError(f"no size for {codec!r}")


def max_abs_error(codec: Codec, values: F32) -> float:
    """The worst error ``decode(encode(values))`` may have for these values."""
    if codec is Codec.NONE or values.size == 0:
        return 0.0
    if codec is Codec.FP16:
        return float(np.max(np.abs(values))) * 2.0**-11 + 2.0**-24
    if codec is Codec.UINT8:
        return (float(values.max()) - float(values.min())) / 510.0 * 1.0001
    if codec is Codec.BLOCKWISE8:
        padded = np.zeros(-(-values.size // BLOCK) * BLOCK, dtype=np.float32)
        padded[: values.size] = np.abs(values)
        return float(padded.reshape(-1, BLOCK).max(axis=1).max()) / 254.0 * 1.0001
    raise ValueError(f"no bound for {codec!r}")


def _expect(data: bytes | bytearray | memoryview, size: int, codec: Codec) -> None:
    if len(data) != size:
        raise WireFormatError(f"{codec.name} chunk has {len(data)} bytes, expected {size}")


def _encode_uniform(values: F32) -> bytes:
    low = float(values.min()) if values.size else 0.0
    high = float(values.max()) if values.size else 0.0
    step = (high - low) / 255.0 or 1.0
    codes = np.rint((values - np.float32(low)) / np.float32(step))
    np.clip(codes, 0, 255, out=codes)
    payload: bytes = codes.astype(np.uint8).tobytes()
    return _HEADER.pack(low, step) + payload


def _encode_blockwise(values: F32) -> bytes:
    count = values.size
    blocks = -(-count // BLOCK)
    padded = np.zeros(blocks * BLOCK, dtype=np.float32)
    padded[:count] = values
    grid = padded.reshape(blocks, BLOCK)
    scales = (np.abs(grid).max(axis=1) / np.float32(127.0)).astype(np.float32)
    safe = np.where(scales > 0, scales, np.float32(1.0)).astype(np.float32)
    codes = np.rint(grid / safe[:, None])
    np.clip(codes, -127, 127, out=codes)
    head: bytes = scales.tobytes()
    body: bytes = codes.astype(np.int8).reshape(-1)[:count].tobytes()
    return head + body
