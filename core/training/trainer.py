"""Trainer: the training loop of one peer (the nanoGPT-style loop, made collaborative).

For each microbatch: take the next batch from the data iterator, forward and backward on the training
thread (under autocast where a GPU allows it), then ``await optimizer.step(...)`` on the loop, which
steps when the collaboration is ready. With fp16 the loss is scaled by a dynamic factor (halved on
overflow, doubled after a run of clean microbatches) and the gradients are unscaled before they are
accumulated, so the collaboration only ever sees true gradients.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from core.worker.bridge import TrainingBridge
from core.worker.control import TrainingControl
from core.worker.errors import Interrupted
from core.worker.events import PeerEpoch
from core.worker.precision import Precision

log = logging.getLogger(__name__)

REPEATS = 64
"""Batches in a row a peer leaves because it computed them at these parameters already, before
it computes one anyway: data with fewer distinct batches than an epoch takes must not stall it."""

LossFn = Callable[[torch.nn.Module, Any], torch.Tensor]
"""Computes the mean loss of one batch (the forward pass)."""


class StepOptimizer(Protocol):
    """What the loop drives: the collaborative optimizer (dedloc) or DiLoCo's."""

    @property
    def epoch(self) -> int: ...

    async def step(self, batch_size: int, loss: float | None = None) -> PeerEpoch | None: ...


@dataclass
class _LossScale:
    """Dynamic loss scaling for fp16 (bf16 and fp32 need none)."""

    value: float = 2.0**15
    clean: int = 0
    grow_after: int = 1000

    def unscale(self, parameters: list[torch.nn.Parameter]) -> bool:
        """Divide gradients by the scale; False (and a smaller scale) if any is not finite."""
        grads = [p.grad for p in parameters if p.grad is not None]
        finite = True
        if grads:
            # one pass over all gradients and one wait for the GPU, not one per parameter: an
            # inf or NaN anywhere makes its tensor's norm non-finite
            torch._foreach_div_(grads, self.value)
            norms = torch._foreach_norm(grads)
            finite = bool(torch.isfinite(torch.stack(norms)).all())
        if not finite:
            self.value = max(1.0, self.value / 2)
            self.clean = 0
            return False
        self.clean += 1
        if self.clean >= self.grow_after:
            self.value *= 2
            self.clean = 0
        return True


class Trainer:
    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: StepOptimizer,
        bridge: TrainingBridge,
        batches: Iterator[Any],
        loss_fn: LossFn,
        *,
        precision: Precision | None = None,
        batch_size_of: Callable[[Any], int] | None = None,
        control: TrainingControl | None = None,
        witness: Callable[[Any, float], None] | None = None,
        fresh: Callable[[Any], bool] | None = None,
    ) -> None:
        """``witness``: told each microbatch and its loss on the training thread, while its
        gradients are in ``.grad`` (the work receipts, ``core.training.credit.checks``);
        ``fresh``: asked before a batch's forward pass whether it is new at these parameters
        (the mode's ``fresh``); a batch that is not is left for the next one, up to ``REPEATS``
        in a row (a dataset smaller than an epoch must not stall the peer)."""
        self.model = model
        self.optimizer = optimizer
        self.bridge = bridge
        self.batches = batches
        self.loss_fn = loss_fn
        self.precision = precision
        self._batch_size_of = batch_size_of or _leading_dimension
        self._scale = (
            _LossScale() if precision is not None and precision.dtype == torch.float16 else None
        )
        self.control = control
        self.witness = witness
        self.fresh = fresh
        self.microbatches = 0
        self.skipped = 0
        self.repeats = 0
        """Batches left because they were computed at these parameters already."""
        self._in_a_row = 0
        self._warned = False
        self.interrupted = 0
        self.samples = 0
        """Samples whose gradients were accumulated (what the contribution ledger counts)."""
        self.compute_seconds = 0.0
        """Time spent computing those microbatches (interrupted ones are not counted)."""
        self._hooks = bridge.watch(model) if control is not None else []

    async def run(
        self,
        *,
        until_epoch: int | None = None,
        stop: asyncio.Event | None = None,
        on_epoch: Callable[[PeerEpoch], None] | None = None,
    ) -> None:
        """Train until the collaboration reaches ``until_epoch`` or ``stop`` is set."""
        while (until_epoch is None or self.optimizer.epoch < until_epoch) and not (
            stop is not None and stop.is_set()
        ):
            if self.control is not None:
                await self.control.wait_running()
                if stop is not None and stop.is_set():
                    return
            started = time.monotonic()
            outcome = await self.bridge.run(self.microbatch)
            if outcome == "end":
                log.info("the data iterator is exhausted")
                return
            if outcome is None or outcome == "interrupted":
                continue  # overflowed under fp16, or paused: nothing to accumulate
            assert not isinstance(outcome, str)
            size, loss = outcome
            computed = time.monotonic() - started
            self.microbatches += 1
            self.samples += size
            self.compute_seconds += computed
            report = await self.optimizer.step(size, loss)
            if report is not None and on_epoch is not None:
                on_epoch(report)
            if self.control is not None:
                await self.control.rest(computed)

    @property
    def loss_scale(self) -> float | None:
        """The dynamic loss scale of fp16 training now; None under bf16 and fp32, which need none."""
        return self._scale.value if self._scale is not None else None

    def close(self) -> None:
        """Remove the interrupt hooks from the model."""
        for handle in self._hooks:
            handle.remove()
        self._hooks = []

    def microbatch(self) -> tuple[int, float] | str | None:
        """Forward and backward of one batch, on the calling thread (``run`` calls it on the
        training thread): its size and loss, its gradients left in ``.grad`` for whoever
        accumulates them; None when it was skipped (a non-finite loss, or an overflow under fp16),
        "end" when the data ran out, "interrupted" when a pause dropped it (its partial gradients
        are discarded). The optimizer is not stepped: a caller driving the local work itself
        (a benchmark, a test) steps it as it likes."""
        try:
            return self._forward_backward()
        except Interrupted:
            self.interrupted += 1
            self.model.zero_grad(set_to_none=True)
            return "interrupted"

    def _forward_backward(self) -> tuple[int, float] | str | None:
        try:
            batch = next(self.batches)
            while self.fresh is not None and not self.fresh(batch) and self._in_a_row < REPEATS:
                self.repeats += 1
                self._in_a_row += 1
                batch = next(self.batches)
        except StopIteration:  # it cannot cross into the loop's future, so it becomes a marker
            return "end"
        if self._in_a_row >= REPEATS and not self._warned:
            self._warned = True
            log.warning(
                "the data repeats within an epoch: %d batches in a row were computed at these "
                "parameters already, and this one is computed again (a work check names a batch "
                "counted twice)",
                REPEATS,
            )
        self._in_a_row = 0
        device = self.precision.device if self.precision is not None else None
        if device is not None:
            batch = _to_device(batch, device)
        self.model.train()
        context = (
            self.precision.autocast() if self.precision is not None else contextlib.nullcontext()
        )
        with context:
            loss = self.loss_fn(self.model, batch)
        value = float(loss.detach())
        if not math.isfinite(value):
            self.skipped += 1
            self.model.zero_grad(set_to_none=True)
            log.warning("non-finite loss: microbatch skipped")
            return None
        if self._scale is not None:
            (loss * self._scale.value).backward()  # type: ignore[no-untyped-call]
            if not self._scale.unscale([p for p in self.model.parameters() if p.requires_grad]):
                self.skipped += 1
                self.model.zero_grad(set_to_none=True)
                return None
        else:
            loss.backward()  # type: ignore[no-untyped-call]
        if self.witness is not None:
            self.witness(batch, value)
        return self._batch_size_of(batch), value


def _leading_dimension(batch: Any) -> int:
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0])
    if isinstance(batch, dict):
        return _leading_dimension(next(iter(batch.values())))
    if isinstance(batch, list | tuple):
        return _leading_dimension(batch[0])
    raise TypeError(f"cannot tell the batch size of a {type(batch).__name__}")


def _to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, list | tuple):
        return type(batch)(_to_device(v, device) for v in batch)
    return batch
