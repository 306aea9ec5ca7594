"""The learning-rate schedule used to train ALBERT: linear warmup, then linear decay to zero."""

from __future__ import annotations

from collections.abc import Callable

import torch

from core.worker.errors import TrainingError


def _check(warmup_steps: int, total_steps: int) -> None:
    if warmup_steps < 0:
        raise TrainingError(f"warmup_steps must be 0 or more, not {warmup_steps}")
    if total_steps <= warmup_steps:
        raise TrainingError(
            f"total_steps ({total_steps}) must be greater than warmup_steps ({warmup_steps}), "
            "or the learning rate would never decay"
        )


def albert_lr_lambda(warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    """The multiplier of the base learning rate at each step.

    It rises linearly from 0 at step 0 to 1 at ``warmup_steps``, falls linearly to 0 at
    ``total_steps`` and stays 0 after. With ``warmup_steps == 0`` it starts at 1.
    Raises ``TrainingError`` unless ``total_steps > warmup_steps >= 0``.
    """
    _check(warmup_steps, total_steps)
    decay_steps = total_steps - warmup_steps

    def multiplier(step: int) -> float:
        if step < warmup_steps:
            return max(step, 0) / warmup_steps
        return max(total_steps - step, 0) / decay_steps

    return multiplier


def albert_schedule(
    optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` applying :func:`albert_lr_lambda` to every parameter group of ``optimizer``.

    Call its ``step()`` once per optimizer step. Creating it sets the learning rate of step 0.
    """
    return torch.optim.lr_scheduler.LambdaLR(optimizer, albert_lr_lambda(warmup_steps, total_steps))
