"""LAMB, the layer-wise adaptive optimizer for large batches (You et al., 2019).

LAMB is Adam with one change: each parameter tensor's update is rescaled by a *trust ratio*, the
norm of the tensor over the norm of its update, so that every layer moves by a similar fraction of
its own size whatever the batch size. This is what lets ALBERT and BERT train with very large
(collaboratively accumulated) batches at a high learning rate.

For each parameter ``p`` with gradient ``g`` at step ``t`` (counted from 1)::

    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    m_hat = m / (1 - beta1 ** t),  v_hat = v / (1 - beta2 ** t)      (only when debias)
    r = m_hat / (sqrt(v_hat) + eps) + weight_decay * p
    trust = min(||p||, clamp_value) / ||r||, or 1 when either norm is 0
    p = p - lr * trust * r
"""

from __future__ import annotations

from typing import Any

import torch
from torch.optim.optimizer import ParamsT

from core.optim.moments import MIN_QUANTISED, MomentOptimizer, check_adam_settings


class Lamb(MomentOptimizer):
    """The LAMB optimizer.

    Per-parameter state (what ``state_dict()`` carries): ``step``, a 0-d float32 CPU tensor
    counting the updates applied to that parameter, and the Adam moments ``exp_avg`` and
    ``exp_avg_sq``, tensors shaped like the parameter (or, with ``states="8bit"``, their 8-bit
    codes and block absmax values: ``core.optim.moments``). ``offload=True`` keeps them in host
    memory. Dense gradients only: a sparse gradient raises ``TrainingError``. Settings after
    ``lr`` are keyword-only, so that a call cannot silently mix up two floats.
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        *,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        clamp_value: float = 10.0,
        debias: bool = True,
        states: str = "32bit",
        offload: bool = False,
        min_quantised: int = MIN_QUANTISED,
    ) -> None:
        check_adam_settings(lr, betas, eps, weight_decay)
        if not clamp_value > 0.0:
            raise ValueError(f"clamp_value must be more than 0, not {clamp_value}")
        defaults = {
            "lr": lr,
            "betas": betas,
            "eps": eps,
            "weight_decay": weight_decay,
            "clamp_value": clamp_value,
            "debias": debias,
        }
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
        eps = float(group["eps"])
        weight_decay = float(group["weight_decay"])
        clamp_value = float(group["clamp_value"])
        if group["debias"]:
            m_hat = exp_avg / (1.0 - beta1**step)
            v_hat = exp_avg_sq / (1.0 - beta2**step)
        else:
            m_hat, v_hat = exp_avg, exp_avg_sq
        update = m_hat / (v_hat.sqrt() + eps)
        if weight_decay != 0.0:
            update.add_(weight, alpha=weight_decay)

        # The ratio stays a tensor so that no step waits for the GPU to hand a number back.
        weight_norm = torch.linalg.vector_norm(weight).clamp(0.0, clamp_value)
        update_norm = torch.linalg.vector_norm(update)
        trust = torch.where(
            (weight_norm > 0) & (update_norm > 0),
            weight_norm / update_norm,
            torch.ones_like(weight_norm),
        )
        weight.sub_(update * (trust * lr))
