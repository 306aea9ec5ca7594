"""Round receipts: a diloco member's word for a round it computed, and the calls that check it.

When a round ends, before anyone can know whether it will be checked, a member files the round's
receipt (``RoundReceipt``): where the round began (the epoch and the digest of the outer state it
started from, the inner schedule's clock; with overlap, how many steps it took before the
round before landed, and where those began), one entry per inner step (the samples and the SHA-256 of
the batch), and the SHA-256 of each block of its work (``anchor - theta``, float32). A checker asks
for the receipt (``ROUND_RECEIPT``), then the batches (``ROUND_BATCH``), replays the round on its
own replica, and asks for a few blocks of the work (``ROUND_WORK``) to compare with its replay: a
block must match its digest, so the member cannot shape its answer after seeing which blocks are
asked for. The backbone may instead ask trainers it trusts to replay the round (``ROUND_REPLAY``,
``replayer``): it fetches the batches from the member once and relays them to each
(``ROUND_RELAY``), and each answers a sketch of the blocks of its replay (``sketch``). Every field
is bounded: a reply is a stranger's data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.net.wire.rpc import Method
from core.training.credit.checks.receipts import (
    DIGEST_BYTES,
    MAX_EPOCH,
    MAX_SAMPLES,
    PRECISIONS,
    SampledBatch,
)
from core.training.diloco.checks.sketch import MAX_KEY, WIDTH
from core.util.errors import WireFormatError
from core.util.wire import WireMessage

MAX_STEPS = 16384
"""Inner steps in one round of one member: a fast GPU takes tens of times a slow CPU's."""
MAX_BLOCKS = 65536
BLOCKS = 4096
"""Blocks a round's work is cut into, up to the largest block: a receipt of 128 KiB at most
below 4 billion parameters, and a check fetches a small part of the model (what it costs a member's
bytes grows with the block)."""
MIN_BLOCK_BYTES = 16 << 10
"""The smallest block: 4,096 parameters (a check compares 16,384 values, ``SAMPLED_BLOCKS``),
enough that rounding never decides a verdict; the demo's model in 309 blocks, a check fetching
64 KiB of its 5 MB."""
MAX_BLOCK_BYTES = 4 << 20
"""The largest block: half a frame (``NetConfig.max_frame_bytes``)."""


def work_block_bytes(values: int) -> int:
    """Bytes of work per block digest for a model of ``values`` parameters (float32): ``BLOCKS``
    blocks, a multiple of ``MIN_BLOCK_BYTES`` each, within the smallest and largest block."""
    wanted = -(-4 * max(1, values) // BLOCKS)
    rounded = -(-wanted // MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES
    return min(MAX_BLOCK_BYTES, rounded)


STATE_DIGEST_CHARS = 64
"""The outer state's digest, as ``DilocoState.digest`` writes it (hexadecimal SHA-256)."""


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise WireFormatError(message)


def _check_start(state: str, schedule: float, per_round: float) -> None:
    """Where a round's steps began: the outer state's digest and the schedule's clock."""
    _check(len(state) == STATE_DIGEST_CHARS, "a state digest is 64 hexadecimal digits")
    _check(
        math.isfinite(schedule) and 0 <= schedule < MAX_EPOCH, "a schedule's clock is out of range"
    )
    _check(
        math.isfinite(per_round) and 0 <= per_round < MAX_EPOCH, "a round's steps are out of range"
    )


@dataclass(frozen=True, slots=True)
class StepEntry(WireMessage):
    """One inner step: the samples its batch held and the batch's SHA-256
    (``credit.checks.fingerprint.batch_digest``)."""

    samples: int
    digest: bytes

    def __post_init__(self) -> None:
        _check(0 < self.samples < MAX_SAMPLES, "an inner step counts 1 or more samples")
        _check(len(self.digest) == DIGEST_BYTES, "a step's digest is a SHA-256")


@dataclass(frozen=True, slots=True)
class RoundOpening(WireMessage):
    """With overlap: the steps a round took before the last round landed (at the anchor of the
    epoch before the receipt's, with that epoch's schedule); the rest follow the landing."""

    steps: int
    state: str
    """The digest of the outer state those steps began from (``DilocoState.digest``)."""
    schedule: float
    per_round: float
    straddles: bool = False
    """The first step after the landing was computed before it (at the parameters it left):
    its gradient comes before the landing's move, its step after."""

    def __post_init__(self) -> None:
        _check(0 <= self.steps <= MAX_STEPS, "an opening's steps are out of range")
        _check_start(self.state, self.schedule, self.per_round)


@dataclass(frozen=True, slots=True)
class RoundReceipt(WireMessage):
    epoch: int
    """The epoch of the anchor the round's work is measured from (its landing makes
    ``epoch + 1``): where it began, or with an ``opening``, where the landing mid-round put it."""
    state: str
    """The digest of that outer state (``DilocoState.digest``)."""
    schedule: float
    """The inner schedule's clock then (``DilocoState.schedule``)."""
    per_round: float
    precision: str
    replayable: bool
    """False when the round did not start at the anchor or the anchor moved during it (a round
    that found no group goes on in the next; a download mid-round): nobody can replay it, and
    its check judges nothing."""
    steps: list[StepEntry]
    work: list[bytes]
    """SHA-256 of every ``work_block_bytes`` of the round's work, float32 little-endian."""
    carried: int = 0
    """Samples of earlier rounds' work that go out with this round (not in its steps). In a
    replayable round, all of them were computed in the round just before, whose own receipt
    counts them (that round landed less than half of its work)."""
    opening: RoundOpening | None = None
    """With overlap: the steps taken before the round of ``epoch - 1`` landed, and where they
    began (None: the round began at ``state``)."""

    def __post_init__(self) -> None:
        _check(0 <= self.epoch < MAX_EPOCH, "an epoch is out of range")
        _check_start(self.state, self.schedule, self.per_round)
        _check(self.precision in PRECISIONS, f"precision is one of {', '.join(PRECISIONS)}")
        _check(len(self.steps) <= MAX_STEPS, f"a round has at most {MAX_STEPS} inner steps")
        _check(0 < len(self.work) <= MAX_BLOCKS, f"a round's work has 1 to {MAX_BLOCKS} blocks")
        _check(all(len(d) == DIGEST_BYTES for d in self.work), "a work block's digest is a SHA-256")
        _check(0 <= self.carried < MAX_SAMPLES, "carried samples are out of range")
        _check(
            self.opening is None
            or (self.epoch > 0 and self.opening.steps + self.opening.straddles <= len(self.steps)),
            "an opening is of a round after the first, within its steps",
        )

    @property
    def samples(self) -> int:
        return sum(s.samples for s in self.steps)


@dataclass(frozen=True, slots=True)
class RoundRequest(WireMessage):
    epoch: int


@dataclass(frozen=True, slots=True)
class StepRequest(WireMessage):
    epoch: int
    index: int


@dataclass(frozen=True, slots=True)
class BlockRequest(WireMessage):
    epoch: int
    index: int


@dataclass(frozen=True, slots=True)
class WorkBlock(WireMessage):
    """``work_block_bytes`` of the round's work (the last block may be shorter)."""

    data: bytes

    def __post_init__(self) -> None:
        _check(
            0 < len(self.data) <= MAX_BLOCK_BYTES and len(self.data) % 4 == 0,
            f"a work block is 1 to {MAX_BLOCK_BYTES // 4} float32 values",
        )


MAX_ASKED_BLOCKS = 64
"""Blocks of a replay one call sketches at most."""
MAX_PEER_CHARS = 128


@dataclass(frozen=True, slots=True)
class ReplayRequest(WireMessage):
    """The backbone asks a trainer to replay a member's round (``replayer``)."""

    member: str
    """The member's peer id: whose round's batches the replayer asks the backbone for."""
    receipt: RoundReceipt
    """The round's receipt, as the backbone fetched it from the member and checked its claims."""
    blocks: list[int]
    """The blocks of the work to sketch, the ones the backbone drew, in this order."""
    key: int
    """The sketch's key (``sketch``), drawn for this replay."""

    def __post_init__(self) -> None:
        _check(0 < len(self.member) <= MAX_PEER_CHARS, "a member is named by its peer id")
        _check(
            0 < len(self.blocks) <= MAX_ASKED_BLOCKS,
            f"a replay sketches 1 to {MAX_ASKED_BLOCKS} blocks",
        )
        _check(
            all(0 <= b < len(self.receipt.work) for b in self.blocks),
            "a block asked for is not one of the round's work",
        )
        _check(len(set(self.blocks)) == len(self.blocks), "a block is asked for twice")
        _check(
            isinstance(self.key, int) and 0 <= self.key <= MAX_KEY,
            "a sketch's key is an unsigned 64-bit integer",
        )


@dataclass(frozen=True, slots=True)
class RelayRequest(WireMessage):
    """A replayer asks the backbone for one inner step's batch of the round it was asked to
    replay: the backbone fetched the round's batches from the member once, for every replayer."""

    member: str
    epoch: int
    index: int

    def __post_init__(self) -> None:
        _check(0 < len(self.member) <= MAX_PEER_CHARS, "a member is named by its peer id")


@dataclass(frozen=True, slots=True)
class ReplayedSketch(WireMessage):
    """The sketch of the replay's values of the blocks asked for, under the key asked for:
    float32 values, little-endian (``sketch.size`` of them)."""

    sketch: bytes
    fetched: int = 0
    """Bytes of the round's batches the replayer received."""

    def __post_init__(self) -> None:
        _check(0 <= self.fetched < 1 << 48, "fetched bytes are out of range")
        _check(
            0 < len(self.sketch) <= 4 * WIDTH and len(self.sketch) % 4 == 0,
            f"a replay's sketch is 1 to {WIDTH} float32 values",
        )


ROUND_RECEIPT = Method("round.receipt", RoundRequest, RoundReceipt)
ROUND_BATCH = Method("round.batch", StepRequest, SampledBatch)
ROUND_WORK = Method("round.work", BlockRequest, WorkBlock)
ROUND_REPLAY = Method("round.replay", ReplayRequest, ReplayedSketch)
ROUND_RELAY = Method("round.relay", RelayRequest, SampledBatch)
