"""LocalWork: the collaborative optimizer's torch work, all of it on the training thread.

Gradients of each microbatch are added, times its batch size, to float32 accumulators (so that the
mean over an epoch's samples comes out whatever the microbatch sizes were); at the step, the mean
gradient goes out as CPU float32 copies for the averager, and the averaged result comes back to be
clipped and applied. The same copies-out, write-back pattern serves parameter averaging, so models
on a GPU or in half precision average like any other.

With an offloaded optimizer (``offload_optimizer = true``) the accumulators live in host memory too:
each microbatch's gradients are added there, the mean gradient needs no copy, and the step takes
the clipped host gradients as they are (``MomentOptimizer.step_with``), so that only the weights
travel to the host and back.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import torch

from core.optim.moments import MomentOptimizer
from core.training.state import TrainingState
from core.worker.precision import clip_gradients

log = logging.getLogger(__name__)


class LocalWork:
    def __init__(self, state: TrainingState, clip_norm: float | None) -> None:
        self.state = state
        self.clip_norm = clip_norm
        self._accumulators: list[torch.Tensor] = []

    @property
    def accumulators(self) -> tuple[torch.Tensor, ...]:
        """The float32 sums of this epoch's gradients, one per trainable parameter (read them on
        the training thread; empty before ``zeros``)."""
        return tuple(self._accumulators)

    @property
    def offloaded(self) -> bool:
        """Whether the optimizer's update runs in host memory (and so do the accumulators)."""
        optimizer = self.state.optimizer
        return isinstance(optimizer, MomentOptimizer) and optimizer.offload

    def zeros(self) -> None:
        device = torch.device("cpu") if self.offloaded else None
        self._accumulators = [
            torch.zeros_like(p, dtype=torch.float32, device=device) for p in self.state.parameters
        ]

    def move_to(self, device: torch.device) -> None:
        """Keep the accumulators where the parameters are (a pause moves both off the GPU), or
        on the host when the optimizer is offloaded."""
        target = torch.device("cpu") if self.offloaded else device
        self._accumulators = [acc.to(target) for acc in self._accumulators]

    def accumulate(self, batch_size: int) -> None:
        """Move this microbatch's gradients from ``.grad`` into the accumulators."""
        for p, acc in zip(self.state.parameters, self._accumulators, strict=True):
            if p.grad is not None:
                acc.add_(p.grad.to(acc.device, torch.float32), alpha=batch_size)
                p.grad = None

    def mean_gradients(self, samples: int) -> list[torch.Tensor]:
        """The mean gradient as CPU float32 copies (what the averager sends); accumulators zeroed."""
        out = [(acc / max(1, samples)).to("cpu") for acc in self._accumulators]
        for acc in self._accumulators:
            acc.zero_()
        return out

    def keep(self, grads: list[torch.Tensor], samples: int) -> None:
        """Put a round's average back as ``samples`` samples' worth of accumulated gradient (a round
        too small to step on: the epoch goes on, and this peer's share of it stays counted)."""
        for acc, g in zip(self._accumulators, grads, strict=True):
            acc.copy_(g.to(acc.device), non_blocking=False).mul_(samples)

    def apply(self, grads: list[torch.Tensor]) -> None:
        """One optimizer step with these gradients (skipped if their norm is not finite)."""
        optimizer = self.state.optimizer
        if isinstance(optimizer, MomentOptimizer) and optimizer.offload:
            self._apply_on_host(optimizer, grads)
            return
        params = self.state.parameters
        for p, g in zip(params, grads, strict=True):
            p.grad = g.to(device=p.device, dtype=p.dtype)
        norm = clip_gradients(params, self.clip_norm)
        if math.isfinite(norm):
            self.state.optimizer.step()
        else:
            log.warning("non-finite gradient norm (%s): step skipped", norm)
        for p in params:
            p.grad = None

    def _apply_on_host(self, optimizer: MomentOptimizer, grads: list[torch.Tensor]) -> None:
        """``apply`` for an offloaded optimizer: clip the host gradients as ``clip_gradients``
        clips ``.grad`` (the same formula), and step with them where they are."""
        host = [g.to("cpu", torch.float32) for g in grads]
        total = torch.nn.utils.get_total_norm(host)
        norm = float(total)
        if not math.isfinite(norm):
            log.warning("non-finite gradient norm (%s): step skipped", norm)
            return
        if self.clip_norm is not None:
            coefficient = torch.clamp(self.clip_norm / (total + 1e-6), max=1.0)
            torch._foreach_mul_(host, coefficient)
        optimizer.step_with(host)

    def state_copies(self) -> list[torch.Tensor]:
        """What state averaging averages: CPU float32 copies (8-bit moments dequantised)."""
        return self.state.averaging_copies()

    def write_state(self, copies: list[torch.Tensor]) -> None:
        self.state.write_averaged(copies)

    def load(self, epoch: int, arrays: list[np.ndarray]) -> None:
        """Take a downloaded state; the unshared samples of our epoch are dropped."""
        self.state.load(epoch, arrays)
        self.drop()

    def drop(self) -> None:
        """Forget the gradients accumulated so far (the state they were computed on is gone)."""
        for acc in self._accumulators:
            acc.zero_()
