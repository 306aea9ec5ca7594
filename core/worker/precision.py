"""Mixed precision where a GPU can use it, and gradient clipping that reports the norm."""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch

from core.worker.errors import TrainingError

log = logging.getLogger(__name__)

_REQUESTS = ("auto", "fp32", "fp16", "bf16")


@dataclass(frozen=True)
class Precision:
    """How to run forward passes on ``device``: autocast to ``dtype``, or full precision (None)."""

    device: torch.device
    dtype: torch.dtype | None

    def autocast(self) -> AbstractContextManager[object]:
        """A context for the forward pass and loss: autocast to ``dtype``, or nothing at all."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def scaler(self) -> torch.amp.GradScaler:
        """A gradient scaler, enabled only for fp16 on CUDA.

        fp16 has so few exponent bits that small gradients underflow to zero unless the loss is
        scaled up first; bf16 and fp32 have fp32's range and need no scaling. A disabled scaler
        passes everything through, so the training loop can use one code path.
        """
        enabled = self.device.type == "cuda" and self.dtype == torch.float16
        return torch.amp.GradScaler(self.device.type, enabled=enabled)


def _native_bf16(device: torch.device) -> bool:
    # Without native support (before Ampere) CUDA emulates bf16, which is slower than fp16.
    # With a ROCm build torch answers True for every AMD GPU without asking it, so "auto" is bf16
    # there (untested).
    with torch.cuda.device(device):
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))


def choose_precision(device: torch.device, requested: str = "auto") -> Precision:
    """The precision to train with on ``device``.

    ``requested`` is "auto", "fp32", "fp16" or "bf16". "auto" picks bf16 on CUDA GPUs that support
    it natively, fp16 on other CUDA GPUs and fp32 elsewhere (the CPU, and Apple's MPS: no autocast
    there at all). A half precision that the device cannot use well is replaced, with a logged
    warning: bf16 by fp16 on CUDA without native bf16, and either by fp32 off CUDA. An unknown
    request raises ``TrainingError``.
    """
    if requested not in _REQUESTS:
        raise TrainingError(
            f"unknown precision {requested!r}: choose one of {', '.join(_REQUESTS)}"
        )
    if requested == "fp32":
        return Precision(device, None)
    if device.type != "cuda":
        # Off CUDA we always train in fp32: CPU autocast speeds up only a few ops on recent CPUs
        # and is often slower than fp32 for training, and without a scaler fp16 gradients would
        # underflow; other accelerators are not tested with mixed precision yet.
        if requested != "auto":
            log.warning(
                "%s was asked for on %s, which does not train well in half precision; "
                "using fp32 instead",
                requested,
                device.type,
            )
        return Precision(device, None)
    if requested in ("auto", "bf16"):
        if _native_bf16(device):
            return Precision(device, torch.bfloat16)
        if requested == "bf16":
            log.warning("this GPU has no native bf16 support; using fp16 instead")
    return Precision(device, torch.float16)


def clip_gradients(
    parameters: torch.Tensor | Iterable[torch.Tensor], max_norm: float | None
) -> float:
    """Clip the gradients of ``parameters`` to a total L2 norm of ``max_norm``; return the norm.

    The returned norm is the one before clipping. With ``max_norm`` None the gradients are left
    as they are and only the norm is computed. A non-finite norm (inf or NaN, from an overflow) is
    returned as it is and the gradients are left untouched, so the caller can skip the step.
    Parameters without a gradient are ignored; if none has one, the norm is 0.
    """
    params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    # Computing the norm and clipping separately (the two halves of clip_grad_norm_) lets us
    # leave the gradients alone when the norm is not finite, instead of filling them with NaN.
    total_norm = torch.nn.utils.get_total_norm(grads)
    norm = float(total_norm)
    if max_norm is not None and math.isfinite(norm):
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total_norm)
    return norm
