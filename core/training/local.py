"""LocalWork: the collaborative optimizer's torch work, all of it on the training thread.

Gradients of each microbatch are added, times its batch size, to float32 accumulators (so that the
mean over an epoch's samples comes out whatever the microbatch sizes were); at the step, the mean
gradient goes out as CPU float32 copies for the averager, and the averaged result comes back to be
clipped and applied. The same copies-out, write-back pattern serves parameter averaging, so models
on a GPU or in half precision average like any other.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import torch

from core.training.precision import clip_gradients
from core.training.state import TrainingState

log = logging.getLogger(__name__)


class LocalWork:
    def __init__(self, state: TrainingState, clip_norm: float | None) -> None:
        self.state = state
        self.clip_norm = clip_norm
        self._accumulators: list[torch.Tensor] = []

    def zeros(self) -> None:
        self._accumulators = [
            torch.zeros_like(p, dtype=torch.float32) for p in self.state.parameters
        ]

    def move_to(self, device: torch.device) -> None:
        """Keep the accumulators where the parameters are (a pause moves both off the GPU)."""
        self._accumulators = [acc.to(device) for acc in self._accumulators]

    def accumulate(self, batch_size: int) -> None:
        """Move this microbatch's gradients from ``.grad`` into the accumulators."""
        for p, acc in zip(self.state.parameters, self._accumulators, strict=True):
            if p.grad is not None:
                acc.add_(p.grad.float(), alpha=batch_size)
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

    def state_copies(self) -> list[torch.Tensor]:
        return [
            t.detach().to("cpu", torch.float32, copy=True) for t in self.state.averaged_tensors()
        ]

    def write_state(self, copies: list[torch.Tensor]) -> None:
        with torch.no_grad():
            for target, value in zip(self.state.averaged_tensors(), copies, strict=True):
                target.copy_(value.to(device=target.device, dtype=target.dtype))

    def load(self, epoch: int, arrays: list[np.ndarray]) -> None:
        """Take a downloaded state; the unshared samples of our epoch are dropped."""
        self.state.load(epoch, arrays)
        self.drop()

    def drop(self) -> None:
        """Forget the gradients accumulated so far (the state they were computed on is gone)."""
        for acc in self._accumulators:
            acc.zero_()
