"""How well a model predicts held-out tokens: mean cross-entropy per predicted token and top-1
accuracy.

Both are totals over every predicted token of the set divided by their count, not means of batch
means, so a short last batch weighs what its tokens weigh. A masked model is scored at its masked
positions (labels other than -100); a causal model at every next token (logits at t against the
label at t + 1), as its training loss is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


@dataclass(frozen=True)
class Measured:
    loss: float | None
    """None when not finite (a diverged model)."""
    accuracy: float
    tokens: int
    samples: int


def measure(
    model: torch.nn.Module, batches: Iterable[dict[str, torch.Tensor]], *, causal: bool
) -> Measured:
    """Score ``model`` on ``batches`` (on the device of its first parameter), under ``no_grad``
    and in eval mode; the model's mode is put back afterwards."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    loss_sum = torch.zeros((), dtype=torch.float64)
    right = tokens = samples = 0
    try:
        with torch.no_grad():
            for batch in batches:
                ids = batch["input_ids"].to(device)
                mask = batch["attention_mask"].to(device)
                labels = batch["labels"].to(device)
                logits = model(ids, mask).logits.float()
                if causal:
                    logits, labels = logits[:, :-1], labels[:, 1:]
                flat_logits = logits.reshape(-1, logits.size(-1))
                flat_labels = labels.reshape(-1)
                loss_sum += (
                    F.cross_entropy(
                        flat_logits, flat_labels, ignore_index=IGNORE_INDEX, reduction="sum"
                    )
                    .double()
                    .cpu()
                )
                scored = flat_labels != IGNORE_INDEX
                right += int((flat_logits.argmax(-1)[scored] == flat_labels[scored]).sum())
                tokens += int(scored.sum())
                samples += ids.size(0)
    finally:
        model.train(was_training)
    if not tokens:
        return Measured(None, 0.0, 0, samples)
    loss = float(loss_sum) / tokens
    return Measured(loss if math.isfinite(loss) else None, right / tokens, tokens, samples)
