"""The one place where the training thread meets the event loop.

The engine's coordination (DHT, matchmaking, averaging) runs on its single asyncio loop; torch's heavy
work (forward, backward, optimizer steps, reading the data stream) runs on one worker thread so that
the loop keeps answering peers while a batch computes. Coroutines hand blocking work to that thread
with ``await bridge.run(fn, *args)``; nothing else in the engine starts threads for torch.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class TrainingBridge:
    """A single worker thread for torch work, awaited from the loop."""

    def __init__(self, name: str = "training") -> None:
        # one thread: torch work stays ordered (a parameter update never races a backward pass)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._closed = False

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` on the worker thread and return its result."""
        if self._closed:
            raise RuntimeError("the training bridge is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    def close(self) -> None:
        """Stop accepting work; the thread exits once its current job ends (never mid-step)."""
        self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def aclose(self) -> None:
        """Close and wait for the worker thread to finish its current job."""
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(self._executor.shutdown, wait=True, cancel_futures=True)
        )
