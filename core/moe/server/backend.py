"""One hosted expert: its module, its own optimizer, and the two computations a server runs on it.

Learning@home's experts learn asynchronously (Section 3.3): every backward call is also an update of
the expert's parameters with its optimizer, so there is no gradient accumulation and no round.
``forward`` keeps no activations (``no_grad``); ``backward`` runs the forward again with gradients
enabled (gradient checkpointing, Appendix D), which costs one extra forward but means a server holds
no per-request state between the two calls: a trainer may call backward on any server that holds
the expert, or never call it at all.

Neither call lets a stranger spoil the expert (``guard``): non-finite tensors are refused, each
call's output gradients are clipped row by row, a step with non-finite gradients is skipped, and
weights that are not finite after a step are replaced by ``recover``.

The methods run on the training thread (through ``TrainingBridge.run``), never on the event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from core.moe.protocol import DTYPE, ExpertInfo
from core.moe.server.guard import (
    clip_rows,
    finite_gradients,
    finite_weights,
    non_finite,
)


class PoisonedCall(ValueError):
    """A call or batch the expert refused because it would have made its weights non-finite."""


class ExpertBackend:
    """An expert ``module`` with its ``optimizer``, taking at most ``max_batch`` samples a call.

    ``input_shapes`` are per-sample shapes (no batch dimension) of the module's positional inputs;
    output shapes are found by one forward on a zero batch unless given.
    """

    def __init__(
        self,
        uid: str,
        module: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        input_shapes: Sequence[Sequence[int]],
        max_batch: int,
        output_shapes: Sequence[Sequence[int]] | None = None,
        max_grad_norm: float = 0.0,
        initial_state: Callable[[], Mapping[str, torch.Tensor]] | None = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        if not input_shapes:
            raise ValueError("an expert takes at least one input tensor")
        self.uid = uid
        self.module = module
        self.optimizer = optimizer
        self.max_batch = max_batch
        self.input_shapes = [list(shape) for shape in input_shapes]
        if output_shapes is None:
            # two samples where allowed: batch-statistics layers refuse a batch of one
            probe = [torch.zeros(min(2, max_batch), *shape) for shape in self.input_shapes]
            output_shapes = [list(out.shape[1:]) for out in self.forward(probe)]
        self.output_shapes = [list(shape) for shape in output_shapes]
        if not max_grad_norm >= 0:
            raise ValueError(f"max_grad_norm must be 0 (no clipping) or more, got {max_grad_norm}")
        self.max_grad_norm = float(max_grad_norm)
        self.updates = 0
        """Optimizer steps applied so far (one per backward batch)."""
        self.clipped_rows = 0
        """Output-gradient rows scaled down to ``max_grad_norm``."""
        self.skipped_steps = 0
        """Backward batches whose parameter gradients were not finite: no step was taken."""
        self.recoveries = 0
        """Times the weights were found non-finite after a step and ``recover`` replaced them."""
        self.recover: Callable[[ExpertBackend], None] = _reinitialise
        """Gives the expert finite weights again (the runtime's: its newest checkpoint)."""
        if initial_state is None:
            # no recipe for the first weights: keep a copy (small experts, tests)
            kept = {k: v.detach().clone() for k, v in module.state_dict().items()}
            initial_state = lambda: kept  # noqa: E731 - a closure over the copy
        self._initial_state = initial_state

    @property
    def info(self) -> ExpertInfo:
        return ExpertInfo(self.uid, DTYPE, self.input_shapes, self.output_shapes, self.max_batch)

    def forward(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The expert's outputs for a batch, with no side effects on parameters or gradients."""
        self._check(inputs, self.input_shapes, "inputs")
        with torch.no_grad():
            return _as_list(self.module(*inputs))

    def backward(
        self, inputs: Sequence[torch.Tensor], grad_outputs: Sequence[torch.Tensor]
    ) -> list[torch.Tensor]:
        """Gradients of the loss with respect to ``inputs``, given those of the outputs; then one
        optimizer step on the expert's parameters with the gradients of this batch."""
        self._check(inputs, self.input_shapes, "inputs")
        self._check(grad_outputs, self.output_shapes, "output gradients")
        self.refuse_non_finite(inputs, "inputs")
        self.refuse_non_finite(grad_outputs, "output gradients")
        clipped = [self.clip(g) for g in grad_outputs]
        leaves = [x.detach().requires_grad_(True) for x in inputs]
        self.optimizer.zero_grad(set_to_none=True)
        with torch.enable_grad():
            outputs = _as_list(self.module(*leaves))  # recomputed: nothing was kept by forward
            torch.autograd.backward(outputs, clipped)
        grads = [leaf.grad if leaf.grad is not None else torch.zeros_like(leaf) for leaf in leaves]
        if not finite_gradients(self.module.parameters()) or non_finite(grads) is not None:
            self.optimizer.zero_grad(set_to_none=True)
            self.skipped_steps += 1
            raise PoisonedCall(f"expert {self.uid}: the batch's gradients are not finite: no step")
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.updates += 1
        if not finite_weights(self.module):
            self.recoveries += 1
            self.recover(self)
        return grads

    def refuse_non_finite(self, tensors: Sequence[torch.Tensor], what: str) -> None:
        """``PoisonedCall`` if any of ``tensors`` holds NaN or an infinity."""
        bad = non_finite(tensors)
        if bad is not None:
            raise PoisonedCall(f"expert {self.uid}: {what} hold NaN or infinite values")

    def clip(self, grad_output: torch.Tensor) -> torch.Tensor:
        """``grad_output`` with each sample's row at most ``max_grad_norm`` long."""
        result, clipped = clip_rows(grad_output, self.max_grad_norm)
        self.clipped_rows += clipped
        return result

    def reset(self) -> None:
        """Back to the weights it was built with, and a fresh optimizer state."""
        self.module.load_state_dict(self._initial_state())
        self.optimizer.state.clear()

    def state_dict(self) -> dict[str, Any]:
        """The expert's parameters and optimizer state, for a checkpoint another server can load."""
        return {
            "uid": self.uid,
            "module": self.module.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "updates": self.updates,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("uid") != self.uid:
            raise ValueError(f"checkpoint of expert {state.get('uid')!r} given to {self.uid!r}")
        self.module.load_state_dict(state["module"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state.get("updates", 0))

    def _check(self, tensors: Sequence[torch.Tensor], shapes: list[list[int]], what: str) -> None:
        if len(tensors) != len(shapes):
            raise ValueError(f"expert {self.uid} takes {len(shapes)} {what}, got {len(tensors)}")
        for tensor, shape in zip(tensors, shapes, strict=True):
            if list(tensor.shape[1:]) != shape or not 1 <= tensor.shape[0] <= self.max_batch:
                raise ValueError(
                    f"expert {self.uid}: {what} of shape {list(tensor.shape)}, "
                    f"expected [1..{self.max_batch}, *{shape}]"
                )


def _reinitialise(backend: ExpertBackend) -> None:
    backend.reset()


def _as_list(outputs: torch.Tensor | Sequence[torch.Tensor]) -> list[torch.Tensor]:
    if isinstance(outputs, torch.Tensor):
        return [outputs]
    return list(outputs)
