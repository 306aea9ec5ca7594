"""fp16's dynamic loss scale: gradients divided back, an overflow anywhere caught, the scale halved
on one and doubled after a run of clean microbatches."""

from __future__ import annotations

import math

import pytest
import torch

from core.training.trainer import _LossScale


def params(*grads: list[float] | None) -> list[torch.nn.Parameter]:
    out = []
    for g in grads:
        p = torch.nn.Parameter(torch.zeros(2))
        p.grad = None if g is None else torch.tensor(g)
        out.append(p)
    return out


def test_finite_gradients_are_divided_by_the_scale() -> None:
    scale = _LossScale(value=4.0)
    ps = params([4.0, 8.0], None, [-2.0, 0.0])
    assert scale.unscale(ps)
    assert ps[0].grad is not None
    assert ps[0].grad.tolist() == [1.0, 2.0]
    assert ps[1].grad is None
    assert ps[2].grad is not None
    assert ps[2].grad.tolist() == [-0.5, 0.0]
    assert scale.value == 4.0
    assert scale.clean == 1


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_one_non_finite_value_in_any_parameter_halves_the_scale(bad: float) -> None:
    scale = _LossScale(value=8.0, clean=5)
    assert not scale.unscale(params([1.0, 1.0], [1.0, bad], [2.0, 2.0]))
    assert scale.value == 4.0
    assert scale.clean == 0


def test_the_scale_never_drops_below_one_and_grows_after_a_clean_run() -> None:
    scale = _LossScale(value=1.0, grow_after=3)
    assert not scale.unscale(params([math.inf, 0.0]))
    assert scale.value == 1.0
    for _ in range(3):
        assert scale.unscale(params([1.0, 1.0]))
    assert scale.value == 2.0
    assert scale.clean == 0


def test_no_gradients_at_all_counts_as_clean() -> None:
    scale = _LossScale(value=2.0)
    assert scale.unscale(params(None))
    assert scale.clean == 1
