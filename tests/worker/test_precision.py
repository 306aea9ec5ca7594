"""Choosing a precision per device, autocast and the scaler, and gradient clipping."""

from __future__ import annotations

import contextlib
import logging
import math

import pytest
import torch

from core.worker import precision as precision_module
from core.worker.errors import TrainingError
from core.worker.precision import Precision, choose_precision, clip_gradients

CPU = torch.device("cpu")
CUDA = torch.device("cuda")


@pytest.mark.parametrize("requested", ["auto", "fp32"])
def test_cpu_trains_in_full_precision(requested: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        chosen = choose_precision(CPU, requested)
    assert chosen == Precision(CPU, None)
    assert isinstance(chosen.autocast(), contextlib.nullcontext)
    assert not chosen.scaler().is_enabled()
    assert caplog.records == []


@pytest.mark.parametrize("requested", ["bf16", "fp16"])
def test_half_precision_on_cpu_falls_back_to_fp32_with_a_warning(
    requested: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="core.worker.precision"):
        chosen = choose_precision(CPU, requested)
    assert chosen.dtype is None
    assert any(requested in r.getMessage() and "fp32" in r.getMessage() for r in caplog.records)


def test_unknown_precision_is_refused() -> None:
    with pytest.raises(TrainingError, match="unknown precision 'fp8'"):
        choose_precision(CPU, "fp8")


@pytest.mark.parametrize(
    ("native_bf16", "requested", "expected"),
    [
        pytest.param(True, "auto", (torch.bfloat16, False), id="auto-ampere"),
        pytest.param(False, "auto", (torch.float16, False), id="auto-older"),
        pytest.param(True, "bf16", (torch.bfloat16, False), id="bf16-ampere"),
        pytest.param(False, "bf16", (torch.float16, True), id="bf16-older"),
        pytest.param(True, "fp16", (torch.float16, False), id="fp16"),
        pytest.param(True, "fp32", (None, False), id="fp32"),
    ],
)
def test_cuda_choice(
    native_bf16: bool,
    requested: str,
    expected: tuple[torch.dtype | None, bool],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The decision only; the device query itself is exercised on a GPU below.
    dtype, warns = expected
    monkeypatch.setattr(precision_module, "_native_bf16", lambda device: native_bf16)
    with caplog.at_level(logging.WARNING, logger="core.worker.precision"):
        chosen = choose_precision(CUDA, requested)
    assert chosen == Precision(CUDA, dtype)
    assert bool(caplog.records) == warns


def test_autocast_context_casts_matmuls_to_the_chosen_dtype() -> None:
    # bf16 autocast exists on CPU too, so the autocast path can be checked without a GPU.
    a = torch.ones(4, 4)
    with Precision(CPU, torch.bfloat16).autocast():
        assert (a @ a).dtype == torch.bfloat16
    with Precision(CPU, None).autocast():
        assert (a @ a).dtype == torch.float32


@pytest.mark.cuda
def test_on_a_real_gpu() -> None:
    chosen = choose_precision(CUDA)
    native = torch.cuda.is_bf16_supported(including_emulation=False)
    assert chosen.dtype == (torch.bfloat16 if native else torch.float16)
    assert chosen.scaler().is_enabled() == (chosen.dtype == torch.float16)
    assert Precision(CUDA, torch.float16).scaler().is_enabled()
    assert not Precision(CUDA, torch.bfloat16).scaler().is_enabled()
    a = torch.ones(8, 8, device=CUDA)
    with chosen.autocast():
        assert (a @ a).dtype == chosen.dtype


def with_grads(*grads: list[float]) -> list[torch.nn.Parameter]:
    params = []
    for g in grads:
        p = torch.nn.Parameter(torch.zeros(len(g)))
        p.grad = torch.tensor(g)
        params.append(p)
    return params


def grad_norm(params: list[torch.nn.Parameter]) -> float:
    return math.sqrt(sum(float((p.grad**2).sum()) for p in params if p.grad is not None))


def test_clipping_scales_to_max_norm_and_returns_the_norm_before() -> None:
    params = with_grads([3.0], [0.0, 4.0])
    assert clip_gradients(params, max_norm=1.0) == pytest.approx(5.0)
    assert grad_norm(params) == pytest.approx(1.0, rel=1e-5)
    assert params[0].grad is not None
    torch.testing.assert_close(params[0].grad, torch.tensor([0.6]), rtol=1e-5, atol=0.0)


def test_gradients_within_max_norm_are_unchanged() -> None:
    params = with_grads([3.0], [0.0, 4.0])
    assert clip_gradients(params, max_norm=10.0) == pytest.approx(5.0)
    assert grad_norm(params) == pytest.approx(5.0)


def test_without_max_norm_only_the_norm_is_computed() -> None:
    params = with_grads([30.0], [0.0, 40.0])
    assert clip_gradients(iter(params), None) == pytest.approx(50.0)
    assert grad_norm(params) == pytest.approx(50.0)


def test_a_single_tensor_and_missing_gradients_are_accepted() -> None:
    (p,) = with_grads([6.0, 8.0])
    no_grad = torch.nn.Parameter(torch.ones(3))
    assert clip_gradients(p, 5.0) == pytest.approx(10.0)
    assert clip_gradients([no_grad], 1.0) == 0.0
    assert clip_gradients([p, no_grad], 100.0) == pytest.approx(5.0, rel=1e-5)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_non_finite_norm_is_reported_and_the_gradients_are_left_alone(bad: float) -> None:
    params = with_grads([bad, 1.0], [2.0])
    norm = clip_gradients(params, max_norm=1.0)
    assert not math.isfinite(norm)
    assert math.isnan(norm) == math.isnan(bad)
    assert params[1].grad is not None
    assert torch.equal(params[1].grad, torch.tensor([2.0]))
