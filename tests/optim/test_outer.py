"""OuterNesterov is torch's Nesterov SGD, and refuses what does not fit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.optim.outer import OuterNesterov


def test_matches_torch_nesterov_sgd_over_several_steps() -> None:
    rng = np.random.default_rng(0)
    start = rng.standard_normal(1000).astype(np.float32)
    ours = OuterNesterov([start.copy()], lr=0.7, momentum=0.9)
    param = torch.nn.Parameter(torch.from_numpy(start.copy()))
    reference = torch.optim.SGD([param], lr=0.7, momentum=0.9, nesterov=True)
    for _ in range(5):
        grad = rng.standard_normal(1000).astype(np.float32)
        ours.step([grad])
        param.grad = torch.from_numpy(grad.copy())
        reference.step()
    np.testing.assert_allclose(ours.params[0], param.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_lr_one_without_momentum_moves_to_start_minus_gradient() -> None:
    start = np.arange(4, dtype=np.float32)
    outer = OuterNesterov([start], lr=1.0, momentum=0.0)
    outer.step([np.ones(4, dtype=np.float32)])
    assert start.tolist() == [-1.0, 0.0, 1.0, 2.0]


def test_same_inputs_give_bit_identical_results() -> None:
    rng = np.random.default_rng(1)
    start = rng.standard_normal(4097).astype(np.float32)
    grads = [rng.standard_normal(4097).astype(np.float32) for _ in range(3)]
    runs = []
    for _ in range(2):
        outer = OuterNesterov([start.copy()], lr=0.7, momentum=0.9)
        for g in grads:
            outer.step([g])
        runs.append(outer.params[0].tobytes())
    assert runs[0] == runs[1]


@pytest.mark.parametrize(("lr", "momentum"), [(0.0, 0.9), (-1.0, 0.9), (0.7, 1.0), (0.7, -0.1)])
def test_bad_settings_are_refused(lr: float, momentum: float) -> None:
    with pytest.raises(ValueError, match="outer"):
        OuterNesterov([np.zeros(2, dtype=np.float32)], lr=lr, momentum=momentum)


def test_mismatched_gradients_and_buffers_are_refused() -> None:
    outer = OuterNesterov([np.zeros(3, dtype=np.float32)], lr=0.7, momentum=0.9)
    with pytest.raises(ValueError, match="shape"):
        outer.step([np.zeros(4, dtype=np.float32)])
    with pytest.raises(ValueError, match="pseudo-gradients"):
        outer.step([])
    with pytest.raises(ValueError, match="momentum buffer"):
        outer.load_buffers([np.zeros(2, dtype=np.float32)])
    with pytest.raises(ValueError, match="float32"):
        OuterNesterov([np.zeros(3, dtype=np.float64)], lr=0.7, momentum=0.9)  # type: ignore[list-item]
