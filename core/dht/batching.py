"""Coalescing: requests made in the same event-loop turn are served by one batched call.

Many parts of the engine talk to the DHT at once (progress reports, matchmaking, experts). When their
``store``/``get`` calls arrive together, one shared traversal serves them all, so the requests to each
node are sent once with every key in them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from core.util.tasks import BackgroundTasks

T = TypeVar("T")
R = TypeVar("R")


class Coalescer(Generic[T, R]):
    def __init__(
        self, name: str, run: Callable[[list[T]], Awaitable[list[R]]], tasks: BackgroundTasks
    ):
        self._name = name
        self._run = run
        self._tasks = tasks
        self._pending: list[tuple[T, asyncio.Future[R]]] = []

    async def submit(self, item: T) -> R:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._flush)
        self._pending.append((item, future))
        return await future

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        if self._tasks.closed:
            for _, future in batch:
                if not future.done():
                    future.set_exception(RuntimeError("the DHT node is closed"))
            return
        self._tasks.spawn(self._name, self._serve(batch))

    async def _serve(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            results = await self._run([item for item, _ in batch])
        except BaseException as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(
                        exc if isinstance(exc, Exception) else RuntimeError("cancelled")
                    )
            if not isinstance(exc, Exception):
                raise
            return
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)
