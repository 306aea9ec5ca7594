"""RoundLedger: a diloco trainer's receipts of its last rounds, and the calls a checker makes.

On the training thread, before each forward pass, ``computing`` notes which parameters the
microbatch is computed at (``DilocoState.moves``), and after its backward pass ``witness`` keeps
the batch (on the host) as the one whose gradient is in ``.grad``. On the loop, under the
optimizer's lock: ``begin`` says where the round started (before its first step), ``stepped``
files the batch under the open round once its inner step is taken (a step skipped for a
non-finite gradient files nothing: the replay skips it too), ``moved`` notes the parameters'
moves a replay makes too (the round before landing; with overlap, the round's start at the
anchor), and ``seal`` files the round that ends, with its work, before its exchange (and so
before any check of it is drawn). With overlap, the landing of the round before comes mid-round:
the receipt says after which step (``RoundOpening``). A gradient computed at parameters that were
left before its step (a microbatch that was computing while a round ended or landed) is one no
replay gives: the optimizer leaves it out (``stale``, ``discard``). A move nobody told the ledger
of (a download) makes the round unreplayable, and its steps go on. The last ``KEPT`` sealed rounds
are served: the receipt whole, a batch by its step, the work by its block. A trainer that is
stopping answers that it is (``leave``): a check then did not reach it, and it is not accused of
refusing one.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.averaging.sharing.digest import block_digests
from core.net.errors import InvalidRequestError, NotFoundError, UnavailableError
from core.net.host.host import Host
from core.net.wire.rpc import CallContext
from core.training.credit.checks.fingerprint import Batch, batch_digest, batch_tensors, pack_batch
from core.training.credit.checks.linger import Linger
from core.training.credit.checks.receipts import SampledBatch
from core.training.diloco.checks.receipts import (
    MAX_STEPS,
    ROUND_BATCH,
    ROUND_RECEIPT,
    ROUND_WORK,
    BlockRequest,
    RoundOpening,
    RoundReceipt,
    RoundRequest,
    StepEntry,
    StepRequest,
    WorkBlock,
    work_block_bytes,
)
from core.util.errors import WireFormatError

log = logging.getLogger(__name__)

KEPT = 3
"""Sealed rounds served: a check is drawn when a round lands and replays a member's round, which
takes the backbone about as long as the round took the member."""


@dataclass(frozen=True, slots=True)
class Start:
    """Where a round began, as the receipt says it."""

    epoch: int
    state: str
    schedule: float
    per_round: float
    from_anchor: bool
    """The round's first step was taken at the anchor, with fresh inner moments."""
    moves: int = -1
    """Which parameters the round began at (``DilocoState.moves``; -1: not said)."""


@dataclass(slots=True)
class _Pending:
    batch: Batch
    entry: StepEntry
    moves: int
    """Which parameters its gradient was computed at (``DilocoState.moves``; -1: not said)."""


@dataclass(slots=True)
class _Landing:
    after: int
    """Steps the open round took before the last round landed."""
    to: Start
    """Where the landing put the round."""
    left: int
    """``DilocoState.moves`` before the landing."""
    straddles: bool = False
    """The first step after it was computed before it."""


@dataclass(frozen=True, slots=True)
class Sealed:
    receipt: RoundReceipt
    batches: list[Batch]
    work: bytes
    """The round's work, float32 little-endian."""
    moves: int = -1
    """``DilocoState.moves`` when the round began (-1: not known)."""
    ended: int = -1
    """``DilocoState.moves`` of the round's last steps (-1: not known)."""


class RoundLedger:
    """One trainer's round receipts (see the module's map)."""

    def __init__(self, precision: str) -> None:
        self.precision = precision
        self._lock = threading.Lock()
        self._pending: _Pending | None = None
        self._computing = -1
        """Which parameters the microbatch computing now started at (``computing``)."""
        self._start: Start | None = None
        self._landing: _Landing | None = None
        """With overlap: where the last round landed in the open round."""
        self._segment = -1
        """Which parameters the open round's steps are computed at now (``DilocoState.moves``)."""
        self._told = 0
        """Moves the ledger was told of since the last round sealed (``moved``)."""
        self._told_first = 0
        """Of those, the ones before the open round's first step."""
        self._stale = False
        self._steps: list[StepEntry] = []
        self._batches: list[Batch] = []
        self._sealed: OrderedDict[int, Sealed] = OrderedDict()
        self.discarded = 0
        """Microbatches left out because they were computed before their round began."""
        self.leaving = False
        self.linger = Linger()
        """Since the last round sealed or check call (a stopping trainer waits on it)."""

    # ---- the training thread ---------------------------------------------------------------------

    def computing(self, moves: int) -> None:
        """A microbatch's forward pass starts at the parameters ``moves`` names."""
        self._computing = moves

    def witness(self, batch: Any, loss: float) -> None:
        """The microbatch whose gradients are in ``.grad`` now."""
        host = {name: t.detach().to("cpu") for name, t in batch_tensors(batch).items()}
        samples = int(next(iter(host.values())).shape[0])
        entry = StepEntry(samples, batch_digest(host))
        with self._lock:
            self._pending = _Pending(host, entry, self._computing)

    # ---- the loop, under the optimizer's lock ----------------------------------------------------

    @property
    def started(self) -> bool:
        """The open round's start is known (its first step was taken or is being taken)."""
        return self._start is not None

    @property
    def stale(self) -> bool:
        """The witnessed microbatch was computed at parameters the open round has left (the
        last round's, as it ended, or the anchor's before a landing): the optimizer leaves it
        out (``discard``)."""
        pending = self._pending
        return (
            pending is not None
            and self._start is not None
            and min(pending.moves, self._segment) >= 0
            and pending.moves < self._segment
            and not self._straddles(pending)
        )

    def _straddles(self, pending: _Pending) -> bool:
        """``pending`` was computed just before the landing and is the first step after it: a
        replay computes its gradient before the landing moves the parameters, as the member did,
        and steps after (``RoundOpening.straddles``)."""
        landing = self._landing
        return (
            landing is not None
            and not landing.straddles
            and landing.after == len(self._steps)
            and pending.moves == landing.left
            and self._segment == landing.to.moves
        )

    def discard(self) -> None:
        """The witnessed microbatch takes no step."""
        with self._lock:
            self._pending = None
        self.discarded += 1

    def begin(self, start: Start) -> None:
        """The open round starts from ``start`` (told before its first inner step)."""
        self._start = start
        self._segment = start.moves
        self._told_first = self._told

    def moved(self, to: Start) -> None:
        """The parameters moved as a replay moves them too: the last round landed (``to``: where
        that put the open round), or with overlap, the next round starts at the anchor."""
        self._told += 1
        if self._start is None:
            return  # the round's first step is yet to come: it begins from here
        if self._landing is not None:
            self._stale = True  # a second landing mid-round: a receipt tells of one
        self._landing = _Landing(len(self._steps), to, self._segment)
        self._segment = to.moves

    def stepped(self, taken: bool) -> None:
        """The inner step of the witnessed microbatch was ``taken`` (else it was skipped)."""
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is None or not taken:
            return
        if self._straddles(pending):
            assert self._landing is not None
            self._landing.straddles = True
        elif min(pending.moves, self._segment) >= 0 and pending.moves != self._segment:
            # computed at parameters the round has left (a step the optimizer took anyway), or
            # after a move nobody told of (a download): no replay gives it; the round goes on
            self._stale = True
            self._segment = max(self._segment, pending.moves)
        if len(self._steps) < MAX_STEPS:
            self._steps.append(pending.entry)
            self._batches.append(pending.batch)
        else:
            self._stale = True  # a round longer than a receipt holds: nobody can replay it

    def seal(
        self,
        work: np.ndarray,
        state: str,
        epoch: int,
        carried: int = 0,
        since: int | None = None,
        *,
        now: Start | None = None,
    ) -> RoundReceipt | None:
        """The open round ends with ``work`` (flat float32) while the outer state's digest is
        ``state``, and goes out with the round of ``epoch`` (``carried``: with samples of work
        measured in earlier rounds, the oldest at ``since``): file its receipt under ``epoch``
        (None when the round took no step and carries nothing, or no start was given; ``now``:
        where the parameters stand, the start of a round that took no step). Samples carried from
        the round just before, whose own receipt is kept and replayable, leave this one
        replayable: a checker replays both (``backs``); any others make it unreplayable, as does
        a round of carried samples alone (a restart's unsent work going out before the first
        step): it is filed all the same, since the round is sent with their weight, and a sent
        round with no receipt is a forged one."""
        start, steps, batches = self._start, self._steps, self._batches
        stale, landing, ended, told = self._stale, self._landing, self._segment, self._told_first
        self._start, self._steps, self._batches, self._stale = None, [], [], False
        self._landing, self._segment, self._told, self._told_first = None, -1, 0, 0
        if start is None and not steps and carried:
            start = now
        if start is None or not (steps or carried):
            return None
        raw = np.ascontiguousarray(work, dtype="<f4").tobytes()
        last = start if landing is None else landing.to
        why = (
            "it took no step, only work of earlier rounds" if not steps
            else "it did not start at the anchor with fresh moments" if not start.from_anchor
            else "it took a step computed at other parameters" if stale
            else "the anchor moved during it" if state != last.state or epoch != last.epoch
            else "a landing moved it by more than an epoch" if last.epoch - start.epoch > 1
            else "it carries work of earlier rounds"
            if not self.backs(start, epoch, carried, since, told)
            else ""
        )  # fmt: skip
        if why:
            log.info("the round of epoch %d cannot be replayed: %s", epoch, why)
        opening = (
            None
            if landing is None
            else RoundOpening(
                landing.after, start.state, start.schedule, start.per_round, landing.straddles
            )
        )
        try:
            receipt = RoundReceipt(
                epoch=epoch,
                state=last.state,
                schedule=last.schedule,
                per_round=last.per_round,
                precision=self.precision,
                replayable=not why,
                steps=steps,
                work=block_digests([np.frombuffer(raw, np.uint8)], work_block_bytes(work.size)),
                carried=carried,
                opening=opening,
            )
        except WireFormatError as exc:  # the round goes on; only its check cannot
            log.warning("the round of epoch %d has no receipt: %s", epoch, exc)
            return None
        self._sealed.pop(epoch, None)
        self._sealed[epoch] = Sealed(receipt, batches, raw, start.moves, ended)
        self.linger.touch()
        while len(self._sealed) > KEPT:
            self._sealed.popitem(last=False)
        return receipt

    def backs(
        self, start: Start, epoch: int, carried: int, since: int | None, told: int = 1
    ) -> bool:
        """Whether the receipt of the round just before ``epoch``'s backs ``carried`` samples
        computed from ``since`` on: all of them from that round, which began at the anchor,
        carried nothing itself, counted at least as many, and after whose last step the only
        moves up to ``start`` were the ``told`` ones (``moved``; no download: the anchors follow
        one another, as the backbone's do, so a check finds all or none)."""
        if carried == 0:
            return True
        before = self._sealed.get(epoch - 1)
        return (
            since == epoch - 1
            and before is not None
            and before.receipt.replayable
            and before.receipt.carried == 0
            and before.receipt.samples >= carried
            and before.ended >= 0
            and start.moves == before.ended + told
        )

    def sealed(self, epoch: int) -> Sealed | None:
        return self._sealed.get(epoch)

    # ---- serving checkers ------------------------------------------------------------------------

    def serve(self, host: Host) -> None:
        host.router.add(ROUND_RECEIPT, self._on_receipt)
        host.router.add(ROUND_BATCH, self._on_batch)
        host.router.add(ROUND_WORK, self._on_work)

    def leave(self) -> None:
        """The trainer is stopping: checks from now on are told so (``UnavailableError``), never
        "no such method", which would fail them while its host still answers."""
        self.leaving = True

    async def _on_receipt(self, ctx: CallContext, request: RoundRequest) -> RoundReceipt:
        return self._round_of(request.epoch).receipt

    async def _on_batch(self, ctx: CallContext, request: StepRequest) -> SampledBatch:
        batches = self._round_of(request.epoch).batches
        if not 0 <= request.index < len(batches):
            raise InvalidRequestError(f"round {request.epoch} has no inner step {request.index}")
        return pack_batch(batches[request.index])

    async def _on_work(self, ctx: CallContext, request: BlockRequest) -> WorkBlock:
        sealed = self._round_of(request.epoch)
        count = len(sealed.receipt.work)
        if not 0 <= request.index < count:
            raise InvalidRequestError(f"round {request.epoch}'s work has no block {request.index}")
        block = work_block_bytes(len(sealed.work) // 4)
        at = request.index * block
        return WorkBlock(sealed.work[at : at + block])

    def _round_of(self, epoch: int) -> Sealed:
        self.linger.touch()
        if self.leaving:
            raise UnavailableError("this trainer is leaving")
        sealed = self._sealed.get(epoch)
        if sealed is None:
            raise NotFoundError(f"no receipt of the round from epoch {epoch} is kept here")
        return sealed
