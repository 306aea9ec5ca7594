"""AdamW (Loshchilov & Hutter, 2019) on the moment scheme LAMB uses, so both get 8-bit states
and CPU offload from one place (``core.optim.moments``).

Same semantics as ``torch.optim.AdamW`` without its options amsgrad, maximize, capturable and the
fused kernels: weight decay is decoupled (the weight shrinks by ``lr * weight_decay`` before the
Adam step, instead of the decay entering the gradient), and the moments are debiased. For each
parameter ``p`` with gradient ``g`` at step ``t`` (counted from 1)::

    p = p * (1 - lr * weight_decay)
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    p = p - lr / (1 - beta1 ** t) * m / (sqrt(v) / sqrt(1 - beta2 ** t) + eps)

The manifest's ``optimizer = "adamw"`` uses torch's own AdamW with 32-bit states on the training
device (as before this class existed), and this one with ``optimizer_states = "8bit"`` or
``offload_optimizer = true``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.optim.optimizer import ParamsT

from core.optim.moments import MIN_QUANTISED, MomentOptimizer, check_adam_settings


class AdamW(MomentOptimizer):
    """AdamW with decoupled weight decay; state as ``Lamb``'s (``step``, ``exp_avg``,
    ``exp_avg_sq``, or their 8-bit codes and absmax). Settings after ``lr`` are keyword-only."""

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        *,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        states: str = "32bit",
        offload: bool = False,
        min_quantised: int = MIN_QUANTISED,
    ) -> None:
        check_adam_settings(lr, betas, eps, weight_decay)
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}
        super().__init__(
            params, defaults, states=states, offload=offload, min_quantised=min_quantised
        )

    def _apply(
        self,
        weight: torch.Tensor,
        exp_avg: torch.Tensor,
        exp_avg_sq: torch.Tensor,
        step: float,
        group: dict[str, Any],
    ) -> None:
        beta1, beta2 = (float(b) for b in group["betas"])
        lr = float(group["lr"])
        weight_decay = float(group["weight_decay"])
        if weight_decay != 0.0:
            weight.mul_(1.0 - lr * weight_decay)
        denom = (exp_avg_sq.sqrt() / math.sqrt(1.0 - beta2**step)).add_(float(group["eps"]))
        weight.addcdiv_(exp_avg, denom, value=-lr / (1.0 - beta1**step))
