"""What a receipt says about one microbatch: the digest of its batch and its gradient's fingerprint.

The fingerprint is the microbatch's gradient read at ``FINGERPRINT_SIZE`` fixed coordinates of the model's
parameters. It costs one gather per microbatch, and nobody can produce it without the gradient of
that batch at those parameters: a gradient of one small batch is mostly noise around the mean, so
neither the last round's average nor another batch's gradient lands near it (the claims benchmark
measures both). The coordinates are the same on every peer (a fixed seed over the parameters'
shapes), so the checker reads the same ones from the gradient it recomputes; knowing them in advance
helps a cheat no more than knowing the batch does.

Batches travel compressed (``pack_batch``): integer tensors in the narrowest signed integers that
hold their values, then deflated; token ids of a small vocabulary shrink about fifteen times.
"""

from __future__ import annotations

import hashlib
import math
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from core.training.credit.checks.receipts import (
    FINGERPRINT_SIZE,
    MAX_BATCH_BYTES,
    MAX_BATCH_TENSORS,
    SampledBatch,
)
from core.util.errors import WireFormatError

SEED = 0x5EED
"""The coordinates' seed: fixed, so that every peer and every checker reads the same ones."""
_DTYPES = {
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "uint8": torch.uint8,
    "bool": torch.bool,
    "float32": torch.float32,
}
"""What a batch may hold: token ids, masks, labels, and float inputs for other models."""
_NARROWER = {"int8": torch.int8, "int16": torch.int16, "int32": torch.int32}
"""What an integer tensor of a batch may travel in, where narrower than its own dtype."""
_SIGNED = (torch.int16, torch.int32, torch.int64)

Batch = Mapping[str, torch.Tensor]


def coordinates(
    shapes: Sequence[Sequence[int]], count: int = FINGERPRINT_SIZE
) -> list[tuple[int, int]]:
    """``count`` (tensor, flat index) pairs: a tensor drawn uniformly among the non-empty ones,
    then a position in it. Drawn per tensor rather than per value, so that a large embedding whose
    rows most batches never touch does not take every coordinate."""
    sizes = [int(np.prod(shape)) for shape in shapes]
    usable = [i for i, n in enumerate(sizes) if n > 0]
    if not usable:
        raise ValueError("a fingerprint needs parameters")
    rng = np.random.default_rng(SEED)
    picks = rng.choice(len(usable), size=count)
    return sorted((usable[int(t)], int(rng.integers(sizes[usable[int(t)]]))) for t in picks)


class Fingerprinter:
    """Reads the fingerprint from the gradients in ``.grad`` of ``parameters`` (any device)."""

    def __init__(self, parameters: Sequence[torch.nn.Parameter]) -> None:
        picked = coordinates([tuple(p.shape) for p in parameters])
        by_tensor: dict[int, list[int]] = {}
        for tensor, flat in picked:
            by_tensor.setdefault(tensor, []).append(flat)
        self._parameters = list(parameters)
        self._where = [
            (t, torch.tensor(flats, dtype=torch.long)) for t, flats in sorted(by_tensor.items())
        ]

    def read(self) -> np.ndarray:
        """The fingerprint of the gradients now in ``.grad`` (a missing one reads as zeros)."""
        parts = []
        for tensor, flats in self._where:
            p = self._parameters[tensor]
            if p.grad is None:
                parts.append(torch.zeros(len(flats), dtype=torch.float32))
                continue
            grad = p.grad.detach().reshape(-1)
            parts.append(grad[flats.to(grad.device)].to(torch.float32))
        return torch.cat([part.cpu() for part in parts]).numpy()

    def read_parameters(self) -> np.ndarray:
        """The parameters' own values at the fingerprint's coordinates: which parameters a
        gradient was computed at, as the checker's snapshot can be compared with
        (``parameters_at``)."""
        parts = []
        for tensor, flats in self._where:
            values = self._parameters[tensor].detach().reshape(-1)
            parts.append(values[flats.to(values.device)].to(torch.float32))
        return torch.cat([part.cpu() for part in parts]).numpy()


def parameters_at(parameters: Sequence[torch.Tensor]) -> np.ndarray:
    """``Fingerprinter.read_parameters`` of a list of tensors (a checker's snapshot)."""
    picked = coordinates([tuple(p.shape) for p in parameters])
    return np.array([float(parameters[t].reshape(-1)[i]) for t, i in picked], dtype=np.float32)


def relative_distance(a: np.ndarray, b: np.ndarray) -> float:
    """``|a - b| / |b|`` (L2; 0 where both are zero, infinite where only ``b`` is)."""
    scale = float(np.linalg.norm(b))
    gap = float(np.linalg.norm(np.asarray(a, np.float64) - np.asarray(b, np.float64)))
    if scale == 0:
        return 0.0 if gap == 0 else math.inf
    return gap / scale


def precision_name(dtype: torch.dtype | None) -> str:
    """A receipt's name for the precision a trainer computes in (None: full, float32)."""
    return "float32" if dtype is None else str(dtype).removeprefix("torch.")


def to_bytes(fingerprint: np.ndarray) -> bytes:
    return np.ascontiguousarray(fingerprint, dtype="<f4").tobytes()


def from_bytes(raw: bytes) -> np.ndarray:
    return np.frombuffer(raw, dtype="<f4").astype(np.float64)


def batch_tensors(batch: Any) -> dict[str, torch.Tensor]:
    """The batch as named tensors: a dict of tensors as it is, a lone tensor as ``input``."""
    if isinstance(batch, torch.Tensor):
        return {"input": batch}
    if isinstance(batch, Mapping) and all(isinstance(v, torch.Tensor) for v in batch.values()):
        return {str(k): v for k, v in batch.items()}
    raise TypeError(f"work receipts take a tensor or a dict of tensors, not {type(batch).__name__}")


def batch_digest(batch: Batch) -> bytes:
    """SHA-256 over the batch's names, dtypes, shapes and bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(batch):
        tensor = batch[name].detach().to("cpu").contiguous()
        digest.update(
            f"{name}|{str(tensor.dtype).removeprefix('torch.')}|{list(tensor.shape)}|".encode()
        )
        digest.update(tensor.numpy().tobytes())
    return digest.digest()


def pack_batch(batch: Batch) -> SampledBatch:
    names = sorted(batch)
    tensors = [batch[n].detach().to("cpu").contiguous() for n in names]
    kept = [_narrowest(t) for t in tensors]
    raw = b"".join(t.numpy().tobytes() for t in kept)
    return SampledBatch(
        names=names,
        dtypes=[_name(t.dtype) for t in tensors],
        shapes=[list(t.shape) for t in tensors],
        data=zlib.compress(raw, 6),
        stored=[_name(t.dtype) for t in kept],
    )


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _narrowest(tensor: torch.Tensor) -> torch.Tensor:
    """A signed integer tensor in the narrowest signed integers that hold its values; any other
    as it is."""
    if tensor.dtype not in _SIGNED or tensor.numel() == 0:
        return tensor
    low, high = int(tensor.min()), int(tensor.max())
    for dtype in _NARROWER.values():
        if dtype.itemsize >= tensor.dtype.itemsize:
            break
        if torch.iinfo(dtype).min <= low and high <= torch.iinfo(dtype).max:
            return tensor.to(dtype)
    return tensor


def unpack_batch(packed: SampledBatch) -> dict[str, torch.Tensor]:
    """The batch ``pack_batch`` made; ``WireFormatError`` for anything that is not one (sizes
    checked before anything is inflated beyond them)."""
    if not 0 < len(packed.names) <= MAX_BATCH_TENSORS:
        raise WireFormatError(f"a batch holds 1 to {MAX_BATCH_TENSORS} tensors")
    stored = packed.stored or packed.dtypes
    if not len(packed.names) == len(packed.dtypes) == len(packed.shapes) == len(stored):
        raise WireFormatError("a batch lists as many names, dtypes, shapes and stored dtypes")
    if len(set(packed.names)) != len(packed.names):
        raise WireFormatError("a batch names a tensor twice")
    sizes, whole = [], 0
    for dtype, kept, shape in zip(packed.dtypes, stored, packed.shapes, strict=True):
        if dtype not in _DTYPES:
            raise WireFormatError(f"a batch tensor of dtype {dtype!r} is not taken")
        if kept != dtype and not (
            kept in _NARROWER
            and _DTYPES[dtype] in _SIGNED
            and _NARROWER[kept].itemsize < _DTYPES[dtype].itemsize
        ):
            raise WireFormatError(f"a batch tensor of dtype {dtype} does not travel as {kept!r}")
        if len(shape) > 8 or any(not isinstance(d, int) or d < 0 for d in shape):
            raise WireFormatError("a batch tensor's shape is out of range")
        count = int(np.prod(shape, dtype=np.int64))
        sizes.append(count * _stored_dtype(kept).itemsize)
        whole += count * _DTYPES[dtype].itemsize
    if whole > MAX_BATCH_BYTES:
        raise WireFormatError(f"a batch is at most {MAX_BATCH_BYTES} bytes")
    expected = sum(sizes)
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(packed.data, expected + 1)
    except zlib.error as exc:
        raise WireFormatError(f"a batch's bytes do not inflate: {exc}") from None
    if len(raw) != expected or inflater.unconsumed_tail:
        raise WireFormatError("a batch's bytes do not match its shapes")
    out: dict[str, torch.Tensor] = {}
    offset = 0
    for name, dtype, kept, shape, size in zip(
        packed.names, packed.dtypes, stored, packed.shapes, sizes, strict=True
    ):
        array = (
            torch.frombuffer(bytearray(raw[offset : offset + size]), dtype=_stored_dtype(kept))
            if size
            else torch.empty(0, dtype=_stored_dtype(kept))
        )
        out[name] = array.reshape(shape).to(_DTYPES[dtype])
        offset += size
    return out


def _stored_dtype(name: str) -> torch.dtype:
    return _NARROWER.get(name) or _DTYPES[name]
