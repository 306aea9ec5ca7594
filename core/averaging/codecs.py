"""How tensor chunks travel: raw float32, float16, or 8 bits per value (uniform or per block).

Inputs and outputs are numpy float32 arrays. The work is vectorized (no per-element Python): float16
and blockwise 8-bit run on torch's kernels over the same memory (``torch.from_numpy`` shares it), which
convert about 60 and 4 times faster than numpy's; uniform 8-bit stays in numpy, which is faster there.
Everything is written against numpy 2.4's rules (explicit dtypes, no deprecated casting); torch is
imported on first use, so averaging without these codecs needs no torch.

``Codec.AUTO`` picks per tensor by size: small tensors go as float16, large ones as blockwise 8-bit
(whose per-block scales keep the error of each block proportional to that block's own range).

Error bounds (what ``max_abs_error`` returns and the tests check): none 0; float16 half a float16 step
(relative 2^-11) for values within +/-65504; uniform 8-bit (max-min)/510; blockwise 8-bit, per block,
absmax/254.
"""

from __future__ import annotations

import enum
import struct
from typing import Any

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
        return _encode_fp16(values)
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
    _expect(data, encoded_size(codec, count), codec)
    if codec is Codec.NONE:
        result[:] = np.frombuffer(data, dtype=np.float32, count=count)
    elif codec is Codec.FP16:
        halves = _writable(np.frombuffer(data, dtype=np.float16, count=count))
        _torch().from_numpy(result).copy_(_torch().from_numpy(halves))
    elif codec is Codec.UINT8:
        low, step = _HEADER.unpack_from(data, 0)
        codes = np.frombuffer(data, dtype=np.uint8, count=count, offset=_HEADER.size)
        np.multiply(codes, np.float32(step), out=result, casting="unsafe")
        result += np.float32(low)
    elif codec is Codec.BLOCKWISE8:
        _decode_blockwise(data, count, result)
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
    # A float32 scale in the subnormal range is itself coarse: up to 255 codes times its spacing.
    tiny = 256 * float(np.finfo(np.float32).smallest_subnormal)
    if codec is Codec.UINT8:
        return (float(values.max()) - float(values.min())) / 510.0 * 1.0001 + tiny
    if codec is Codec.BLOCKWISE8:
        padded = np.zeros(-(-values.size // BLOCK) * BLOCK, dtype=np.float32)
        padded[: values.size] = np.abs(values)
        return float(padded.reshape(-1, BLOCK).max(axis=1).max()) / 254.0 * 1.0001 + tiny
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


def warm_up(codec: Codec) -> None:
    """Import what ``codec`` needs now, not in the middle of the first round (torch takes seconds)."""
    if codec in (Codec.FP16, Codec.BLOCKWISE8, Codec.AUTO):
        _torch()


def _torch() -> Any:
    import torch  # noqa: PLC0415 - imported on first use: plain averaging needs no torch

    return torch


def _writable(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """torch shares only writable memory; read-only input (bytes) is copied."""
    return array if array.flags.writeable else array.copy()


def _encode_fp16(values: F32) -> memoryview:
    torch = _torch()
    source = torch.from_numpy(_writable(values))
    halves = torch.clamp(source, -_FP16_MAX, _FP16_MAX).to(torch.float16)
    encoded: npt.NDArray[np.float16] = halves.numpy()
    return encoded.data.cast("B")


def _encode_blockwise(values: F32) -> memoryview:
    torch = _torch()
    count = values.size
    blocks = -(-count // BLOCK)
    out = np.empty(blocks * 4 + count, dtype=np.uint8)
    if count == 0:
        return out.data
    padded = torch.zeros(blocks * BLOCK, dtype=torch.float32)
    padded[:count] = torch.from_numpy(_writable(values))
    grid = padded.view(blocks, BLOCK)
    scales = grid.abs().amax(dim=1).div_(127.0)
    # An all-zero block has scale 0; divide it by 1 instead (a clamp would skew tiny nonzero blocks).
    divisor = torch.where(scales > 0, scales, torch.ones_like(scales)).unsqueeze(1)
    codes = grid.div(divisor).round_().clamp_(-127, 127).to(torch.int8)
    torch.from_numpy(out[: blocks * 4].view(np.float32)).copy_(scales)
    torch.from_numpy(out[blocks * 4 :].view(np.int8)).copy_(codes.view(-1)[:count])
    return out.data


def _decode_blockwise(data: bytes | bytearray | memoryview, count: int, result: F32) -> None:
    torch = _torch()
    blocks = -(-count // BLOCK)
    if count == 0:
        return
    scales = torch.from_numpy(_writable(np.frombuffer(data, dtype=np.float32, count=blocks)))
    codes = torch.from_numpy(
        _writable(np.frombuffer(data, dtype=np.int8, count=count, offset=blocks * 4))
    )
    target = torch.from_numpy(result)
    whole = (count // BLOCK) * BLOCK
    if whole:
        torch.mul(
            codes[:whole].view(-1, BLOCK),
            scales[: whole // BLOCK].unsqueeze(1),
            out=target[:whole].view(-1, BLOCK),
        )
    if whole < count:
        torch.mul(codes[whole:], scales[-1], out=target[whole:])
