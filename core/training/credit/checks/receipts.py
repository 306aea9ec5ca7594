"""Work receipts: a trainer's word for each microbatch it computed, and the calls that check it.

A trainer keeps one ``WorkReceipt`` per microbatch of its recent epochs: the samples it counted,
the SHA-256 of the batch, the loss and the gradient's fingerprint (``fingerprint``), and the epoch
of the parameters it computed at. A checker asks for an epoch's receipts (``WORK_RECEIPTS``), which
bind the trainer before it knows which of them will be looked at, then for a few of the batches
(``WORK_BATCH``), and recomputes them. Every field is bounded: a reply is a stranger's data.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.net.wire.rpc import Method
from core.util.errors import WireFormatError
from core.util.wire import WireMessage

MAX_RECEIPTS = 8192
"""Microbatches in one epoch of one trainer: far more than any target batch needs."""
MAX_SAMPLES = 2**31
MAX_EPOCH = 2**53
DIGEST_BYTES = 32
FINGERPRINT_SIZE = 64
"""Coordinates in a fingerprint (``fingerprint``): 256 bytes in float32 per microbatch."""
FINGERPRINT_BYTES = FINGERPRINT_SIZE * 4
MAX_BATCH_BYTES = 64 * 2**20
"""A microbatch, inflated: token ids of a large batch of long sequences fit many times over."""
MAX_BATCH_TENSORS = 16
PRECISIONS = ("float32", "bfloat16", "float16")
"""What the trainer computed in: the checker's tolerance depends on it (``tolerance``)."""


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise WireFormatError(message)


@dataclass(frozen=True, slots=True)
class WorkReceipt(WireMessage):
    samples: int
    digest: bytes
    """SHA-256 of the batch (``fingerprint.batch_digest``)."""
    loss: float
    fingerprint: bytes
    """The gradient at the fingerprint's coordinates, float32 little-endian."""
    params_epoch: int
    """The epoch of the parameters the gradient was computed at."""
    parameters: bytes = b""
    """Those parameters' values at the fingerprint's coordinates, float32 little-endian: what the
    checker compares its snapshot of that epoch with before it judges the gradient (empty: not
    said; the gradient is judged at the snapshot)."""

    def __post_init__(self) -> None:
        _check(0 < self.samples < MAX_SAMPLES, "a receipt counts 1 or more samples")
        _check(
            len(self.parameters) in (0, FINGERPRINT_BYTES),
            "a receipt's parameters are 64 floats or none",
        )
        _check(len(self.digest) == DIGEST_BYTES, "a receipt's digest is a SHA-256")
        _check(len(self.fingerprint) == FINGERPRINT_BYTES, "a receipt's fingerprint is 64 floats")
        _check(0 <= self.params_epoch < MAX_EPOCH, "a receipt's parameter epoch is out of range")
        _check(self.loss == self.loss and abs(self.loss) < 1e30, "a receipt's loss is not finite")


@dataclass(frozen=True, slots=True)
class ReceiptsRequest(WireMessage):
    epoch: int


@dataclass(frozen=True, slots=True)
class EpochReceipts(WireMessage):
    epoch: int
    precision: str
    receipts: list[WorkReceipt]

    def __post_init__(self) -> None:
        _check(0 <= self.epoch < MAX_EPOCH, "an epoch is out of range")
        _check(self.precision in PRECISIONS, f"precision is one of {', '.join(PRECISIONS)}")
        _check(len(self.receipts) <= MAX_RECEIPTS, f"an epoch has at most {MAX_RECEIPTS} receipts")

    @property
    def samples(self) -> int:
        return sum(r.samples for r in self.receipts)


@dataclass(frozen=True, slots=True)
class BatchRequest(WireMessage):
    epoch: int
    index: int


@dataclass(frozen=True, slots=True)
class SampledBatch(WireMessage):
    """One microbatch's tensors, their bytes one after another, deflated."""

    names: list[str]
    dtypes: list[str]
    shapes: list[list[int]]
    data: bytes
    stored: list[str] = field(default_factory=list)
    """The dtype each tensor's bytes travel in: an integer tensor's values in the narrowest
    signed integers that hold them (token ids of a 50,000-word vocabulary in int32, of the demo's
    in int16); empty where every tensor travels in its own."""

    def __post_init__(self) -> None:
        _check(len(self.data) <= MAX_BATCH_BYTES, f"a batch is at most {MAX_BATCH_BYTES} bytes")


WORK_RECEIPTS = Method("work.receipts", ReceiptsRequest, EpochReceipts)
WORK_BATCH = Method("work.batch", BatchRequest, SampledBatch)
