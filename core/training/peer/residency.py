"""Residency: where a peer's training state lives across a pause, so that a pause gives the
accelerator's memory back.

On a pause the gradients are dropped and the model, the optimizer's statistics and the gradient
accumulators move to the CPU, and the allocator's cache is emptied, so that the volunteer's own
programs get the GPU; on a resume they move back to the training device. Statistics an optimizer
keeps offloaded on the host (``core.optim.moments``) stay there. Every move runs on the training
thread (``core.worker.bridge``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from core.optim.moments import MomentOptimizer
from core.training.local import LocalWork
from core.training.state import TrainingState


class Residency:
    def __init__(
        self, state: TrainingState, local: Callable[[], LocalWork | None] = lambda: None
    ) -> None:
        """``local``: the optimizer's torch work, once there is one (its accumulators move too)."""
        self.state = state
        self._local = local
        self.device = torch.device("cpu")
        """Where training runs (set once the state is placed there)."""
        self.offloaded = False
        """The state sits on the CPU for a pause, away from ``device``."""

    def release(self) -> None:
        """On the training thread: drop gradients and move tensors off an accelerator."""
        self.state.model.zero_grad(set_to_none=True)
        if self.device.type != "cpu" and not self.offloaded:
            self.move(torch.device("cpu"))
            self.offloaded = True
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        elif self.device.type == "mps":
            torch.mps.empty_cache()

    def restore(self) -> None:
        """On the training thread: back to the training device after ``release``."""
        if self.offloaded:
            self.move(self.device)
            self.offloaded = False

    def move(self, device: torch.device) -> None:
        """Model, optimizer statistics and gradient accumulators to ``device`` (training thread)."""
        self.state.model.to(device)
        optimizer = self.state.optimizer
        if isinstance(optimizer, MomentOptimizer):  # offloaded statistics stay on the host
            optimizer.move_states(device)
        else:
            for entry in optimizer.state.values():
                for key, value in entry.items():
                    if isinstance(value, torch.Tensor):
                        entry[key] = value.to(device)
        local = self._local()
        if local is not None:
            local.move_to(device)
