"""BlockingPool: the one place where a service's blocking calls (files, the keyring) leave its loop.

``asyncio.to_thread`` hands work to the loop's default executor, which has a fixed number of
threads, an unbounded queue, and threads that Python waits for when the loop or the interpreter
stops. One call that never returns (a read from a FIFO, a keyring waiting for a password prompt)
then holds a thread for ever; a few of them starve everything else that uses the executor, and
the process can no longer exit. A ``BlockingPool`` bounds all three:

- at most ``workers`` threads, started as needed, and at most ``backlog`` calls waiting for one:
  beyond that ``run`` refuses at once with ``PoolBusy`` rather than queueing without end;
- its threads are daemon threads, so a stuck one never keeps the process alive at exit;
- ``close`` refuses new calls, fails every call still waiting or running with ``PoolClosed``
  (nobody awaits a stuck thread after it), and does not join the threads.

A caller cancelled while its call waits takes the call out of the queue; a call already running
cannot be interrupted (threads cannot be), and its result is dropped. The engine owns one pool
and sends all of its blocking work there; the training worker thread, reached only through the
training bridge, is the other place where threads meet the loop.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar, cast

from core.util.errors import BarnraiseError

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")


class PoolBusy(BarnraiseError):
    """Every worker of a ``BlockingPool`` is busy and its queue is full: try again later."""


class PoolClosed(BarnraiseError):
    """The ``BlockingPool`` was closed (its owner stops) before the call finished."""


@dataclass(eq=False)  # compared and hashed by identity: calls are kept in a set
class _Call:
    fn: Callable[[], Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]


class BlockingPool:
    """Bounded daemon threads for blocking calls made from one asyncio loop."""

    def __init__(self, name: str, *, workers: int = 4, backlog: int = 32) -> None:
        if workers < 1 or backlog < 0:
            raise ValueError("a pool needs at least one worker and a backlog of 0 or more")
        self.name = name
        self.workers = workers
        self.backlog = backlog
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._queue: collections.deque[_Call] = collections.deque()
        self._running: set[_Call] = set()
        self._threads = 0
        self._idle = 0
        self._closed = False

    @property
    def busy(self) -> int:
        """Calls running now (some may be stuck)."""
        with self._lock:
            return len(self._running)

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` on one of the pool's threads; ``PoolBusy`` when it is full,
        ``PoolClosed`` when it is (or gets) closed before the call finishes."""
        loop = asyncio.get_running_loop()
        call = _Call(lambda: fn(*args, **kwargs), loop, loop.create_future())
        with self._lock:
            if self._closed:
                raise PoolClosed(f"{self.name} is stopping; the call was not made")
            if len(self._queue) + len(self._running) >= self.workers + self.backlog:
                raise PoolBusy(
                    f"{self.name} is busy: {len(self._running)} blocking calls are running "
                    f"and {len(self._queue)} are waiting; try again later"
                )
            self._queue.append(call)
            if self._idle < len(self._queue) and self._threads < self.workers:
                self._start_thread()
            self._ready.notify()
        try:
            return cast(T, await call.future)
        except asyncio.CancelledError:
            with self._lock:  # still waiting: out of the queue, so its place is free again
                if call in self._queue:
                    self._queue.remove(call)
            raise

    def close(self) -> None:
        """Refuse new calls and fail the pending ones; threads left stuck are abandoned.

        Called on the loop that made the calls (their futures belong to it)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pending = [*self._queue, *self._running]
            self._queue.clear()
            stuck = len(self._running)
            self._ready.notify_all()
        for call in pending:
            _settle(call.future, None, PoolClosed(f"{self.name} stopped before the call finished"))
        if stuck:
            log.warning("%s: %d blocking call(s) still running were abandoned", self.name, stuck)

    # ---- the worker threads ------------------------------------------------------------------

    def _start_thread(self) -> None:
        """Called with the lock held."""
        self._threads += 1
        thread = threading.Thread(
            target=self._work, name=f"{self.name}-{self._threads}", daemon=True
        )
        thread.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
                while not self._queue and not self._closed:
                    self._ready.wait()
                self._idle -= 1
                if self._closed:
                    self._threads -= 1
                    return
                call = self._queue.popleft()
                self._running.add(call)
            result: Any = None
            error: BaseException | None = None
            try:
                result = call.fn()
            except BaseException as exc:  # handed to the caller, whatever it is
                error = exc
            with self._lock:
                self._running.discard(call)
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
                call.loop.call_soon_threadsafe(_settle, call.future, result, error)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    """On the loop: complete ``future`` unless its caller gave up or it was settled already."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
