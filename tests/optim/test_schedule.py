"""The ALBERT learning-rate schedule: linear warmup, linear decay to zero, zero after."""

from __future__ import annotations

import pytest
import torch

from core.optim.schedule import albert_lr_lambda, albert_schedule
from core.worker.errors import TrainingError


@pytest.mark.parametrize(
    ("step", "multiplier"),
    [
        pytest.param(0, 0.0, id="start"),
        pytest.param(5, 0.5, id="mid-warmup"),
        pytest.param(10, 1.0, id="warmup-end"),
        pytest.param(60, 0.5, id="mid-decay"),
        pytest.param(85, 0.25, id="late-decay"),
        pytest.param(110, 0.0, id="end"),
        pytest.param(111, 0.0, id="just-after-end"),
        pytest.param(10_000, 0.0, id="long-after-end"),
    ],
)
def test_multiplier(step: int, multiplier: float) -> None:
    assert albert_lr_lambda(10, 110)(step) == pytest.approx(multiplier)


def test_without_warmup_the_schedule_starts_at_the_base_rate() -> None:
    f = albert_lr_lambda(0, 4)
    assert [f(s) for s in range(6)] == pytest.approx([1.0, 0.75, 0.5, 0.25, 0.0, 0.0])


def test_scheduler_sets_the_optimizer_learning_rate_step_by_step() -> None:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.2)
    scheduler = albert_schedule(optimizer, warmup_steps=2, total_steps=6)
    seen = []
    for _ in range(8):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert seen == pytest.approx([0.0, 0.1, 0.2, 0.15, 0.1, 0.05, 0.0, 0.0])


@pytest.mark.parametrize(
    ("warmup", "total", "message"),
    [
        pytest.param(-1, 10, "warmup_steps must be 0 or more", id="negative-warmup"),
        pytest.param(10, 10, "must be greater than warmup_steps", id="total-equals-warmup"),
        pytest.param(10, 5, "must be greater than warmup_steps", id="total-below-warmup"),
        pytest.param(0, 0, "must be greater than warmup_steps", id="zero-total"),
    ],
)
def test_invalid_lengths_are_refused(warmup: int, total: int, message: str) -> None:
    with pytest.raises(TrainingError, match=message):
        albert_lr_lambda(warmup, total)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    with pytest.raises(TrainingError, match=message):
        albert_schedule(optimizer, warmup, total)
