"""EngineSupervisor: attach or start, follow, and judge each ending — read on, respect a deliberate
stop, restart after a death, give up after a crash loop. Plain asyncio with scripted engines."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Literal

import pytest

from app.engine.supervisor import EngineStartFailed, EngineSupervisor, Status
from core.api.errors import EngineUnavailable, VersionMismatch
from core.api.events import Event, PeersSeen
from core.api.protocol import EngineApi
from core.api.schema import API_VERSION, EngineState, Progress
from tests.support.leaks import HANG_GUARD, wait_until

End = Literal["clean", "lost", "hang"]


def engine_state(pid: int) -> EngineState:
    return EngineState(
        api_version=API_VERSION,
        engine_version="test",
        pid=pid,
        state="paused",
        code="not_opted_in",
        reason="Paused: contribution is off",
        since=0.0,
        contribute=False,
        user_paused=False,
        snoozed_until=None,
        project=None,
        progress=Progress(),
        threads=0,
        duty=0.0,
    )


class Scripted:
    """An engine whose event stream sends ``events`` and then ends as told; after a clean or lost
    end it is gone (state() fails) unless ``stays``."""

    def __init__(self, pid: int, events: int = 0, end: End = "hang", stays: bool = False) -> None:
        self.pid = pid
        self.events_to_send = events
        self.end = end
        self.stays = stays
        self.gone = False
        self.since: list[int | None] = []
        self.closed = 0
        self.release = asyncio.Event()

    async def state(self) -> EngineState:
        if self.gone:
            raise EngineUnavailable("gone")
        return engine_state(self.pid)

    async def events(self, since: int | None = None) -> AsyncIterator[Event]:
        self.since.append(since)
        start = since or 0
        for seq in range(start + 1, self.events_to_send + 1):
            yield Event(seq, 0.0, PeersSeen("p", seq))
        if self.end == "hang":
            await self.release.wait()
        if not self.stays:
            self.gone = True
        if self.end == "lost":
            raise EngineUnavailable("connection lost")

    async def close(self) -> None:
        self.closed += 1


class Connector:
    def __init__(self, *, found: Scripted | None = None, launches: list[object] | None = None):
        self.found = found
        self.launches = launches or []
        self.launched = 0
        self.status: int | None = None

    async def find(self) -> EngineApi | None:
        found, self.found = self.found, None
        return found  # type: ignore[return-value]

    async def launch(self) -> EngineApi:
        self.launched += 1
        item = self.launches.pop(0)
        if isinstance(item, Exception):
            raise item
        return item  # type: ignore[return-value]

    async def exit_status(self) -> int | None:
        return self.status

    def describe_logs(self) -> str:
        return "see /tmp/engine-output.log"


class Listener:
    def __init__(self) -> None:
        self.statuses: list[tuple[Status, str]] = []
        self.connections: list[int] = []
        self.events: list[int] = []
        self.changed = asyncio.Event()

    def status(self, status: Status, text: str) -> None:
        self.statuses.append((status, text))
        self.changed.set()

    def connected(self, client: EngineApi, state: EngineState) -> None:
        self.connections.append(state.pid)

    def event(self, event: Event) -> None:
        self.events.append(event.seq)

    def kinds(self) -> list[Status]:
        return [s for s, _ in self.statuses]

    async def until(self, status: Status, count: int = 1, timeout: float = HANG_GUARD) -> str:
        async with asyncio.timeout(timeout):
            while self.kinds().count(status) < count:
                self.changed.clear()
                await self.changed.wait()
        return [t for s, t in self.statuses if s == status][count - 1]


@contextlib.asynccontextmanager
async def running(supervisor: EngineSupervisor) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(supervisor.run(), name="test/supervisor")
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def make(connector: Connector, **kwargs: object) -> tuple[EngineSupervisor, Listener]:
    listener = Listener()
    options: dict[str, object] = {"backoff": (0.0,)} | kwargs
    return EngineSupervisor(connector, listener, **options), listener  # type: ignore[arg-type]


async def test_attaches_to_a_running_engine_and_reads_its_backlog() -> None:
    engine = Scripted(7, events=3)
    supervisor, listener = make(Connector(found=engine))
    async with running(supervisor):
        await listener.until("connected")
        await wait_until(lambda: listener.events == [1, 2, 3])
    assert listener.connections == [7]
    assert engine.since == [0]  # the kept backlog first: it fills the event log
    assert "connecting" in listener.kinds()


async def test_starts_an_engine_when_none_answers() -> None:
    connector = Connector(launches=[Scripted(8)])
    supervisor, listener = make(connector)
    async with running(supervisor):
        await listener.until("connected")
    assert connector.launched == 1
    assert ("connecting", "Starting the engine…") in listener.statuses


async def test_a_dead_engine_is_restarted_and_the_user_told() -> None:
    connector = Connector(found=Scripted(1, events=2, end="lost"), launches=[Scripted(2)])
    supervisor, listener = make(connector)
    async with running(supervisor):
        text = await listener.until("restarting")
        await listener.until("connected", 2)
    assert "stopped unexpectedly (it was killed or crashed)" in text
    assert listener.connections == [1, 2]
    assert connector.launched == 1


async def test_our_child_exiting_with_an_error_is_a_crash_even_after_a_clean_close() -> None:
    connector = Connector(found=Scripted(1, end="clean"), launches=[Scripted(2)])
    connector.status = 3
    supervisor, listener = make(connector)
    async with running(supervisor):
        text = await listener.until("restarting")
        await listener.until("connected", 2)
    assert "exit status 3" in text


async def test_a_deliberate_stop_is_respected_until_the_user_asks() -> None:
    connector = Connector(found=Scripted(1, end="clean"), launches=[Scripted(2)])
    connector.status = 0
    supervisor, listener = make(connector)
    async with running(supervisor):
        text = await listener.until("stopped")
        await asyncio.sleep(0.2)  # an observation window: a restart (backoff 0) would come in it
        assert connector.launched == 0  # no resurrection of what the user stopped
        supervisor.retry()
        await listener.until("connected", 2)
    assert "stopped" in text
    assert "not contributing" in text
    assert connector.launched == 1


async def test_a_dropped_stream_is_resumed_from_the_last_event() -> None:
    engine = Scripted(1, events=4, end="clean", stays=True)
    supervisor, listener = make(Connector(found=engine))
    async with running(supervisor):
        await wait_until(lambda: len(engine.since) >= 2)
        engine.end = "hang"
    assert engine.since[:2] == [0, 4]
    assert "restarting" not in listener.kinds()
    assert listener.events == [1, 2, 3, 4]


async def test_a_crash_loop_gives_up_and_says_where_to_look() -> None:
    crashes = [Scripted(n, end="lost") for n in range(2, 6)]
    connector = Connector(found=Scripted(1, end="lost"), launches=[*crashes, Scripted(9)])
    supervisor, listener = make(connector, max_crashes=2)
    async with running(supervisor):
        text = await listener.until("failed")
        launched = connector.launched
        await asyncio.sleep(0.2)  # an observation window: a restart (backoff 0) would come in it
        assert connector.launched == launched  # it waits for the user now
        supervisor.retry()
        await listener.until("connected", launched + 2)
    assert "Barnraise stopped restarting it" in text
    assert "see /tmp/engine-output.log" in text


async def test_an_engine_that_cannot_start_is_retried_with_the_reason() -> None:
    connector = Connector(launches=[EngineStartFailed("it exited at once: disk full"), Scripted(4)])
    supervisor, listener = make(connector)
    async with running(supervisor):
        text = await listener.until("restarting")
        await listener.until("connected")
    assert "could not be started: it exited at once: disk full" in text


async def test_another_engine_starting_at_the_same_moment_is_found_again() -> None:
    racer = Scripted(5)
    connector = Connector(launches=[EngineStartFailed("already running", another_running=True)])

    async def find_later() -> EngineApi | None:
        return racer if connector.launched else None  # type: ignore[return-value]

    connector.find = find_later  # type: ignore[method-assign]
    supervisor, listener = make(connector)
    async with running(supervisor):
        await listener.until("connected")
    assert listener.connections == [5]
    assert "restarting" not in listener.kinds()


async def test_a_version_mismatch_waits_for_the_user() -> None:
    connector = Connector()

    async def mismatched() -> EngineApi | None:
        raise VersionMismatch("the running engine speaks API version 2, this client 1")

    connector.find = mismatched  # type: ignore[method-assign]
    supervisor, listener = make(connector)
    async with running(supervisor):
        text = await listener.until("failed")
    assert "API version 2" in text
    assert connector.launched == 0


async def test_leaving_ends_the_watch_without_a_restart() -> None:
    engine = Scripted(1, end="hang")
    connector = Connector(found=engine, launches=[Scripted(2)])
    supervisor, listener = make(connector)
    task = asyncio.create_task(supervisor.run())
    await listener.until("connected")
    supervisor.leaving()
    engine.release.set()
    async with asyncio.timeout(HANG_GUARD):
        await task
    assert connector.launched == 0
    assert engine.closed == 1
    assert "restarting" not in listener.kinds()


@pytest.mark.parametrize("status", [-9, 1])
async def test_exit_status_words(status: int) -> None:
    connector = Connector(found=Scripted(1, end="lost"), launches=[Scripted(2)])
    connector.status = status
    supervisor, listener = make(connector)
    async with running(supervisor):
        text = await listener.until("restarting")
    assert ("killed by signal 9" if status < 0 else "exit status 1") in text
