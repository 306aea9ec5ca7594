"""WorkChecker: the backbone spot-checks the microbatches trainers claim, and holds credit until
a check supports it (``standing``).

When a gradient round of epoch E lands, the backbone picks members to check (``verdict.Verdicts.draw``).
For each it asks the member's receipts of E (``receipts``), compares their samples with what the
member's record claims, and recomputes ``SAMPLED`` microbatches chosen after the receipts are in:
the batch (whose digest must match), the loss and the gradient's fingerprint, at the parameters of
the receipt's epoch, which the backbone snapshotted before the round (its replica steps with the
trainers, so it holds exactly what they computed at). A neighbouring epoch's parameters are tried
too before anything is called a mismatch: with delayed updates a microbatch may straddle a step.
A mismatch, a batch counted twice, or claimed samples no receipt backs is signed evidence against
the member (``work_*``). A member that answers a check with a refusal (no such method, a request
it calls invalid, no permission, an error of its own) has failed it (``work_refused``): only a dial
that fails, a timeout or an answer that it is busy or closing is "unreached": the same epoch is
checked again at the next landings while the backbone keeps its parameters (``SNAPSHOTS``), the
member's claims held meanwhile, and then the check expires (``Standings.expired``).

The recomputation runs on the backbone's training thread in float32, on a copy of the model.
Random checks wait while recomputing them would take more than ``budget`` of the backbone's time;
a newcomer's, which its credit waits for, have a share of their own (``verdict.NEWCOMER_BUDGET``,
so that fresh identities cannot keep the backbone checking), and a project that asks for every
check (``work_checks`` = 1) gets every one (``verdict.Verdicts.draw``).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import random
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from core.net.errors import MalformedResponseError, NotFoundError
from core.net.host.host import Host
from core.training.credit.checks.fingerprint import (
    Fingerprinter,
    batch_digest,
    from_bytes,
    parameters_at,
    relative_distance,
    unpack_batch,
)
from core.training.credit.checks.receipts import (
    WORK_BATCH,
    WORK_RECEIPTS,
    BatchRequest,
    EpochReceipts,
    ReceiptsRequest,
    WorkReceipt,
)
from core.training.credit.checks.standing import Standings
from core.training.credit.checks.tolerance import Mismatch, compare
from core.training.credit.checks.verdict import (
    BUDGET,
    Apart,
    Caught,
    CheckRecord,
    Tally,
    Unclaimed,
    Verdicts,
)
from core.training.moderation.evidence import EvidenceBoard
from core.training.state import TrainingState
from core.trust.peer_id import PeerID
from core.util.errors import WireFormatError
from core.util.msgpack_codec import pack
from core.util.tasks import BackgroundTasks
from core.worker.bridge import TrainingBridge

log = logging.getLogger(__name__)

SAMPLED = 2
"""Microbatches recomputed per check: a peer that faked a share f of its receipts passes with
(1 - f)²."""
SNAPSHOTS = 3
"""Epochs of parameters kept to check against."""
CALL_TIMEOUT = 10.0
SEALED_WAIT = 10.0
"""Seconds a checker waits for a member to file the receipts of the epoch that just landed, and
for its record to claim it."""
IN_STEP = 1e-4
"""How far (relative L2, at the fingerprint's coordinates) the parameters a receipt says it was
computed at may lie from the backbone's snapshot of that epoch for the gradient to be judged
there. Replicas that step together differ by rounding (0 on one kind of machine, around 1e-7
between devices), while one inner step of the demo's LAMB moves a parameter by about 1e-2 of
itself: a trainer whose state went apart from the backbone's (a state round one of them missed)
computed at other parameters, and its gradient says nothing of its honesty there."""

LossFn = Callable[[torch.nn.Module, Any], torch.Tensor]


class WorkChecker:
    def __init__(
        self,
        state: TrainingState,
        host: Host,
        *,
        bridge: TrainingBridge,
        loss: LossFn,
        standings: Standings,
        evidence: EvidenceBoard,
        tasks: BackgroundTasks,
        claimed: Callable[[str, int], int | None],
        user_of: Callable[[str], str | None] = lambda _: None,
        on_check: Callable[[CheckRecord], None] | None = None,
        budget: float = BUDGET,
        rng: random.Random | None = None,
    ) -> None:
        """``host``: the backbone's, which calls the members; ``claimed(peer, epoch)``: the
        samples the peer's record claims for the epoch, None while none does."""
        self.state = state
        self._host = host
        self.bridge = bridge
        self.loss = loss
        self._tasks = tasks
        self._claimed = claimed
        self.verdicts = Verdicts(
            "work", standings, evidence, user_of=user_of, on_check=on_check, budget=budget, rng=rng
        )
        self._rng = self.verdicts.rng
        self._snapshots: OrderedDict[int, list[torch.Tensor]] = OrderedDict()
        self._marks: dict[int, np.ndarray] = {}
        """Each snapshot's values at the fingerprint's coordinates (``parameters_at``)."""
        self._copying: dict[int, asyncio.Task[None]] = {}
        self._model: torch.nn.Module | None = None
        self._fingerprint: Fingerprinter | None = None

    @property
    def standings(self) -> Standings:
        return self.verdicts.standings

    @property
    def records(self) -> list[CheckRecord]:
        """The newest checks (for tests and the benchmark; the log keeps them all)."""
        return self.verdicts.records

    # ---- the backbone's side ---------------------------------------------------------------------

    def snapshot_soon(self, epoch: int) -> None:
        """The replica's parameters now are those of ``epoch``: copy them on the training thread,
        without waiting behind the recomputations queued there (the round the backbone is about
        to join would start late). The copy is queued before anything the round changes them
        with, and checks wait for it."""
        self._copying[epoch] = self._tasks.spawn(
            f"snapshot-{epoch}", self.bridge.run(self.snapshot, epoch)
        )
        for old in [e for e in self._copying if e < epoch - SNAPSHOTS]:
            del self._copying[old]

    def snapshot(self, epoch: int) -> None:
        """On the training thread: the replica's parameters now are those of ``epoch``."""
        self._snapshots.pop(epoch, None)
        self._snapshots[epoch] = params = [
            p.detach().to("cpu", torch.float32).clone() for p in self.state.parameters
        ]
        self._marks[epoch] = parameters_at(params)
        while len(self._snapshots) > SNAPSHOTS:
            old, _ = self._snapshots.popitem(last=False)
            self._marks.pop(old, None)

    def landed(self, epoch: int, members: list[str]) -> None:
        """The round of ``epoch`` landed with these senders: check those that are due, and ask
        again those whose check could not reach them (``Verdicts.again``)."""
        for peer, before in self.verdicts.again(self._checkable, epoch):
            self._tasks.spawn(f"check-{peer[:8]}-{before}", self._check(peer, before))
        if not self._checkable(epoch):
            # the replica was not at this epoch: nothing to recompute against; a newcomer's first
            # check waits for its next round
            log.info("work checks: epoch %d not checked, the replica was not at it (members %s)",
                     epoch, ", ".join(peer[:12] for peer in members))  # fmt: skip
            return
        for peer in self.verdicts.draw(members):
            self._tasks.spawn(f"check-{peer[:8]}-{epoch}", self._check(peer, epoch))

    def _checkable(self, epoch: int) -> bool:
        """Whether the parameters of ``epoch`` are kept (or being copied) to check against."""
        return epoch in self._snapshots or epoch in self._copying

    # ---- one check -------------------------------------------------------------------------------

    async def _check(self, peer: str, epoch: int) -> CheckRecord:
        async def body(tally: Tally) -> None:
            receipts = await self._receipts(peer, epoch, tally)
            tally.claimed = await self._claim(peer, epoch)
            tally.backed = receipts.samples
            await self._verify(peer, epoch, receipts, tally)

        return await self.verdicts.run(peer, epoch, body)

    async def _receipts(self, peer: str, epoch: int, tally: Tally) -> EpochReceipts:
        """The member's receipts of ``epoch``, waiting a little for it to file them."""
        deadline = time.monotonic() + SEALED_WAIT
        while True:
            try:
                receipts: EpochReceipts = await self._host.call(
                    PeerID.from_string(peer), WORK_RECEIPTS, ReceiptsRequest(epoch),
                    timeout=CALL_TIMEOUT,
                )  # fmt: skip
                tally.received += len(pack(receipts.to_wire()))
                return receipts
            except NotFoundError:
                if time.monotonic() <= deadline:
                    await asyncio.sleep(0.2)
                    continue
                if self._claimed(peer, epoch) is None:
                    # it never claimed the epoch (its own round did not land it)
                    raise Unclaimed(f"keeps no receipts of epoch {epoch} and claims none") from None
                raise Caught(
                    "work_unbacked", 0.0, f"claims epoch {epoch} and keeps no receipts of it"
                ) from None
            except MalformedResponseError as exc:
                raise Caught("work_malformed", 0.0, f"malformed receipts: {exc}") from None

    async def _claim(self, peer: str, epoch: int) -> int:
        deadline = time.monotonic() + SEALED_WAIT
        while (claimed := self._claimed(peer, epoch)) is None:
            if time.monotonic() > deadline:
                return 0  # no record claims it (yet): nothing to compare
            await asyncio.sleep(0.2)
        return claimed

    async def _verify(self, peer: str, epoch: int, receipts: EpochReceipts, tally: Tally) -> None:
        entries = receipts.receipts
        if tally.claimed > receipts.samples:
            raise Caught(
                "work_unbacked",
                tally.claimed / max(1, receipts.samples),
                f"claims {tally.claimed} samples, its receipts back {receipts.samples}",
            )
        if len({(r.digest, r.params_epoch) for r in entries}) != len(entries):
            # an honest trainer computes a batch once at the same parameters (``WorkLedger.
            # fresh``): the same gradient twice is one computation counted twice
            reason = "a batch is counted twice at the same parameters among the receipts"
            raise Caught("work_repeated", 0.0, reason)
        for index in self._rng.sample(range(len(entries)), min(SAMPLED, len(entries))):
            receipt = entries[index]
            try:
                packed = await self._host.call(
                    PeerID.from_string(peer), WORK_BATCH, BatchRequest(epoch, index),
                    timeout=CALL_TIMEOUT,
                )  # fmt: skip
                tally.received += len(pack(packed.to_wire()))
                batch = unpack_batch(packed)
            except (WireFormatError, MalformedResponseError, NotFoundError) as exc:
                raise Caught("work_malformed", 0.0, f"microbatch {index}: {exc}", index) from None
            if batch_digest(batch) != receipt.digest:
                reason = f"microbatch {index} is not the batch its receipt names"
                raise Caught("work_batch", 0.0, reason, index)
            if int(next(iter(batch.values())).shape[0]) < receipt.samples:
                reason = f"microbatch {index} holds fewer samples than its receipt counts"
                raise Caught("work_unbacked", receipt.samples, reason, index)
            mismatch = await self._recheck(receipt, batch, receipts.precision, tally)
            tally.sampled += 1
            if mismatch is not None:
                reason = f"microbatch {index}: {mismatch.reason}"
                raise Caught(mismatch.statistic, mismatch.value, reason, index)

    async def _recheck(
        self,
        receipt: WorkReceipt,
        batch: dict[str, torch.Tensor],
        precision: str,
        tally: Tally,
    ) -> Mismatch | None:
        """None when the parameters of the receipt's epoch, or of a neighbouring one, give what it
        says; else the mismatch at the first epoch tried."""
        claimed = from_bytes(receipt.fingerprint)
        at = from_bytes(receipt.parameters) if receipt.parameters else None
        first: Mismatch | None = None
        tried = False
        nearest = math.inf
        for epoch in (receipt.params_epoch, receipt.params_epoch - 1, receipt.params_epoch + 1):
            if (copying := self._copying.get(epoch)) is not None:
                await asyncio.shield(copying)
            params = self._snapshots.get(epoch)
            if params is None:
                continue
            if at is not None:
                apart = relative_distance(at, self._marks[epoch])
                nearest = min(nearest, apart)
                if apart > IN_STEP:
                    continue  # not the parameters it computed at: nothing to judge here
            tried = True
            loss, recomputed, spent = await self.bridge.run(self._recompute, params, batch)
            tally.compute += spent
            compared = compare(receipt, claimed, loss, recomputed, precision)
            if compared.mismatch is None:
                tally.margin = max(tally.margin, compared.margin)
                return None
            first = first or compared.mismatch
        if not tried and math.isfinite(nearest):
            raise Apart(
                f"its parameters of epoch {receipt.params_epoch} lie {nearest:.2g} from the "
                f"backbone's (at most {IN_STEP:g} to judge)"
            )
        if not tried:
            raise NotFoundError(f"no parameters of epoch {receipt.params_epoch} to check against")
        return first

    def _recompute(
        self, params: list[torch.Tensor], batch: dict[str, torch.Tensor]
    ) -> tuple[float, np.ndarray, float]:
        """On the training thread: the loss and fingerprint of ``batch`` at ``params``, and the
        seconds they took (not counting the wait for the thread)."""
        started = time.perf_counter()
        if self._model is None:
            self._model = copy.deepcopy(self.state.model).to("cpu", torch.float32)
            self._fingerprint = Fingerprinter(
                [p for p in self._model.parameters() if p.requires_grad]
            )
        model, fingerprint = self._model, self._fingerprint
        assert fingerprint is not None
        trainable = [p for p in model.parameters() if p.requires_grad]
        with torch.no_grad():
            for p, value in zip(trainable, params, strict=True):
                p.copy_(value)
        model.train()
        model.zero_grad(set_to_none=True)
        loss = self.loss(model, batch)
        loss.backward()  # type: ignore[no-untyped-call]
        found = fingerprint.read()
        model.zero_grad(set_to_none=True)
        return float(loss.detach()), found, time.perf_counter() - started
