"""TaskPool: requests for one expert and one method, gathered into device-sized batches.

Many trainers call the same expert with a few samples each; running each call alone would waste the
device on tiny batches. A pool queues the calls and offers a batch once ``max_batch`` samples wait or
the oldest call has waited ``max_wait`` seconds, whichever comes first, so a lone trainer is not
held back for long. The queue is bounded (``max_queue`` samples): past it, a call is refused at once
with "busy" (``ResourceExhaustedError``) so the trainer can pick another expert instead of waiting.

The pool is passive: the server's runner asks it whether it is ready (``ready(now)``) and when it
will be (``due_at``), takes a ``Batch``, computes, and hands the results back through the batch,
which gives each call its own slice. Times are passed in, so the pool is tested without clocks.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from core.net.errors import InvalidRequestError, ResourceExhaustedError


@dataclass(slots=True)
class Task:
    """One call waiting in a pool: its tensors (batch dimension first) and its answer."""

    tensors: list[torch.Tensor]
    size: int
    arrived: float
    future: asyncio.Future[list[torch.Tensor]]


class Batch:
    """Calls taken from a pool together; merged for one computation, then split back per call."""

    def __init__(self, pool: str, tasks: list[Task]) -> None:
        self.pool = pool
        self.tasks = tasks
        self.size = sum(task.size for task in tasks)

    def merged(self) -> list[torch.Tensor]:
        """The calls' tensors concatenated along the batch dimension (one per position)."""
        columns = zip(*(task.tensors for task in self.tasks), strict=True)
        return [torch.cat(list(column)) if len(self.tasks) > 1 else column[0] for column in columns]

    def deliver(self, outputs: Sequence[torch.Tensor]) -> None:
        """Give each call its rows of every output; calls whose caller left are skipped."""
        for output in outputs:
            if output.shape[0] != self.size:
                error = RuntimeError(
                    f"{self.pool}: output of {output.shape[0]} rows for {self.size}"
                )
                self.fail(error)
                return
        start = 0
        for task in self.tasks:
            if not task.future.done():
                task.future.set_result([out[start : start + task.size] for out in outputs])
            start += task.size

    def fail(self, error: BaseException) -> None:
        for task in self.tasks:
            if not task.future.done():
                task.future.set_exception(error)


class TaskPool:
    """A bounded queue of calls for one (expert, method), released in batches."""

    def __init__(
        self,
        name: str,
        *,
        max_batch: int,
        max_queue: int,
        max_wait: float,
        on_submit: Callable[[], None] | None = None,
    ) -> None:
        if max_batch < 1 or max_queue < 1 or max_wait < 0:
            raise ValueError(
                f"pool {name}: max_batch and max_queue must be positive and max_wait not negative"
            )
        self.name = name
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.max_wait = max_wait
        self._on_submit = on_submit
        self._tasks: deque[Task] = deque()
        self._queued = 0
        self.batches = 0
        """Batches taken so far (what tests and statistics count)."""

    @property
    def queued(self) -> int:
        """Samples waiting."""
        return self._queued

    def check_room(self, size: int) -> None:
        """Raise what ``submit`` would for ``size`` samples, before the caller reads their data."""
        if not 1 <= size <= self.max_batch:
            raise InvalidRequestError(
                f"{self.name}: a call of {size} samples; it takes 1 to {self.max_batch}"
            )
        if self._queued + size > self.max_queue:
            raise ResourceExhaustedError(
                f"{self.name} is busy: {self._queued} samples queued, room for {self.max_queue}"
            )

    def submit(self, tensors: list[torch.Tensor], now: float) -> asyncio.Future[list[torch.Tensor]]:
        """Queue a call; its future gets the call's rows of the batch's results."""
        if not tensors:
            raise InvalidRequestError(f"{self.name}: a call without tensors")
        size = int(tensors[0].shape[0])
        if any(int(t.shape[0]) != size for t in tensors):
            raise InvalidRequestError(f"{self.name}: tensors of one call differ in batch size")
        self.check_room(size)
        future: asyncio.Future[list[torch.Tensor]] = asyncio.get_running_loop().create_future()
        self._tasks.append(Task(tensors, size, now, future))
        self._queued += size
        if self._on_submit is not None:
            self._on_submit()
        return future

    def _drop_abandoned(self) -> None:
        while self._tasks and self._tasks[0].future.done():
            self._queued -= self._tasks.popleft().size

    def due_at(self) -> float | None:
        """When the oldest waiting call's ``max_wait`` runs out (None: nothing waits)."""
        self._drop_abandoned()
        return self._tasks[0].arrived + self.max_wait if self._tasks else None

    def oldest(self) -> float | None:
        self._drop_abandoned()
        return self._tasks[0].arrived if self._tasks else None

    def ready(self, now: float) -> bool:
        """A full batch waits, or the oldest call has waited long enough."""
        due = self.due_at()
        return due is not None and (self._queued >= self.max_batch or now >= due)

    def take(self) -> Batch:
        """Up to ``max_batch`` samples of the oldest calls, in arrival order (whole calls only)."""
        taken: list[Task] = []
        size = 0
        while self._tasks:
            task = self._tasks[0]
            if task.future.done():  # the caller left while it waited: compute nothing for it
                self._queued -= self._tasks.popleft().size
                continue
            if size + task.size > self.max_batch:
                break
            taken.append(self._tasks.popleft())
            self._queued -= task.size
            size += task.size
        if taken:
            self.batches += 1
        return Batch(self.name, taken)

    def fail_all(self, error: BaseException) -> None:
        """Answer every waiting call with ``error`` (the server is closing)."""
        while self._tasks:
            task = self._tasks.popleft()
            if not task.future.done():
                task.future.set_exception(error)
        self._queued = 0
