"""TrainingState: a model, its optimizer and the epoch, as flat lists of tensors.

Three things need the state as tensors in a fixed order: parameter averaging (parameters and optimizer
statistics), state sharing with peers that fell behind, and checkpoints. Every method here runs on the
training thread (through the bridge), never concurrently with a step.

With 8-bit optimizer states (``core.optim.moments``) the two forms differ: snapshots carry the
state *as stored* (8-bit codes and absmax: a smaller download for newcomers), while averaging takes
and gives the moments as float32 (``averaging_copies`` / ``write_averaged``), since a mean of codes
means nothing; written back, they are quantised again. With 32-bit states both are the same tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from core.optim.moments import DENSE_KEYS, MomentOptimizer, is_absmax
from core.training.checkpoints import Checkpoint
from core.training.errors import CheckpointError
from core.training.moderation.rollback import METADATA_KEY, applied_of


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
        """The last rollback order applied to this state (``core.training.moderation.rollback``; 0: none):
        travels with snapshots and checkpoints, so that each order applies once."""
        self._lr_lambda = lr_lambda
        self._base_lrs = [float(group["lr"]) for group in optimizer.param_groups]
        self.set_learning_rate()

    def set_learning_rate(self, step: int | None = None) -> None:
        """The schedule is a function of the collaboration's epoch, so it needs no state of its own
        (``step``: another clock, e.g. a DiLoCo peer's inner steps)."""
        at = self.epoch if step is None else step
        factor = 1.0 if self._lr_lambda is None else self._lr_lambda(at)
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
        if isinstance(self.optimizer, MomentOptimizer):
            self.optimizer.ensure_state(missing)  # the same zeros, without the step
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

    def reset_optimizer_state(self) -> None:
        """Every statistic back to what a fresh optimizer holds, in place: moments and step
        counts zero (8-bit moments made anew, their zero is a code). What a diloco round that a
        checker can replay starts from (``DilocoState.fresh_moments``)."""
        if isinstance(self.optimizer, MomentOptimizer):
            for p in self.parameters:
                self.optimizer.state[p].clear()
            self.optimizer.ensure_state(self.parameters)
            return
        with torch.no_grad():
            for p in self.parameters:
                state = self.optimizer.state.get(p)
                for key, value in (state or {}).items():
                    if isinstance(value, torch.Tensor):
                        value.zero_()
                    elif isinstance(value, int | float) and not isinstance(value, bool):
                        state[key] = type(value)(0)  # type: ignore[index]

    def optimizer_tensors(self) -> list[torch.Tensor]:
        """The optimizer's per-parameter statistics as stored, in parameter order then key order
        (8-bit codes included)."""
        return [tensor for _, _, tensor in self._stored()]

    def _stored(self) -> list[tuple[int, str, torch.Tensor]]:
        """(parameter index, key, tensor) of each stored statistic, in ``optimizer_tensors`` order."""
        self.ensure_optimizer_state()
        found = []
        for index, p in enumerate(self.parameters):
            state = self.optimizer.state[p]
            for key in sorted(state):
                value = state[key]
                if isinstance(value, torch.Tensor) and (
                    value.is_floating_point() or value.dtype == torch.uint8
                ):
                    found.append((index, key, value))
        return found

    def averaged_tensors(self) -> list[torch.Tensor]:
        """The state as stored: parameters, then optimizer statistics (what snapshots carry; with
        32-bit statistics also exactly what averaging averages)."""
        return [*self.parameters, *self.optimizer_tensors()]

    def averaging_copies(self) -> list[torch.Tensor]:
        """What state averaging averages, as CPU float32 copies: parameters, then each parameter's
        statistics as float values (8-bit moments dequantised), in key order."""
        return [
            t.detach().to("cpu", torch.float32, copy=True)
            for t in [*self.parameters, *self._dense_statistics()]
        ]

    def write_averaged(self, copies: list[torch.Tensor]) -> None:
        """Take back what ``averaging_copies`` gave, averaged (8-bit moments quantised again)."""
        optimizer = self.optimizer
        if not isinstance(optimizer, MomentOptimizer):
            targets = self.averaged_tensors()
            if len(copies) != len(targets):
                raise ValueError(f"{len(copies)} averaged tensors where {len(targets)} belong")
            with torch.no_grad():
                for target, value in zip(targets, copies, strict=True):
                    target.copy_(value.to(device=target.device, dtype=target.dtype))
            return
        per_param = len(DENSE_KEYS)
        expected = len(self.parameters) * (1 + per_param)
        if len(copies) != expected:
            raise ValueError(f"{len(copies)} averaged tensors where {expected} belong")
        with torch.no_grad():
            for p, value in zip(self.parameters, copies[: len(self.parameters)], strict=True):
                p.copy_(value.to(device=p.device, dtype=p.dtype))
            rest = copies[len(self.parameters) :]
            for index, p in enumerate(self.parameters):
                values = rest[index * per_param : (index + 1) * per_param]
                optimizer.load_dense(p, dict(zip(DENSE_KEYS, values, strict=True)))

    def _dense_statistics(self) -> list[torch.Tensor]:
        optimizer = self.optimizer
        if not isinstance(optimizer, MomentOptimizer):
            return self.optimizer_tensors()
        self.ensure_optimizer_state()
        found = []
        for p in self.parameters:
            dense = optimizer.dense_state(p)
            found += [dense[key] for key in DENSE_KEYS]
        return found

    def snapshot(self) -> tuple[int, dict[str, Any], list[np.ndarray]]:
        """A copy of the whole state for sharing: (epoch, metadata, arrays)."""
        arrays = [t.detach().to("cpu", copy=True).numpy() for t in self.averaged_tensors()]
        return self.epoch, {"epoch": self.epoch, METADATA_KEY: self.rollback}, arrays

    def restore(self, checkpoint: Checkpoint) -> None:
        """Take model, optimizer and epoch from a checkpoint; ``CheckpointError`` saying why for
        one that does not fit. A diloco checkpoint's model is its outer parameters, and its
        optimizer's statistics are the inner optimizer's (``inner``), beside the outer state,
        which only diloco's backbone restores (a trainer takes the swarm's when it joins)."""
        optimizer = checkpoint.optimizer
        inner = optimizer.get("inner")
        if "param_groups" not in optimizer and isinstance(inner, dict):
            optimizer = inner
        try:
            self.model.load_state_dict(checkpoint.model)
        except RuntimeError as exc:
            raise CheckpointError(f"its model is not this project's: {exc}") from None
        try:
            self.optimizer.load_state_dict(optimizer)
        except (KeyError, ValueError, TypeError) as exc:
            raise CheckpointError(
                f"its optimizer's statistics do not fit this project's optimizer ({exc!r})"
            ) from None
        self.epoch = checkpoint.epoch
        self.rollback = applied_of(checkpoint.metadata)
        self.set_learning_rate()

    def load(self, epoch: int, arrays: list[np.ndarray]) -> None:
        """Replace the state with a downloaded one; raises ValueError, changing nothing, if its
        layout differs (tensor count, shapes, 8-bit codes where floats belong or the reverse, or
        8-bit block scales that are negative or not finite)."""
        stored = self._stored()
        targets = [*self.parameters, *(t for _, _, t in stored)]
        keys = [""] * len(self.parameters) + [key for _, key, _ in stored]
        if len(arrays) != len(targets):
            raise ValueError(
                f"the state has {len(arrays)} tensors, this model needs {len(targets)} "
                "(do both peers use the same model and optimizer_states?)"
            )
        for target, array, key in zip(targets, arrays, keys, strict=True):
            if tuple(array.shape) != tuple(target.shape):
                raise ValueError(f"a tensor of shape {array.shape} where {target.shape} belongs")
            codes_expected = target.dtype == torch.uint8
            if codes_expected != (array.dtype == np.uint8):
                what = "8-bit codes" if array.dtype == np.uint8 else f"{array.dtype} values"
                raise ValueError(
                    f"{what} where {key or 'a parameter'} ({target.dtype}) belongs: the state was "
                    "shared with other optimizer_states"
                )
            if is_absmax(key) and not (np.isfinite(array).all() and (array >= 0).all()):
                raise ValueError(f"{key} values must be finite and non-negative")
        with torch.no_grad():
            for target, array in zip(targets, arrays, strict=True):
                target.copy_(torch.from_numpy(np.array(array, copy=True)).to(target.dtype))
        self.epoch = epoch
        self.set_learning_rate()
