"""Asynchronous training of a model with remote mixture-of-experts layers (Learning@home, 3.1, 3.3).

A batch through a DMoE model spends most of its time waiting for experts on other computers, so the
trainer does not wait for one batch before starting the next: it keeps ``concurrency`` batches in
flight, each on its own worker thread of a ``TrainingBridge(workers=concurrency)``, each blocking
its thread on the network while the others compute or wait too.

Every batch runs on its own copy of the model (a replica per slot in flight; the remote layers'
copies share their connections and counters). At its start the replica takes the current local
parameters, under the step lock; the worker then computes the forward pass, the loss and
``torch.autograd.grad`` with respect to the replica's parameters, so no two threads ever add into
the same ``.grad`` and no optimizer step can change a tensor that another batch's graph saved.
Then, under the lock and one batch at a time, the gradients are written into the model's ``.grad``
and the optimizer steps. A gradient is thus computed at parameters a few steps old (about
``concurrency - 1``; more for a batch that quicker ones overtake): the stale gradients that
asynchronous training trades for throughput (each report says how stale). Adam with a learning
rate tuned for synchronous training suffers from them; a smaller one is the remedy. The experts
need nothing from here: each server updates its own in every backward call.

A batch whose experts fail (``MoEError``, ``TooFewExpertsError``, any network error) is counted and
skipped; too many failures in a row stop training with a ``TrainingError``. Pausing is the bridge's:
``bridge.interrupt()`` makes every batch in flight drop its work (``Interrupted`` in a watched layer
or in a network wait), and ``run`` returns once they have. ``DigitsMoE`` is the small model of the
demo and experiments; ``core.moe.client.digits`` loads its data.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from core.moe.client.calls import MoEError
from core.moe.client.layer import RemoteMixtureOfExperts
from core.net.errors import NetError
from core.util.tasks import BackgroundTasks
from core.worker.bridge import TrainingBridge
from core.worker.errors import Interrupted, TrainingError

Batch = tuple[Tensor, Tensor]
LossFn = Callable[[Tensor, Tensor], Tensor]
SKIPPED: tuple[type[Exception], ...] = (MoEError, NetError)
"""What makes a batch fail without stopping training: the experts or the network let it down."""


@dataclass(frozen=True, slots=True)
class StepReport:
    """One applied step: its number, the batch's loss and size, and how stale its gradient was."""

    step: int
    loss: float
    balancing: float
    samples: int
    staleness: int
    """Steps applied by other batches between this batch's start and its own step."""


@dataclass(slots=True)
class TrainerStats:
    steps: int = 0
    samples: int = 0
    failed: int = 0
    """Batches skipped because experts or the network failed them."""
    failures: Counter[str] = field(default_factory=Counter)
    """Skipped batches per error class name."""
    max_in_flight: int = 0
    """The most batches that were between their start and their step at one time."""
    interrupted: bool = False
    exhausted: bool = False
    """The batch iterator ran out."""


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What one worker job ended with (one of the fields says so)."""

    report: StepReport | None = None
    failure: Exception | None = None
    interrupted: bool = False
    exhausted: bool = False


class AsyncMoETrainer:
    """Trains ``model``'s local parameters with ``optimizer``, ``concurrency`` batches at a time.

    ``loss_fn(outputs, targets)`` gives the batch's loss; ``balancing_weight`` times the sum of
    the remote layers' ``balancing_loss`` is added to it. ``on_step`` is called on the loop with
    each applied step's report, in step order.
    """

    def __init__(
        self,
        model: nn.Module,
        loss_fn: LossFn,
        optimizer: torch.optim.Optimizer,
        batches: Iterable[Batch],
        *,
        bridge: TrainingBridge,
        concurrency: int,
        balancing_weight: float = 0.0,
        on_step: Callable[[StepReport], None] | None = None,
        max_consecutive_failures: int = 100,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        if bridge.workers < concurrency:
            raise ValueError(
                f"{concurrency} batches in flight need a bridge with as many workers, "
                f"it has {bridge.workers}"
            )
        self.model = model
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self.bridge = bridge
        self.concurrency = concurrency
        self.balancing_weight = balancing_weight
        self.on_step = on_step
        self.max_consecutive_failures = max_consecutive_failures
        self.stats = TrainerStats()
        self._batches: Iterator[Batch] = iter(batches)
        self._params = [p for p in model.parameters() if p.requires_grad]
        # made now, on the caller's thread: deepcopy of a model is not safe while it trains
        self._replicas = [copy.deepcopy(model) for _ in range(concurrency)]
        self._data_lock = threading.Lock()  # iterators are not thread-safe
        self._state_lock = threading.Lock()  # parameters, optimizer, counters below
        self._in_flight = 0
        self._steps = 0
        self._stopping = False
        self._started = 0
        self._reported = 0
        self._unreported: dict[int, StepReport] = {}
        self._last_failure: Exception | None = None

    async def run(self, steps: int) -> TrainerStats:
        """Apply ``steps`` more optimizer steps (fewer if interrupted or out of batches)."""
        goal = self.stats.steps + steps
        free = list(self._replicas)
        jobs: dict[asyncio.Task[_Outcome], nn.Module] = {}
        consecutive = 0
        tasks = BackgroundTasks("moe-trainer")  # the batches in flight, named by their number
        self._stopping = False
        self.stats.interrupted = False
        hooks = [handle for replica in self._replicas for handle in self.bridge.watch(replica)]
        try:
            while True:
                while (
                    free
                    and self.stats.steps + len(jobs) < goal
                    and not (self.stats.interrupted or self.stats.exhausted)
                    and not self.bridge.interrupted
                ):
                    replica = free.pop()
                    self._started += 1
                    task = tasks.spawn(
                        f"batch-{self._started}",
                        self.bridge.run(self._train_one, replica),
                        awaited=True,
                    )
                    jobs[task] = replica
                if not jobs:
                    break
                done, _ = await asyncio.wait(jobs, return_when=asyncio.FIRST_COMPLETED)
                give_up = False
                for task in done:
                    free.append(jobs.pop(task))
                    outcome = task.result()  # a bug in a batch stops training here
                    consecutive = 0 if outcome.report else consecutive + bool(outcome.failure)
                    give_up |= consecutive >= self.max_consecutive_failures
                    self._account(outcome)
                if give_up:
                    raise TrainingError(
                        f"{self.max_consecutive_failures} batches in a row failed; the last one: "
                        f"{type(self._last_failure).__name__}: {self._last_failure}"
                    )
        finally:
            with self._state_lock:
                self._stopping = True  # batches still running (after an error) drop, never step
            if jobs:
                # threads cannot be cancelled: wait until they are done with this run's model
                await asyncio.wait(jobs)
            await tasks.close()
            for handle in hooks:
                handle.remove()
        self.stats.interrupted |= self.bridge.interrupted
        return self.stats

    def _account(self, outcome: _Outcome) -> None:
        if outcome.report is not None:
            self.stats.steps += 1
            self.stats.samples += outcome.report.samples
            # jobs finish in any order; the callback hears of the steps in the order they were made
            self._unreported[outcome.report.step] = outcome.report
            while self._reported + 1 in self._unreported:
                self._reported += 1
                report = self._unreported.pop(self._reported)
                if self.on_step is not None:
                    self.on_step(report)
        elif outcome.failure is not None:
            self._last_failure = outcome.failure
            self.stats.failed += 1
            self.stats.failures[type(outcome.failure).__name__] += 1
        self.stats.interrupted |= outcome.interrupted
        self.stats.exhausted |= outcome.exhausted

    # ---- on a worker thread ----------------------------------------------------------------------

    def _train_one(self, replica: nn.Module) -> _Outcome:
        with self._data_lock:
            batch = next(self._batches, None)
        if batch is None:
            return _Outcome(exhausted=True)
        params = [p for p in replica.parameters() if p.requires_grad]
        with self._state_lock, torch.no_grad():
            for mine, master in zip(params, self._params, strict=True):
                mine.copy_(master)
            start = self._steps
            self._in_flight += 1
            self.stats.max_in_flight = max(self.stats.max_in_flight, self._in_flight)
        try:
            inputs, targets = batch
            loss = self.loss_fn(replica(inputs), targets)
            balancing = self._balancing(replica)
            total = loss + self.balancing_weight * balancing if self.balancing_weight else loss
            grads = torch.autograd.grad(total, params, allow_unused=True)
        except Interrupted:
            return _Outcome(interrupted=True)
        except SKIPPED as exc:
            return _Outcome(failure=exc)
        finally:
            with self._state_lock:
                self._in_flight -= 1
        with self._state_lock:
            if self._stopping:
                return _Outcome(interrupted=True)
            for master, grad in zip(self._params, grads, strict=True):
                master.grad = grad
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self._steps += 1
            report = StepReport(
                self._steps,
                loss.item(),
                balancing.item(),
                len(inputs),
                self._steps - 1 - start,
            )
        return _Outcome(report=report)

    @staticmethod
    def _balancing(replica: nn.Module) -> Tensor:
        losses = [
            layer.balancing_loss
            for layer in replica.modules()
            if isinstance(layer, RemoteMixtureOfExperts) and layer.balancing_loss is not None
        ]
        return torch.stack(losses).sum() if losses else torch.zeros(())


class DigitsMoE(nn.Module):
    """The demo's classifier: 8x8 digit pixels -> Linear+ReLU -> remote experts -> 10 classes."""

    def __init__(self, moe: RemoteMixtureOfExperts, features: int = 64, classes: int = 10) -> None:
        super().__init__()
        self.encoder = nn.Linear(features, moe.hidden)
        self.moe = moe
        self.head = nn.Linear(moe.hidden, classes)

    def forward(self, pixels: Tensor) -> Tensor:
        hidden = torch.relu(self.encoder(pixels))
        out: Tensor = self.head(self.moe(hidden))
        return out
