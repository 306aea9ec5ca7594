"""One codec's spec: its names, its wire id, its kernel (or how it picks one), its rough cost.

A ``Codec`` is plain data that every layer can read without numpy or torch: the manifest checks
names, the engine costs bytes, the MoE wire checks ids. Its ``Kernel`` (encode, decode, encoded
size, error bound) is built on first use by ``make_kernel``, so that numpy and torch load with the
first chunk, not with the table.

Kernels are pure functions of their input and of their own parameters (a frozen dataclass's
fields: a block size, a fraction of values kept, bits per value). A codec with parameters is one
spec per setting, with its own name and wire id, so that both ends of a chunk agree on them; state
across rounds (error feedback) belongs to the caller, which encodes ``values + residual``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from core.codecs.arrays import F32, Buffer


class Kernel(Protocol):
    """How a concrete codec turns float32 values into bytes and back."""

    def encoded_size(self, count: int) -> int:
        """Bytes for ``count`` values. Receivers read exactly this many, so it may depend on the
        count and the kernel's parameters, never on the values."""
        ...

    def encode(self, values: F32) -> bytes | memoryview:
        """``values``: contiguous, any count (0 included)."""
        ...

    def decode(self, data: Buffer, count: int, out: F32) -> None:
        """Write ``count`` values into ``out``; ``data`` has ``encoded_size(count)`` bytes."""
        ...

    def error_bound(self, values: F32) -> float:
        """The worst absolute error ``decode(encode(values))`` may have for these (non-empty)
        values: a bound relative to them (their largest magnitude, their range, per block) is
        computed here."""
        ...

    def warm_up(self) -> None:
        """Import what encoding needs now, not in the middle of the first round."""
        ...


class Picker(Protocol):
    """How a codec that is not concrete picks one for each tensor (``auto``)."""

    @property
    def candidates(self) -> tuple[Codec, ...]:
        """Every codec ``pick`` may return."""
        ...

    def pick(self, numel: int) -> Codec: ...


@dataclass(frozen=True)
class Tuning:
    """What a manifest may set of a codec (``averaging.density`` and ``averaging.bits``), and the
    codec those settings make: a sparse codec's share of values sent and bits per value."""

    bits: tuple[int, ...]
    """The bits per value it takes."""
    make: Callable[[float, int], Codec]
    """The codec at a density and a number of bits (a spec of its own per setting)."""


@dataclass(frozen=True, eq=False)
class Codec:
    """A codec: compared by identity, so a spec is the one in its table."""

    name: str
    """What manifests and command lines say (``averaging.codec``): lower case."""
    wire_id: int
    """What the MoE wire and averaging's schema hash carry; never reused for another codec."""
    bytes_per_value: float
    """A rough figure for estimates (the engine's network use): ``auto`` mostly sends fp16."""
    make_kernel: Callable[[], Kernel] | None = None
    """Builds the kernel on first use; None for a codec that picks one per tensor."""
    picker: Picker | None = None
    aliases: tuple[str, ...] = ()
    """Other names a command line may use (a manifest says ``name``)."""
    activations: bool = False
    """Fit for a mixture-of-experts' activations and gradients, which the expert call's wire
    accepts: nearly lossless (8-bit codecs are too lossy for them)."""
    tuning: Tuning | None = None
    """What a manifest may set of it (None: nothing; ``averaging.density`` and ``bits`` stay at
    their defaults)."""
    summed: Callable[[int], Codec] | None = None
    """For a sparse codec, whose mean of several chunks is denser than each: the codec that
    carries a mean of up to n of them back from a reducer (it may keep only the mean's largest
    values, whose senders then keep the rest for later). None: this codec carries it."""

    def __post_init__(self) -> None:
        if (self.make_kernel is None) == (self.picker is None):
            raise ValueError(f"codec {self.name!r} needs a kernel or a picker, and not both")
        for name in (self.name, *self.aliases):
            if not name or name != name.lower():
                raise ValueError(f"codec names are lower case and not empty, got {name!r}")
        if self.wire_id < 0:
            raise ValueError(f"codec {self.name!r} has a negative wire id")

    @property
    def concrete(self) -> bool:
        """Encodes by itself (not ``auto``, which picks a concrete codec per tensor)."""
        return self.picker is None

    @cached_property
    def kernel(self) -> Kernel:
        if self.make_kernel is None:
            raise ValueError(f"codec {self.name} picks a codec per tensor: resolve it first")
        return self.make_kernel()

    def resolve(self, numel: int) -> Codec:
        """The concrete codec for a tensor of ``numel`` values."""
        return self if self.picker is None else self.picker.pick(numel)

    @property
    def sparse(self) -> bool:
        """Its chunks keep a few values each, so a mean of them travels in another codec."""
        return self.summed is not None

    whole: Callable[[int], Codec] | None = None
    """For a sparse codec: the codec that carries a sum of up to n of its chunks with every value
    kept (a group's mean on its way to the other groups' reducers). None: this codec does."""

    def for_sum(self, contributions: int) -> Codec:
        """The codec for a mean of up to ``contributions`` chunks of this one."""
        return self if self.summed is None else self.summed(contributions)

    def for_whole_sum(self, contributions: int) -> Codec:
        """The codec that carries a sum of up to ``contributions`` chunks of this one whole."""
        return self if self.whole is None else self.whole(contributions)

    def __repr__(self) -> str:
        return f"Codec({self.name!r})"

    # compared by identity, so a copy (a deep-copied module or config) must be the spec itself
    def __copy__(self) -> Codec:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> Codec:
        return self
