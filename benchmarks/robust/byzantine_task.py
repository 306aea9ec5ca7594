"""The task of the Byzantine runs: a small regression MLP, four seeded shards, and the reference.

Every microbatch is a trainer's whole shard, so a trainer's gradient depends only on the model's
state, and an honest collaboration takes the steps of full-batch SGD over the four shards in one
process: ``reference``, the clean run without the jitter of a collaboration's timing
(``tests/training/dedloc/test_collaborative.py`` shows that equivalence). ``within`` measures a run against
it; ``data_gap`` is how far a perfect defence lands from it, having lost one shard of four.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence

import torch

TRAINERS = 4
DIM, HIDDEN, SHARD, EVAL = 16, 16, 16384, 4096
"""Inputs, hidden units, examples per trainer's shard and in the held-out set. Large shards make
three of them train like four (``data_gap``): the 5 % budget is left to the defence."""
LEARNING_RATE = 0.1
MICROBATCH_SECONDS = 0.01
"""What one microbatch "computes": a real one takes tens of milliseconds, this model's takes
microseconds, faster than any exchange of progress can follow (see tests/training)."""


def within(curve: Sequence[float], reference: Sequence[float]) -> float:
    """The largest |loss / reference - 1| over every epoch of ``reference`` (inf when the run
    stopped early or its loss is not finite): "within 5 %" is ``within(...) <= 0.05``."""
    if len(curve) < len(reference):
        return math.inf
    gaps = [abs(ours / theirs - 1.0) for ours, theirs in zip(curve, reference, strict=False)]
    return max(gaps) if all(math.isfinite(g) for g in gaps) else math.inf


# ---- the model and the data ----------------------------------------------------------------------


def teacher_data(seed: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Examples of one fixed noisy nonlinear function (the teacher is the same for every seed)."""
    teacher = torch.Generator().manual_seed(1234)
    w1 = torch.randn(DIM, HIDDEN, generator=teacher) / DIM**0.5
    w2 = torch.randn(HIDDEN, 1, generator=teacher) / HIDDEN**0.5
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(count, DIM, generator=generator)
    targets = torch.tanh(inputs @ w1) @ w2 + 0.05 * torch.randn(count, 1, generator=generator)
    return inputs, targets


def shard(trainer: int) -> tuple[torch.Tensor, torch.Tensor]:
    return teacher_data(trainer + 1, SHARD)


def held_out() -> tuple[torch.Tensor, torch.Tensor]:
    return teacher_data(10_000, EVAL)


def fresh_model() -> torch.nn.Module:
    """The same initial weights on every peer, without touching torch's global generator."""
    model = torch.nn.Sequential(
        torch.nn.Linear(DIM, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, 1)
    )
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_((torch.rand(p.shape, generator=generator) * 2 - 1) / p.shape[-1] ** 0.5)
    return model


def evaluate(model: torch.nn.Module, data: tuple[torch.Tensor, torch.Tensor]) -> float:
    with torch.no_grad():
        return float(torch.nn.functional.mse_loss(model(data[0]), data[1]))


def mse(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    time.sleep(MICROBATCH_SECONDS)
    return torch.nn.functional.mse_loss(model(batch[0]), batch[1])


def reference(epochs: int, trainers: Sequence[int] = range(TRAINERS)) -> list[float]:
    """Full-batch SGD over these trainers' shards in one process: what an honest collaboration of
    them computes (equal shards, so equal weights), epoch by epoch, with no timing in it."""
    return list(_reference(epochs, tuple(trainers)))


@functools.cache
def _reference(epochs: int, trainers: tuple[int, ...]) -> tuple[float, ...]:
    model = fresh_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    data, shards = held_out(), [shard(t) for t in trainers]
    losses = [evaluate(model, data)]
    for _ in range(epochs):
        optimizer.zero_grad()
        loss = sum(torch.nn.functional.mse_loss(model(x), y) for x, y in shards) / len(shards)
        loss.backward()  # type: ignore[union-attr]
        optimizer.step()
        losses.append(evaluate(model, data))
    return tuple(losses)


def data_gap(epochs: int) -> float:
    """How far a perfect defence's curve is from the reference: three shards of four."""
    return within(reference(epochs, range(TRAINERS - 1)), reference(epochs))
