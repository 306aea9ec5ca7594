"""HostedExpert: an expert as a volunteer's server runs it, on its device, counting what it serves.

``ExpertBackend`` computes on whatever device its module is on, with the tensors it is given. A
server receives tensors on the CPU (they come off the network) and may compute on a GPU, and a
volunteer's contribution is the work it served. So a hosted expert moves the inputs to its device
and the results back, counts the samples and the time of every batch it computed (``Served``), and
moves itself off an accelerator when the engine pauses it (``move_to``) and back on resume.

A sample is one row of one call: a forward sample is one input through the expert, a backward
sample one input's gradient and its share of an update. The counters are written on the training
thread only and read on the loop (single writer: a read is at worst one batch behind).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from core.moe.server.backend import ExpertBackend
from core.moe.server.experts import ExpertSpec


@dataclass
class Served:
    """What a server's experts computed (running totals, all experts together)."""

    forward_samples: int = 0
    backward_samples: int = 0
    forward_batches: int = 0
    backward_batches: int = 0
    compute_seconds: float = 0.0

    @property
    def samples(self) -> int:
        """Forward and backward samples together: the unit the contribution ledger counts."""
        return self.forward_samples + self.backward_samples


class HostedExpert(ExpertBackend):
    """An ``ExpertBackend`` on ``device`` that counts into ``served`` (shared by a server's experts)."""

    def __init__(
        self,
        uid: str,
        module: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        input_shapes: Sequence[Sequence[int]],
        output_shapes: Sequence[Sequence[int]],
        max_batch: int,
        served: Served,
        device: torch.device,
        max_grad_norm: float = 0.0,
        initial_state: Callable[[], Mapping[str, torch.Tensor]] | None = None,
    ) -> None:
        super().__init__(
            uid,
            module,
            optimizer,
            input_shapes=input_shapes,
            output_shapes=output_shapes,
            max_batch=max_batch,
            max_grad_norm=max_grad_norm,
            initial_state=initial_state,
        )
        self.served = served
        self.device = torch.device("cpu")
        self.move_to(device)

    @classmethod
    def build(
        cls, spec: ExpertSpec, uid: str, served: Served, device: torch.device
    ) -> HostedExpert:
        """Expert ``uid`` as ``spec`` describes it (the same initial weights on every server)."""
        module = spec.module(uid)
        shape = [spec.hidden]
        return cls(
            uid,
            module,
            spec.optimizer_for(module),
            input_shapes=[shape],
            output_shapes=[shape],
            max_batch=spec.max_batch,
            served=served,
            device=device,
            max_grad_norm=spec.max_grad_norm,
            initial_state=lambda: spec.module(uid).state_dict(),
        )

    def forward(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        started = time.perf_counter()
        outputs = super().forward([x.to(self.device) for x in inputs])
        result = [out.cpu() for out in outputs]
        served = self.served
        served.forward_samples += int(inputs[0].shape[0])
        served.forward_batches += 1
        served.compute_seconds += time.perf_counter() - started
        return result

    def backward(
        self, inputs: Sequence[torch.Tensor], grad_outputs: Sequence[torch.Tensor]
    ) -> list[torch.Tensor]:
        started = time.perf_counter()
        grads = super().backward(
            [x.to(self.device) for x in inputs], [g.to(self.device) for g in grad_outputs]
        )
        result = [grad.cpu() for grad in grads]
        served = self.served
        served.backward_samples += int(inputs[0].shape[0])
        served.backward_batches += 1
        served.compute_seconds += time.perf_counter() - started
        return result

    def move_to(self, device: torch.device) -> None:
        """Parameters and optimizer state to ``device`` (on the training thread)."""
        if device == self.device:
            return
        self.module.to(device)
        for entry in self.optimizer.state.values():
            for key, value in entry.items():
                # Adam's step counter stays on the CPU, where torch keeps it
                if isinstance(value, torch.Tensor) and not (key == "step" and value.dim() == 0):
                    entry[key] = value.to(device)
        self.device = device
