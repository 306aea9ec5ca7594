"""EngineSupervisor: keep the app connected to an engine — attach, start, watch, restart, say so.

Plain asyncio (no Qt), run by the bridge on its loop. It asks its ``Connector`` for a running engine
and starts one when none answers, follows the engine's event stream, and when the stream ends tells
apart the three endings a user cares about:

- the engine is still there (it dropped a slow reader): read on from the last event;
- it was stopped on purpose (a clean websocket close, or our child exited with status 0): say so and
  wait for the user to start it again — a manager that resurrects what the user just stopped is
  not trustworthy;
- it died (the connection was lost, or our child exited with an error): say so, restart it after a
  short back-off, and give up with the log's location after too many crashes in a row.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Literal, Protocol

from core.api.clock import SYSTEM_CLOCK, Clock
from core.api.errors import ApiError, EngineUnavailable, VersionMismatch
from core.api.events import Event
from core.api.protocol import EngineApi
from core.api.schema import EngineState

log = logging.getLogger(__name__)

Status = Literal["connecting", "connected", "restarting", "stopped", "failed"]
"""connecting: looking for or starting the engine; connected: attached and following its events;
restarting: it died and is being started again; stopped: it was stopped on purpose; failed: it
cannot be started (or keeps dying) and waits for the user's "Try again"."""


class EngineStartFailed(Exception):
    """The engine could not be started; the message says why, for the user."""

    def __init__(self, message: str, *, another_running: bool = False) -> None:
        super().__init__(message)
        self.another_running = another_running


class Connector(Protocol):
    """Where engines come from: a running one, or a new one this connector starts."""

    async def find(self) -> EngineApi | None:
        """A client of an engine that answers now, or None."""

    async def launch(self) -> EngineApi:
        """Start an engine and return its client once it answers (``EngineStartFailed`` if not)."""

    async def exit_status(self) -> int | None:
        """How the engine this connector started ended (None: not ours, or still running)."""

    def describe_logs(self) -> str:
        """Where to look when the engine fails (a path or two, for the user)."""


class Listener(Protocol):
    """Called on the supervisor's loop; the bridge turns these into Qt signals."""

    def status(self, status: Status, text: str) -> None: ...
    def connected(self, client: EngineApi, state: EngineState) -> None: ...
    def event(self, event: Event) -> None: ...


class EngineSupervisor:
    def __init__(
        self,
        connector: Connector,
        listener: Listener,
        *,
        max_crashes: int = 5,
        crash_window: float = 600.0,
        backoff: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 15.0),
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.connector = connector
        self.listener = listener
        self.client: EngineApi | None = None
        self.max_crashes = max_crashes
        self.crash_window = crash_window
        self.backoff = backoff
        self._clock = clock
        self._crashes: collections.deque[float] = collections.deque()
        self._retry = asyncio.Event()
        self._leaving = False
        self._pid: int | None = None
        self._last_seq = 0

    def retry(self) -> None:
        """The user asked to start (or try) again after a stop or a failure."""
        self._retry.set()

    def leaving(self) -> None:
        """The app is asking the engine to stop: its end is no crash."""
        self._leaving = True

    async def run(self) -> None:
        """Until cancelled: stay connected, restarting a dead engine as described above."""
        try:
            while True:
                await self._session()
                if self._leaving:
                    return
        finally:
            await self._drop_client()

    async def _session(self) -> None:
        """One connection's life: connect (or start), follow, then judge how it ended."""
        try:
            client = await self._connect()
        except VersionMismatch as exc:
            await self._wait_for_user("failed", str(exc))
            return
        except EngineStartFailed as exc:
            if exc.another_running:  # an engine is starting at this moment: find it shortly
                await asyncio.sleep(1.0)
                return
            await self._crashed(f"The engine could not be started: {exc}")
            return
        clean = await self._follow(client)
        while await self._still_there(client):  # it only dropped the stream: read on
            await asyncio.sleep(0.1)
            clean = await self._follow(client)
        await self._drop_client()
        if self._leaving:
            return
        status = await self.connector.exit_status()
        if clean and status in (None, 0):
            await self._wait_for_user(
                "stopped", "The engine was stopped, so Barnraise is not contributing."
            )
            return
        cause = "it was killed or crashed" if status is None else _exit_text(status)
        await self._crashed(f"The engine stopped unexpectedly ({cause}).")

    async def _connect(self) -> EngineApi:
        self.listener.status("connecting", "Connecting to the engine…")
        client = await self.connector.find()
        if client is None:
            self.listener.status("connecting", "Starting the engine…")
            client = await self.connector.launch()
        try:
            state = await client.state()
        except ApiError:
            await client.close()
            raise EngineStartFailed("the engine did not answer its first question") from None
        if state.pid != self._pid:
            # a new engine numbers its events afresh; its kept backlog fills the event log
            self._pid, self._last_seq = state.pid, 0
        self.client = client
        self.listener.connected(client, state)
        self.listener.status("connected", f"Connected to the engine (pid {state.pid})")
        return client

    async def _follow(self, client: EngineApi) -> bool:
        """Read events until the stream ends: True if the engine closed it, False if it was lost."""
        try:
            async for event in client.events(since=self._last_seq):
                self._last_seq = event.seq
                self.listener.event(event)
        except EngineUnavailable as exc:
            log.info("event stream lost: %s", exc)
            return False
        except ApiError as exc:
            log.warning("event stream failed: %s", exc)
            return False
        return True

    async def _still_there(self, client: EngineApi) -> bool:
        if self._leaving:
            return False
        try:
            state = await client.state()
        except ApiError:
            return False
        return state.pid == self._pid

    async def _crashed(self, text: str) -> None:
        now = self._clock.monotonic()
        self._crashes.append(now)
        while self._crashes and self._crashes[0] < now - self.crash_window:
            self._crashes.popleft()
        if len(self._crashes) > self.max_crashes:
            minutes = self.crash_window / 60
            await self._wait_for_user(
                "failed",
                f"{text} It failed {len(self._crashes)} times in {minutes:.0f} minutes, so "
                f"Barnraise stopped restarting it. Details: {self.connector.describe_logs()}",
            )
            self._crashes.clear()
            return
        delay = self.backoff[min(len(self._crashes), len(self.backoff)) - 1]
        self.listener.status("restarting", f"{text} Restarting it…")
        await asyncio.sleep(delay)

    async def _wait_for_user(self, status: Status, text: str) -> None:
        self.listener.status(status, text)
        self._retry.clear()
        await self._retry.wait()
        self._retry.clear()

    async def _drop_client(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            try:
                await client.close()
            except Exception:  # closing a dead client must not stop the supervisor
                log.debug("closing the client failed", exc_info=True)


def _exit_text(status: int) -> str:
    if status < 0:
        return f"killed by signal {-status}"
    return f"exit status {status}"
