"""Whether a recomputed microbatch matches its receipt: a pure rule, with a tolerance per precision.

The checker recomputes the loss and the fingerprint in float32 on its own copy of the parameters,
which may differ from the trainer's by the rounding of the averages each applied. A trainer that
computed in bfloat16 or float16 differs more. The tolerances sit between what honest recomputation
differs by and what a forged receipt does (the claims benchmark measures both sides, and the
honest side over 1,000 checks): a fingerprint is compared as a vector, relative to its norm, since
single coordinates of a half-precision gradient can be off by more than the whole.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from core.training.credit.checks.receipts import WorkReceipt


@dataclass(frozen=True, slots=True)
class Tolerance:
    loss_abs: float
    loss_rel: float
    grad_rel: float
    """Of the recomputed fingerprint's norm."""
    grad_abs: float
    """Per coordinate (root-mean-square): below it, a fingerprint of untouched parameters."""


TOLERANCES = {
    "float32": Tolerance(loss_abs=1e-3, loss_rel=1e-3, grad_rel=0.05, grad_abs=1e-6),
    "bfloat16": Tolerance(loss_abs=0.02, loss_rel=0.02, grad_rel=0.35, grad_abs=1e-4),
    "float16": Tolerance(loss_abs=0.01, loss_rel=0.01, grad_rel=0.25, grad_abs=1e-4),
}


@dataclass(frozen=True, slots=True)
class Mismatch:
    statistic: str
    """``work_loss`` or ``work_gradient``."""
    value: float
    """How far off, in units of the tolerance (above 1 fails)."""
    reason: str


def gradient_error(claimed: np.ndarray, recomputed: np.ndarray) -> float:
    """‖claimed - recomputed‖ / ‖recomputed‖ (∞ when only the recomputed one is zero)."""
    difference = float(np.linalg.norm(claimed - recomputed))
    norm = float(np.linalg.norm(recomputed))
    if norm == 0.0:
        return 0.0 if difference == 0.0 else math.inf
    return difference / norm


@dataclass(frozen=True, slots=True)
class Comparison:
    margin: float
    """The larger of the loss's and the fingerprint's distance to the receipt, each in units of
    its tolerance: at most 1 passes (the benchmark reports how close honest peers come)."""
    mismatch: Mismatch | None


def compare(
    receipt: WorkReceipt, claimed: np.ndarray, loss: float, recomputed: np.ndarray, precision: str
) -> Comparison:
    """Whether ``loss`` and ``recomputed`` (the checker's) match the receipt within the tolerance
    of ``precision``, and by how much."""
    tol = TOLERANCES[precision]
    loss_off = abs(receipt.loss - loss) / (tol.loss_abs + tol.loss_rel * abs(loss))
    difference = float(np.linalg.norm(claimed - recomputed))
    allowed = tol.grad_rel * float(np.linalg.norm(recomputed)) + tol.grad_abs * math.sqrt(
        len(recomputed)
    )
    grad_off = difference / allowed if allowed > 0 else (0.0 if difference == 0 else math.inf)
    margin = max(loss_off, grad_off)
    if not loss_off <= 1:
        reason = f"loss {receipt.loss:.6g} claimed, {loss:.6g} recomputed"
        return Comparison(margin, Mismatch("work_loss", loss_off, reason))
    if not grad_off <= 1:
        error = gradient_error(claimed, recomputed)
        reason = f"gradient fingerprint off by {error:.3g} of its norm"
        return Comparison(margin, Mismatch("work_gradient", grad_off, reason))
    return Comparison(margin, None)
