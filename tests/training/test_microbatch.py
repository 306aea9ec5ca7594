"""``Trainer.microbatch``, the trainer's step a caller can drive alone (the benchmarks and the GPU
tests do): one forward and backward on the calling thread, the gradients left in ``.grad`` and
nothing stepped; and ``Trainer.loss_scale``, which only fp16 has."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from core.training.trainer import REPEATS, Trainer
from core.worker.precision import Precision


def squares(model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
    return model(batch).pow(2).mean()


def linear_trainer(
    batches: list[torch.Tensor], precision: Precision | None = None
) -> tuple[Trainer, torch.nn.Linear]:
    model = torch.nn.Linear(3, 1)
    # no optimizer and no bridge: microbatch needs neither, and run is not called
    none: Any = None
    return Trainer(model, none, none, iter(batches), squares, precision=precision), model


def test_a_microbatch_leaves_its_gradients_and_steps_nothing() -> None:
    torch.manual_seed(0)
    batch = torch.randn(5, 3)
    trainer, model = linear_trainer([batch])
    before = [p.detach().clone() for p in model.parameters()]
    outcome = trainer.microbatch()
    assert isinstance(outcome, tuple)
    size, loss = outcome
    assert size == 5
    with torch.no_grad():
        assert loss == pytest.approx(float(squares(model, batch)))
    for old, parameter in zip(before, model.parameters(), strict=True):
        assert torch.equal(old, parameter.detach())  # nothing stepped
        assert parameter.grad is not None
        assert parameter.grad.abs().sum() > 0
    assert trainer.microbatch() == "end"


def test_a_non_finite_loss_is_skipped_without_gradients() -> None:
    trainer, model = linear_trainer([torch.full((2, 3), math.inf)])
    assert trainer.microbatch() is None
    assert trainer.skipped == 1
    assert all(p.grad is None for p in model.parameters())


def test_only_fp16_has_a_loss_scale() -> None:
    cpu = torch.device("cpu")
    assert linear_trainer([])[0].loss_scale is None
    assert linear_trainer([], Precision(cpu, torch.bfloat16))[0].loss_scale is None
    assert linear_trainer([], Precision(cpu, torch.float16))[0].loss_scale == 2.0**15


def test_a_batch_computed_at_these_parameters_already_is_left_for_the_next() -> None:
    a, b = torch.randn(5, 3), torch.randn(4, 3)
    computed: list[torch.Tensor] = []
    trainer, _ = linear_trainer([a, a, b, a])
    trainer.fresh = lambda batch: not any(batch is seen for seen in computed)
    for _ in range(2):
        outcome = trainer.microbatch()
        assert isinstance(outcome, tuple)
        computed.append(a if outcome[0] == 5 else b)
    assert [len(t) for t in computed] == [5, 4]  # the second a was left
    assert trainer.repeats == 1
    assert trainer.microbatch() == "end"  # the last a too: nothing new is left


def test_data_that_only_repeats_is_computed_again_rather_than_stalling(
    caplog: pytest.LogCaptureFixture,
) -> None:
    batch = torch.randn(5, 3)
    trainer, _ = linear_trainer([batch] * (REPEATS + 2))
    trainer.fresh = lambda _: False
    outcome = trainer.microbatch()
    assert isinstance(outcome, tuple)
    assert trainer.repeats == REPEATS
    assert "the data repeats within an epoch" in caplog.text
