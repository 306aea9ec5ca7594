"""Named background tasks with an owner.

Every long-lived asyncio task in Barnraise belongs to a ``BackgroundTasks`` set owned by the service that
started it. The owner's ``close()`` cancels and awaits them all, so shutting a service down leaves nothing
running. A task that dies with an exception is logged with its name instead of vanishing silently.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class BackgroundTasks:
    """A set of named tasks that live and die with their owner."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    def spawn(
        self, name: str, coro: Coroutine[Any, Any, T], *, awaited: bool = False
    ) -> asyncio.Task[T]:
        """Start ``coro`` as a task named ``"<owner>/<name>"`` and keep track of it.

        A task that fails is logged, unless ``awaited``: then someone awaits it and gets the error.
        """
        if self._closed:
            coro.close()
            raise RuntimeError(f"{self.owner} is closed; cannot start task {name!r}")
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.owner}/{name}")
        self._tasks.add(task)
        task.add_done_callback(self._on_awaited_done if awaited else self._on_done)
        return task

    def _on_awaited_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # the awaiting code reports it; this only marks it retrieved

    def _on_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("background task %s failed", task.get_name(), exc_info=exc)

    def __len__(self) -> int:
        return len(self._tasks)

    @property
    def closed(self) -> bool:
        return self._closed

    def cancel_all(self) -> None:
        """Ask every task to stop, without waiting (from synchronous callbacks)."""
        for task in self._tasks:
            task.cancel()

    async def close(self) -> None:
        """Cancel every task and wait until all of them have finished."""
        self._closed = True
        current = asyncio.current_task()
        while True:
            # A finished task leaves the set through its done-callback, which runs in a later turn
            # of the loop. Never wait for that: since Python 3.12 an await over finished tasks
            # (gather) returns without yielding, so a loop on the set alone would spin for ever.
            running = [task for task in self._tasks if task is not current and not task.done()]
            self._tasks.difference_update([task for task in self._tasks if task.done()])
            if not running:
                return
            for task in running:
                task.cancel()
            await asyncio.wait(running)
