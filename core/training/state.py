"""TrainingState: a model, its optimizer and the epoch, as flat lists of tensors.

Three things need the state as tensors in a fixed order: parameter averaging (parameters and optimizer
statistics), state sharing with peers that fell behind, and checkpoints. Every method here runs on the
training thread (through the bridge), never concurrently with a step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from core.training.checkpoints import Checkpoint
from core.training.rollback import METADATA_KEY, applied_of


class TrainingState:
    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        lr_lambda: Callable[[int], float] | None = None,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.parameters = [p for p in model.parameters() if p.requires_grad]
        self.epoch = 0
        self.rollback = 0
        """The last rollback order applied to this state (``core.training.rollback``; 0: none):
        travels with snapshots and checkpoints, so that each order applies once."""
        self._lr_lambda = lr_lambda
        self._base_lrs = [float(group["lr"]) for group in optimizer.param_groups]
        self.set_learning_rate()

    def set_learning_rate(self) -> None:
        """The schedule is a function of the collaboration's epoch, so it needs no state of its own."""
        factor = 1.0 if self._lr_lambda is None else self._lr_lambda(self.epoch)
        for group, base in zip(self.optimizer.param_groups, self._base_lrs, strict=True):
            group["lr"] = base * factor

    def ensure_optimizer_state(self) -> None:
        """Create the optimizer's statistics if no step has been taken yet.

        Peers exchange statistics tensor by tensor, so a peer that has not stepped must have the same
        tensors as one that has: one step with zero gradients and zero learning rate creates them and
        changes no parameter. The new statistics are then zeroed (step counters included), which for
        Adam, AdamW, LAMB and SGD with momentum behaves exactly like a fresh optimizer.
        """
        missing = [p for p in self.parameters if not self.optimizer.state.get(p)]
        if not missing:
            return
        saved = [p.grad for p in self.parameters]
        lrs = [group["lr"] for group in self.optimizer.param_groups]
        for p in self.parameters:
            p.grad = torch.zeros_like(p)
        for group in self.optimizer.param_groups:
            group["lr"] = 0.0
        self.optimizer.step()
        for group, lr in zip(self.optimizer.param_groups, lrs, strict=True):
            group["lr"] = lr
        for p, grad in zip(self.parameters, saved, strict=True):
            p.grad = grad
        with torch.no_grad():
            for p in missing:
                state = self.optimizer.state[p]
                for key, value in state.items():
                    if isinstance(value, torch.Tensor):
                        value.zero_()
                    elif isinstance(value, int | float) and not isinstance(value, bool):
                        state[key] = type(value)(0)

    def optimizer_tensors(self) -> list[torch.Tensor]:
        """The optimizer's per-parameter statistics, in parameter order then key order."""
        self.ensure_optimizer_state()
        tensors = []
        for p in self.parameters:
            state = self.optimizer.state[p]
            for key in sorted(state):
                value = state[key]
                if isinstance(value, torch.Tensor) and value.is_floating_point():
                    tensors.append(value)
        return tensors

    def averaged_tensors(self) -> list[torch.Tensor]:
        """What parameter averaging averages: parameters, then optimizer statistics."""
        return [*self.parameters, *self.optimizer_tensors()]

    def snapshot(self) -> tuple[int, dict[str, Any], list[np.ndarray]]:
        """A copy of the whole state for sharing: (epoch, metadata, arrays)."""
        arrays = [t.detach().to("cpu", copy=True).numpy() for t in self.averaged_tensors()]
        return self.epoch, {"epoch": self.epoch, METADATA_KEY: self.rollback}, arrays

    def restore(self, checkpoint: Checkpoint) -> None:
        """Take model, optimizer and epoch from a checkpoint (errors of torch if it does not fit)."""
        self.model.load_state_dict(checkpoint.model)
        self.optimizer.load_state_dict(checkpoint.optimizer)
        self.epoch = checkpoint.epoch
        self.rollback = applied_of(checkpoint.metadata)
        self.set_learning_rate()

    def load(self, epoch: int, arrays: list[np.ndarray]) -> None:
        """Replace the state with a downloaded one; raises ValueError if its layout differs."""
        targets = self.averaged_tensors()
        if len(arrays) != len(targets):
            raise ValueError(
                f"the state has {len(arrays)} tensors, this model needs {len(targets)}"
            )
        for target, array in zip(targets, arrays, strict=True):
            if tuple(array.shape) != tuple(target.shape):
                raise ValueError(f"a tensor of shape {array.shape} where {target.shape} belongs")
        with torch.no_grad():
            for target, array in zip(targets, arrays, strict=True):
                target.copy_(torch.from_numpy(np.array(array, copy=True)).to(target.dtype))
        self.epoch = epoch
        self.set_learning_rate()
