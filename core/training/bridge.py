"""The one place where the training thread meets the event loop.

The engine's coordination (DHT, matchmaking, averaging) runs on its single asyncio loop; torch's heavy
work (forward, backward, optimizer steps, reading the data stream) runs on one worker thread so that
the loop keeps answering peers while a batch computes. Coroutines hand blocking work to that thread
with ``await bridge.run(fn, *args)``; nothing else in the engine starts threads for torch.

The loop can also ask the worker to drop what it is computing (``interrupt``): hooks installed on the
model by ``watch`` check the flag at every module's forward and every parameter's gradient, and raise
``Interrupted`` on the worker thread, so a pause takes effect within one layer's compute, not one
whole microbatch's.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import torch

from core.training.errors import Interrupted

T = TypeVar("T")


class TrainingBridge:
    """A single worker thread for torch work, awaited from the loop."""

    def __init__(self, name: str = "training") -> None:
        # one thread: torch work stays ordered (a parameter update never races a backward pass)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._closed = False
        self._interrupt = threading.Event()

    # ---- interrupting the current job (a pause) --------------------------------------------------

    def interrupt(self) -> None:
        """Make the worker's current and future watched computations raise ``Interrupted``."""
        self._interrupt.set()

    def clear_interrupt(self) -> None:
        self._interrupt.clear()

    @property
    def interrupted(self) -> bool:
        return self._interrupt.is_set()

    def check(self) -> None:
        """Raise ``Interrupted`` if the loop asked the worker to stop (called on the worker)."""
        if self._interrupt.is_set():
            raise Interrupted("the computation was interrupted")

    def watch(self, model: torch.nn.Module) -> list[Any]:
        """Check for interrupts at every submodule's forward and every parameter's gradient.

        Returns the hook handles (``handle.remove()`` undoes it)."""
        handles: list[Any] = []

        def before_forward(_module: torch.nn.Module, _inputs: Any) -> None:
            self.check()

        def on_gradient(grad: torch.Tensor) -> None:
            self.check()

        for module in model.modules():
            handles.append(module.register_forward_pre_hook(before_forward))
        for parameter in model.parameters():
            if parameter.requires_grad:
                handles.append(parameter.register_hook(on_gradient))  # type: ignore[no-untyped-call]
        return handles

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
