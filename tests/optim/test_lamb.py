"""LAMB: one step against the paper's formula, training, state round trips and refusals."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from core.optim.lamb import Lamb
from core.optim.schedule import albert_schedule
from core.worker.errors import TrainingError


def lamb_reference(
    p: torch.Tensor,
    grads: list[torch.Tensor],
    *,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-6,
    weight_decay: float = 0.0,
    clamp_value: float = 10.0,
    debias: bool = True,
) -> torch.Tensor:
    """The update rule written out step by step in float64, independently of the optimizer."""
    p = p.double().clone()
    m = torch.zeros_like(p)
    v = torch.zeros_like(p)
    for t, g32 in enumerate(grads, start=1):
        g = g32.double()
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        m_hat = m / (1 - betas[0] ** t) if debias else m
        v_hat = v / (1 - betas[1] ** t) if debias else v
        r = m_hat / (torch.sqrt(v_hat) + eps) + weight_decay * p
        w_norm = min(math.sqrt(float((p * p).sum())), clamp_value)
        r_norm = math.sqrt(float((r * r).sum()))
        trust = w_norm / r_norm if w_norm > 0 and r_norm > 0 else 1.0
        p = p - lr * trust * r
    return p


def run_lamb(p0: torch.Tensor, grads: list[torch.Tensor], **settings: float | bool) -> torch.Tensor:
    p = torch.nn.Parameter(p0.clone())
    optimizer = Lamb([p], **settings)  # type: ignore[arg-type]
    for g in grads:
        p.grad = g.clone()
        optimizer.step()
    return p.detach()


def test_first_step_moves_each_coordinate_by_the_trust_ratio_in_closed_form() -> None:
    # After one debiased step m_hat = g and v_hat = g*g, so r = g / (|g| + eps) ~ sign(g):
    # with ||p|| = 5 and ||r|| ~ sqrt(2), p moves by lr * 5 / sqrt(2) against sign(g).
    p = run_lamb(torch.tensor([3.0, 4.0]), [torch.tensor([0.5, -2.0])], lr=0.1)
    step = 0.1 * 5 / math.sqrt(2)
    torch.testing.assert_close(p, torch.tensor([3.0 - step, 4.0 + step]))


@pytest.mark.parametrize(
    ("p0", "settings"),
    [
        pytest.param([1.0, -2.0, 0.5], {"lr": 0.01}, id="plain"),
        pytest.param([1.0, -2.0, 0.5], {"lr": 0.01, "weight_decay": 0.1}, id="weight-decay"),
        pytest.param([30.0, -40.0, 0.0], {"lr": 0.05, "weight_decay": 0.01}, id="norm-clamped"),
        pytest.param([0.5, 0.25, -1.0], {"lr": 0.02, "clamp_value": 0.5}, id="low-clamp"),
        # Debiasing scales r uniformly, which the trust ratio cancels unless weight decay is on.
        pytest.param(
            [1.0, -2.0, 0.5], {"lr": 0.01, "weight_decay": 0.1, "debias": False}, id="no-debias"
        ),
    ],
)
def test_steps_match_the_formula(p0: list[float], settings: dict[str, float | bool]) -> None:
    grads = [
        torch.tensor([0.3, -0.1, 0.7]),
        torch.tensor([-0.2, 0.4, 0.1]),
        torch.tensor([0.05, 0.05, -0.3]),
    ]
    expected = lamb_reference(torch.tensor(p0), grads, **settings)  # type: ignore[arg-type]
    got = run_lamb(torch.tensor(p0), grads, **settings)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-6)


def test_the_clamp_bounds_the_step_of_a_large_weight() -> None:
    # ||p|| = 50 is clamped to 10, so one step moves p by exactly lr * 10 in norm (r ~ sign(g)).
    p0 = torch.tensor([30.0, 40.0])
    p = run_lamb(p0, [torch.tensor([1.0, 1.0])], lr=0.1, clamp_value=10.0)
    assert float(torch.linalg.vector_norm(p - p0)) == pytest.approx(0.1 * 10, rel=1e-5)


def test_a_zero_weight_uses_a_trust_ratio_of_one() -> None:
    p = run_lamb(torch.zeros(3), [torch.tensor([2.0, -0.5, 1.0])], lr=0.1)
    expected = -0.1 * torch.tensor([2.0, -0.5, 1.0]) / (torch.tensor([2.0, 0.5, 1.0]) + 1e-6)
    torch.testing.assert_close(p, expected)


def test_a_zero_update_leaves_the_weight_alone() -> None:
    p = run_lamb(torch.tensor([1.0, 2.0]), [torch.zeros(2)], lr=0.1)
    assert torch.equal(p, torch.tensor([1.0, 2.0]))
    assert torch.isfinite(p).all()


def test_state_holds_the_documented_keys() -> None:
    p = torch.nn.Parameter(torch.ones(2))
    optimizer = Lamb([p])
    p.grad = torch.ones(2)
    optimizer.step()
    optimizer.step()
    state = optimizer.state[p]
    assert set(state) == {"step", "exp_avg", "exp_avg_sq"}
    assert state["step"] == 2


def test_parameters_without_gradients_are_skipped() -> None:
    a = torch.nn.Parameter(torch.ones(2))
    b = torch.nn.Parameter(torch.ones(2))
    optimizer = Lamb([a, b], lr=0.1)
    a.grad = torch.ones(2)
    optimizer.step()
    assert not torch.equal(a.detach(), torch.ones(2))
    assert torch.equal(b.detach(), torch.ones(2))
    assert b not in optimizer.state


def make_regression(seed: int) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(256, 8, generator=gen)
    true_w = torch.randn(8, 1, generator=gen)
    y = x @ true_w + 0.5
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    return model, x, y


def test_trains_a_small_regression_to_a_low_loss() -> None:
    model, x, y = make_regression(0)
    optimizer = Lamb(model.parameters(), lr=0.05)
    # LAMB moves each layer by a fixed fraction of its norm, so it settles only as lr decays.
    schedule = albert_schedule(optimizer, warmup_steps=10, total_steps=300)
    loss_fn = torch.nn.MSELoss()
    with torch.no_grad():
        first = float(loss_fn(model(x), y))
    for _ in range(300):
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
        schedule.step()
    with torch.no_grad():
        final = float(loss_fn(model(x), y))
    assert first > 1.0
    assert final < 0.01


def test_closure_runs_with_gradients_even_under_no_grad() -> None:
    model, x, y = make_regression(1)
    optimizer = Lamb(model.parameters(), lr=0.01)
    before = [p.detach().clone() for p in model.parameters()]

    def closure() -> float:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return float(loss.detach())

    with torch.no_grad():
        loss = optimizer.step(closure)
    assert isinstance(loss, float)
    assert loss > 0
    assert all(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))


def train(
    model: torch.nn.Module, optimizer: Lamb, x: torch.Tensor, y: torch.Tensor, n: int
) -> None:
    for _ in range(n):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


def test_state_dict_round_trip_continues_identically() -> None:
    model, x, y = make_regression(2)
    optimizer = Lamb(model.parameters(), lr=0.01, weight_decay=0.01)
    train(model, optimizer, x, y, 3)

    resumed = copy.deepcopy(model)
    resumed_optimizer = Lamb(resumed.parameters(), lr=0.5)  # settings come from the state
    resumed_optimizer.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    # Control: without the moments the same weights take a different path.
    control = copy.deepcopy(model)
    control_optimizer = Lamb(control.parameters(), lr=0.01, weight_decay=0.01)

    for m, o in ((model, optimizer), (resumed, resumed_optimizer), (control, control_optimizer)):
        train(m, o, x, y, 3)
    for a, b in zip(model.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)
    assert not all(
        torch.equal(a, c) for a, c in zip(model.parameters(), control.parameters(), strict=True)
    )


def test_sparse_gradients_are_refused_clearly() -> None:
    embedding = torch.nn.Embedding(10, 4, sparse=True)
    optimizer = Lamb(embedding.parameters())
    embedding(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(TrainingError, match="sparse"):
        optimizer.step()


@pytest.mark.parametrize(
    "settings",
    [
        {"lr": -1.0},
        {"betas": (1.0, 0.999)},
        {"betas": (0.9, -0.1)},
        {"eps": -1e-8},
        {"weight_decay": -0.1},
        {"clamp_value": 0.0},
    ],
)
def test_invalid_settings_are_refused(settings: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="must"):
        Lamb([torch.nn.Parameter(torch.ones(1))], **settings)  # type: ignore[arg-type]
