"""What a replayer fetches of a member's round: every inner step's batch, each the one the
round's receipt names (the backbone, and a trainer it asks to replay, fetch them alike)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import torch

from core.net.errors import MalformedResponseError
from core.training.credit.checks.fingerprint import batch_digest, unpack_batch
from core.training.credit.checks.receipts import SampledBatch
from core.training.credit.checks.verdict import Caught
from core.training.diloco.checks.receipts import RoundReceipt, StepRequest
from core.util.errors import WireFormatError

Batch = dict[str, torch.Tensor]
AskBatch = Callable[[StepRequest], Awaitable[SampledBatch]]
"""Asks the member for one inner step's batch (``ROUND_BATCH``)."""


async def round_batches(ask: AskBatch, receipt: RoundReceipt) -> list[Batch]:
    """Every inner step's batch of the round of ``receipt``, asked one by one; ``Caught`` for a
    batch that is not the one the receipt names, or holds fewer samples than it counts."""
    batches = []
    for index, step in enumerate(receipt.steps):
        try:
            batch = unpack_batch(await ask(StepRequest(receipt.epoch, index)))
        except (WireFormatError, MalformedResponseError) as exc:
            raise Caught("round_malformed", 0.0, f"inner step {index}: {exc}", index) from None
        if batch_digest(batch) != step.digest:
            reason = f"inner step {index}'s batch is not the one its receipt names"
            raise Caught("round_batch", 0.0, reason, index)
        if int(next(iter(batch.values())).shape[0]) < step.samples:
            reason = f"inner step {index}'s batch holds fewer samples than its receipt counts"
            raise Caught("round_unbacked", step.samples, reason, index)
        batches.append(batch)
    return batches
