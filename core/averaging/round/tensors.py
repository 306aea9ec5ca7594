"""The tensors being averaged, seen as flat float32 views that are read and written in place.

A CPU float32 contiguous tensor (torch or numpy) is used directly; anything else (another dtype, a GPU
tensor, a non-contiguous one) gets a float32 copy that is written back by ``commit()``. Chunks never
cross tensor boundaries, so every chunk is a view into exactly one tensor.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.codecs import Codec
from core.codecs.arrays import F32


@dataclass(frozen=True, slots=True)
class Span:
    """Elements ``[start, end)`` of the concatenated vector, inside one tensor, with its codec."""

    tensor: int
    start: int
    end: int
    codec: Codec
    """How members send the chunk to its reducer."""
    back: Codec | None = None
    """How the reducer sends the mean back, if not in ``codec`` (a sparse codec's mean is denser
    than each contribution: ``Codec.for_sum``)."""

    @property
    def count(self) -> int:
        return self.end - self.start

    @property
    def returned(self) -> Codec:
        return self.codec if self.back is None else self.back


class TensorSet:
    """Flat float32 views of a list of tensors, and the way back."""

    def __init__(self, tensors: Sequence[Any]) -> None:
        self._originals = list(tensors)
        self.views: list[F32] = []
        self._copies: list[int] = []
        for index, tensor in enumerate(self._originals):
            view, copied = _as_view(tensor)
            self.views.append(view)
            if copied:
                self._copies.append(index)
        self.sizes = [view.size for view in self.views]
        self.offsets = list(np.cumsum([0, *self.sizes])[:-1])
        self.total = int(sum(self.sizes))

    def view(self, span: Span) -> F32:
        base = self.offsets[span.tensor]
        return self.views[span.tensor][span.start - base : span.end - base]

    def commit(self) -> None:
        """Write results back into tensors that had to be copied (other dtypes, GPU)."""
        for index in self._copies:
            _write_back(self._originals[index], self.views[index])

    def shapes(self) -> list[list[int]]:
        return [
            list(getattr(t, "shape", (v.size,)))
            for t, v in zip(self._originals, self.views, strict=True)
        ]


def _as_view(tensor: Any) -> tuple[F32, bool]:
    if isinstance(tensor, np.ndarray):
        if tensor.dtype == np.float32 and tensor.flags.c_contiguous:
            return tensor.reshape(-1), False
        return np.ascontiguousarray(tensor, dtype=np.float32).reshape(-1), True
    # a torch tensor (imported lazily: the averager must not pull torch in where it is not used)
    detached = tensor.detach()
    if (
        detached.device.type == "cpu"
        and str(detached.dtype) == "torch.float32"
        and detached.is_contiguous()
    ):
        return detached.numpy().reshape(-1), False
    return detached.to("cpu").float().contiguous().numpy().reshape(-1).copy(), True


def _write_back(tensor: Any, values: F32) -> None:
    if isinstance(tensor, np.ndarray):
        tensor[...] = values.reshape(tensor.shape)
        return
    import torch  # noqa: PLC0415 - only torch tensors get here; averaging numpy needs no torch

    tensor.data.copy_(
        torch.from_numpy(values).reshape(tensor.shape).to(tensor.device, tensor.dtype)
    )


def layout(
    sizes: Sequence[int],
    parts: Sequence[int],
    chunk_elements: int,
    codec: Codec,
    contributions: int = 1,
) -> list[list[Span]]:
    """The chunks of every part: parts are consecutive ranges of the concatenated vector (sized by
    ``parts``), cut into chunks of at most ``chunk_elements`` that never cross a tensor boundary.
    ``contributions``: how many members may send a chunk (what a sparse codec's mean holds)."""
    bounds = np.cumsum([0, *sizes])
    codecs = [codec.resolve(size) for size in sizes]
    backs = [c.for_sum(contributions) if c.sparse else None for c in codecs]
    result: list[list[Span]] = []
    start = 0
    tensor = 0
    for part_size in parts:
        end = start + part_size
        spans: list[Span] = []
        position = start
        while position < end:
            while bounds[tensor + 1] <= position:
                tensor += 1
            stop = min(end, int(bounds[tensor + 1]), position + chunk_elements)
            spans.append(Span(tensor, position, stop, codecs[tensor], backs[tensor]))
            position = stop
        result.append(spans)
        start = end
    return result


def schema_hash(sizes: Sequence[int], codec: Codec, chunk_elements: int) -> bytes:
    """Members must agree on the tensors' sizes and on how chunks are cut and encoded."""
    text = f"{list(sizes)}|{codec.wire_id}|{codec.name}|{chunk_elements}".encode()
    return hashlib.sha256(text).digest()[:16]
