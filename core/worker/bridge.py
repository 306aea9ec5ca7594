"""The one place where torch worker threads meet the event loop.

The engine's coordination (DHT, matchmaking, averaging) runs on its single asyncio loop; torch's heavy
work (forward, backward, optimizer steps, reading the data stream) runs on worker threads so that
the loop keeps answering peers while a batch computes. Coroutines hand blocking work to a worker
with ``await bridge.run(fn, *args)``; nothing else in the engine starts threads for torch.

One worker is the default and what data-parallel training uses: its torch work stays ordered (a
parameter update never races a backward pass). Beside the workers, one more thread takes short
reads that must not wait behind a microbatch in flight (``run_beside``: a diloco round's end).
A decentralized mixture-of-experts trainer asks for several (``workers=N``): there the local
compute per batch is small and most of a batch's time is spent waiting for remote experts, so it
keeps N batches in flight, each blocking its own thread on the network. Those threads reach the
loop the other way round, with ``bridge.wait(coro_factory)``: the coroutine runs on the loop and
the worker blocks until it ends. Both directions live here, so
this stays the one place where threads meet the loop.

The loop can also ask the workers to drop what they are computing (``interrupt``): hooks installed on
the model by ``watch`` check the flag at every module's forward and every parameter's gradient, and
raise ``Interrupted`` on the worker thread, so a pause takes effect within one layer's compute, not
one whole microbatch's; a worker blocked in ``wait`` has its coroutine cancelled and raises
``Interrupted`` at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import torch

from core.worker.errors import Interrupted

T = TypeVar("T")


class TrainingBridge:
    """Worker threads for torch work (one by default), awaited from the loop, waiting on it."""

    def __init__(self, name: str = "training", *, workers: int = 1) -> None:
        if workers < 1:
            raise ValueError(f"a training bridge needs at least one worker thread, not {workers}")
        self._workers = workers
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._beside: ThreadPoolExecutor | None = None
        """``run_beside``'s thread, made at its first use."""
        self._closed = False
        self._interrupt = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        # the futures of coroutines that workers wait on, cancelled together by ``interrupt``
        self._waiting: set[concurrent.futures.Future[Any]] = set()
        self._waiting_lock = threading.Lock()

    @property
    def closed(self) -> bool:
        """``close`` or ``aclose`` was called: no more work is taken."""
        return self._closed

    @property
    def workers(self) -> int:
        """How many worker threads run torch work (how many jobs may be in flight at once)."""
        return self._workers

    # ---- interrupting the current jobs (a pause) -------------------------------------------------

    def interrupt(self) -> None:
        """Make the workers' current and future watched computations and waits raise ``Interrupted``."""
        with self._waiting_lock:
            self._interrupt.set()
            waiting = list(self._waiting)
        for future in waiting:
            future.cancel()  # cancels the coroutine's task on the loop, wakes the waiting worker

    def clear_interrupt(self) -> None:
        self._interrupt.clear()

    @property
    def interrupted(self) -> bool:
        return self._interrupt.is_set()

    def check(self) -> None:
        """Raise ``Interrupted`` if the loop asked the workers to stop (called on a worker)."""
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

    # ---- the loop hands work to a worker ---------------------------------------------------------

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Name the loop that ``wait`` runs coroutines on (``run`` does it on first use)."""
        if self._loop is not None and self._loop is not loop and self._loop.is_running():
            raise RuntimeError("the training bridge is bound to another running event loop")
        self._loop = loop

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` on a worker thread and return its result."""
        return await self._submit(self._executor, fn, *args, **kwargs)

    async def run_beside(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` on a thread of its own, beside whatever the workers
        compute, and return its result: for short reads that must not wait behind a microbatch
        (a diloco round's end reads the parameters at the round's time, however slow the
        device). The caller makes sure that nothing on the workers writes what ``fn`` touches
        meanwhile (diloco: its inner steps wait for the lock the round's end holds)."""
        if self._beside is None:
            self._beside = ThreadPoolExecutor(max_workers=1, thread_name_prefix="beside")
        return await self._submit(self._beside, fn, *args, **kwargs)

    async def _submit(
        self, executor: ThreadPoolExecutor, fn: Callable[..., T], *args: Any, **kwargs: Any
    ) -> T:
        if self._closed:
            raise RuntimeError("the training bridge is closed")
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self.bind(loop)
        return await loop.run_in_executor(executor, functools.partial(fn, *args, **kwargs))

    # ---- a worker waits on the loop --------------------------------------------------------------

    def wait(
        self, coro_factory: Callable[[], Coroutine[Any, Any, T]], timeout: float | None = None
    ) -> T:
        """On a worker thread: run ``coro_factory()`` on the bridge's loop and block until it ends.

        Returns its result or raises its exception. ``Interrupted`` when the bridge is (or gets)
        interrupted: the coroutine is cancelled. ``TimeoutError`` after ``timeout`` seconds: the
        coroutine is cancelled too. A factory, not a coroutine, so that a refused call leaves no
        coroutine that was never awaited.
        """
        loop = self._loop
        if loop is None:
            raise RuntimeError(
                "the training bridge has no event loop yet: call bind(loop) or use run() first"
            )
        try:
            current = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        if current is not None:
            # blocking an event loop's thread until that loop (or any loop) answers can deadlock
            raise RuntimeError(
                "bridge.wait blocks its thread: call it from a worker thread, not from an event "
                "loop's thread (await the coroutine there instead)"
            )
        if loop.is_closed() or not loop.is_running():
            raise RuntimeError("the training bridge's event loop is not running")
        self.check()
        future = asyncio.run_coroutine_threadsafe(coro_factory(), loop)
        with self._waiting_lock:
            self._waiting.add(future)
            interrupted = self._interrupt.is_set()
        try:
            if interrupted:  # set between check() and registering: interrupt() did not see us
                future.cancel()
            return future.result(timeout)
        except concurrent.futures.CancelledError:
            if self._interrupt.is_set():
                raise Interrupted("the computation was interrupted while waiting") from None
            raise
        except TimeoutError:
            if timeout is None or future.done():
                raise  # the coroutine's own TimeoutError, not ours
            future.cancel()
            raise TimeoutError(f"the coroutine did not finish within {timeout:g} s") from None
        finally:
            with self._waiting_lock:
                self._waiting.discard(future)

    # ---- closing ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop accepting work; the threads exit once their current jobs end (never mid-step)."""
        self._closed = True
        for executor in self._executors():
            executor.shutdown(wait=False, cancel_futures=True)

    async def aclose(self) -> None:
        """Close and wait for the worker threads to finish their current jobs."""
        self._closed = True
        loop = asyncio.get_running_loop()
        for executor in self._executors():
            await loop.run_in_executor(
                None, functools.partial(executor.shutdown, wait=True, cancel_futures=True)
            )

    def _executors(self) -> list[ThreadPoolExecutor]:
        return [self._executor] + ([self._beside] if self._beside is not None else [])
