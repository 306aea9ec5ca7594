"""What an expert server refuses, so that one stranger's call cannot spoil an expert for everyone.

An expert is shared: every trainer that calls its ``backward`` steps its parameters. A single call
whose output gradients are NaN used to turn every parameter into NaN, after which every forward for
every caller returned NaN and the checkpoints kept the damage. The rules, in the order a call
meets them:

- **Non-finite tensors are refused** (``non_finite``): inputs or output gradients holding NaN or an
  infinity are an invalid request, answered as one before anything is computed or pooled, so they
  never meet other callers' rows in a batch.
- **Each call's output gradients are clipped** (``clip_rows``): a row whose L2 norm exceeds
  ``max_norm`` is scaled down to it. Trainers take the mean loss over their batch, so an honest
  row's gradient is small: the largest row of 1,212 backward batches in the demo's swarm (four
  trainers, ``tests/cli/test_dmoe_swarm.py``) was 0.011, against the default bound of 1. A finite
  but huge gradient from one caller would otherwise move the expert as far as many honest steps.
- **A step whose parameter gradients are not finite is skipped** (finite tensors can still
  overflow, e.g. inputs of 1e30): the optimizer never sees them and the batch's callers get an
  invalid-request answer.
- **Weights that are not finite after a step are never kept**: the expert is restored from its
  newest checkpoint (which is only ever written from finite weights), or re-initialised from its
  uid when it has none.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

DEFAULT_MAX_GRAD_NORM = 1.0
"""The default bound on one sample's output-gradient norm (the manifest's ``expert.max_grad_norm``)."""


def non_finite(tensors: Sequence[torch.Tensor]) -> int | None:
    """The index of the first tensor holding NaN or an infinity, or None when all are finite."""
    for index, tensor in enumerate(tensors):
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            return index
    return None


def clip_rows(tensor: torch.Tensor, max_norm: float) -> tuple[torch.Tensor, int]:
    """``tensor`` with every row (first dimension) scaled down to an L2 norm of ``max_norm`` at
    most, and how many rows were scaled; ``max_norm`` 0 clips nothing."""
    if max_norm <= 0 or tensor.numel() == 0:
        return tensor, 0
    # in float64: the squares of a float32 row near its largest values overflow to infinity
    norms = tensor.reshape(tensor.shape[0], -1).double().norm(dim=1)
    over = norms > max_norm
    clipped = int(over.sum())
    if not clipped:
        return tensor, 0
    scale = torch.where(over, max_norm / norms, torch.ones_like(norms))
    shape = (tensor.shape[0],) + (1,) * (tensor.dim() - 1)
    return tensor * scale.reshape(shape).to(tensor.dtype), clipped


def finite_gradients(parameters: Iterable[torch.nn.Parameter]) -> bool:
    """Every gradient that exists is finite."""
    return all(bool(torch.isfinite(p.grad).all()) for p in parameters if p.grad is not None)


def finite_weights(module: torch.nn.Module) -> bool:
    """Every floating-point parameter and buffer of ``module`` is finite."""
    tensors = [*module.parameters(), *module.buffers()]
    return all(bool(torch.isfinite(t).all()) for t in tensors if t.is_floating_point())
