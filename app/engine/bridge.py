"""EngineBridge: the one place where the Qt thread and the engine client's asyncio thread meet.

The engine client is asynchronous (aiohttp); Qt wants its widgets touched from the main thread only.
The bridge runs an asyncio loop on one thread of its own, with the ``EngineSupervisor`` on it, and
crosses between the two in exactly two ways: the Qt side submits coroutines to the loop with
``run_coroutine_threadsafe``; the loop side puts callables on a thread-safe queue and wakes the Qt
thread by writing one byte to a socket pair that a ``QSocketNotifier`` watches, and the Qt thread
runs them. Everything the rest of the app sees is Qt signals, on the Qt thread.

Why not a queued signal: the asyncio thread then makes no Qt call at all (PySide6 has had bugs with
Python objects in signals sent from foreign threads), and a delivery is never run in the same
turn it was posted, even from the Qt thread itself, so a caller always connects to a PendingCall's
signals before they can fire.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import queue
import socket
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from PySide6.QtCore import QObject, QSocketNotifier, Signal

from app.engine.supervisor import Connector, EngineSupervisor, Status
from core.api.errors import ApiError, EngineUnavailable
from core.api.events import Event
from core.api.logs import loop_exception_handler
from core.api.protocol import EngineApi
from core.api.schema import EngineState

log = logging.getLogger(__name__)

EngineCall = Callable[[EngineApi], Awaitable[Any]]


class PendingCall(QObject):
    """One call to the engine; its signals fire on the Qt thread, exactly one of the first two."""

    succeeded = Signal(object)
    failed = Signal(object)
    """An ``ApiError`` (anything else the call raised is wrapped in one)."""
    finished = Signal()

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what
        self.result: Any = None
        self.error: ApiError | None = None
        self.done = False
        self.coroutine: Coroutine[Any, Any, Any] | None = None
        """Kept until settled, so that one the loop never ran can be closed."""


class EngineBridge(QObject):
    statusChanged = Signal(str, str)
    """(status, text): see ``supervisor.Status``."""
    connected = Signal(object)
    """EngineState, each time a connection (re)starts."""
    eventReceived = Signal(object)
    """Each ``Event`` of the engine's stream, in order."""

    def __init__(self, connector: Connector, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.connector = connector
        self.status: Status = "connecting"
        self.status_text = "Connecting to the engine…"
        self._inbox: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._wake_in, self._wake_out = socket.socketpair()
        for end in (self._wake_in, self._wake_out):
            end.setblocking(False)
        self._notifier = QSocketNotifier(self._wake_in.fileno(), QSocketNotifier.Type.Read, self)
        self._notifier.activated.connect(self._drain)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._supervisor: EngineSupervisor | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._pending: set[PendingCall] = set()

    # ---- life --------------------------------------------------------------------------------------

    def start(self) -> None:
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._thread_main, args=(ready,), name="engine-bridge", daemon=True
        )
        self._thread.start()
        ready.wait()

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel the supervisor and anything in flight, close the client, end the thread; calls
        still waiting are told they failed."""
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None:
            task = self._task
            if task is not None:

                def cancel() -> None:
                    task.cancel()

                self._on_loop(cancel)
            thread.join(timeout)
            if thread.is_alive():
                log.warning("the engine bridge did not stop within %.0f s", timeout)
            self._loop = self._thread = None
        self._drain()
        for pending in list(self._pending):  # whatever the loop never reached: say so
            if not pending.done:
                if pending.coroutine is not None:
                    pending.coroutine.close()
                self._finish(pending, None, EngineUnavailable("the app is shutting down"))
        self._notifier.setEnabled(False)
        for end in (self._wake_in, self._wake_out):
            end.close()

    def _thread_main(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(loop_exception_handler)  # to the app's log, as a crash
        self._loop = loop
        asyncio.set_event_loop(loop)
        self._supervisor = EngineSupervisor(self.connector, _Relay(self))
        self._task = loop.create_task(self._supervisor.run(), name="app/engine-supervisor")
        ready.set()
        try:
            loop.run_until_complete(self._guard(self._task))
            # calls submitted just now may still sit in the loop's ready queue as "create the
            # task": one more turn creates them, then everything still in flight is cancelled
            loop.run_until_complete(asyncio.sleep(0))
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    async def _guard(self, task: asyncio.Task[None]) -> None:
        try:
            await task
        except asyncio.CancelledError:
            pass
        except Exception:  # the supervisor must never die silently: tell the user
            log.exception("the engine supervisor failed")
            self.post(lambda: self._set_status("failed", "Barnraise lost track of the engine."))

    # ---- Qt side -----------------------------------------------------------------------------------

    def call(self, what: str, call: EngineCall) -> PendingCall:
        """Run ``call(client)`` on the loop; the answer arrives as the PendingCall's signals."""
        pending = PendingCall(what)
        self._pending.add(pending)
        pending.finished.connect(lambda: self._pending.discard(pending))
        loop, supervisor = self._loop, self._supervisor
        if loop is None or supervisor is None or loop.is_closed():
            self.post(lambda: self._finish(pending, None, EngineUnavailable("not connected")))
            return pending
        coroutine = pending.coroutine = self._invoke(supervisor, call)
        try:
            future = asyncio.run_coroutine_threadsafe(coroutine, loop)
        except RuntimeError:  # the loop closed a moment ago (the app is quitting)
            coroutine.close()
            self.post(lambda: self._finish(pending, None, EngineUnavailable("not connected")))
            return pending
        future.add_done_callback(lambda f: self.post(lambda: self._settle(pending, f)))
        return pending

    def retry(self) -> None:
        """After a stop or a failure: start (or look for) the engine again."""
        if self._supervisor is not None:
            self._on_loop(self._supervisor.retry)

    def leaving(self) -> None:
        """The app is about to stop the engine on purpose: no restart, no alarm."""
        if self._supervisor is not None:
            self._on_loop(self._supervisor.leaving)

    def _on_loop(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the loop, unless the loop has ended (the supervisor may end on its own)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # it closed in between: nothing left to do
                loop.call_soon_threadsafe(fn)

    def post(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the Qt thread, in a later turn of its event loop (from any thread)."""
        self._inbox.put(fn)
        with contextlib.suppress(BlockingIOError, OSError):  # full: a wake-up is pending anyway
            self._wake_out.send(b"\0")

    def _drain(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            while self._wake_in.recv(4096):
                pass
        while True:
            try:
                fn = self._inbox.get_nowait()
            except queue.Empty:
                return
            try:
                fn()
            except Exception:  # one bad delivery must not stop the others
                log.exception("handling an answer from the engine failed")

    def _set_status(self, status: Status, text: str) -> None:
        self.status, self.status_text = status, text
        self.statusChanged.emit(status, text)

    def _settle(self, pending: PendingCall, future: concurrent.futures.Future[Any]) -> None:
        if future.cancelled():
            self._finish(pending, None, EngineUnavailable("the call was cancelled"))
            return
        error = future.exception()
        if error is None:
            self._finish(pending, future.result(), None)
        elif isinstance(error, ApiError):
            self._finish(pending, None, error)
        else:
            log.error("%s failed", pending.what, exc_info=error)
            self._finish(pending, None, ApiError(f"{pending.what} failed: {error}"))

    def _finish(self, pending: PendingCall, result: Any, error: ApiError | None) -> None:
        pending.result, pending.error, pending.done = result, error, True
        pending.coroutine = None
        if error is None:
            pending.succeeded.emit(result)
        else:
            pending.failed.emit(error)
        pending.finished.emit()

    # ---- loop side ---------------------------------------------------------------------------------

    @staticmethod
    async def _invoke(supervisor: EngineSupervisor, call: EngineCall) -> Any:
        client = supervisor.client
        if client is None:
            raise EngineUnavailable("not connected to the engine yet")
        return await call(client)


class _Relay:
    """The supervisor's listener: hands everything to the Qt thread."""

    def __init__(self, bridge: EngineBridge) -> None:
        self._bridge = bridge

    def status(self, status: Status, text: str) -> None:
        self._bridge.post(lambda: self._bridge._set_status(status, text))

    def connected(self, client: EngineApi, state: EngineState) -> None:
        self._bridge.post(lambda: self._bridge.connected.emit(state))

    def event(self, event: Event) -> None:
        self._bridge.post(lambda: self._bridge.eventReceived.emit(event))
