"""EngineBridge: answers and events reach the Qt thread, in order, never before the caller listens;
errors arrive as ApiErrors; stopping ends the thread and tells the calls still waiting."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator

import pytest
from pytestqt.qtbot import QtBot

from app.engine.bridge import EngineBridge, PendingCall
from app.engine.preview import FakeConnector
from core.api.errors import ApiError, EngineUnavailable, LoginRefused
from core.api.events import PeersSeen
from core.api.protocol import EngineApi
from core.api.testing import FakeEngine


@pytest.fixture
def bridge(qtbot: QtBot, fake: FakeEngine) -> Iterator[EngineBridge]:
    bridge = EngineBridge(FakeConnector(fake))
    bridge.start()
    qtbot.waitUntil(lambda: bridge.status == "connected", timeout=5000)
    yield bridge
    bridge.stop()


def finished(qtbot: QtBot, call: PendingCall) -> None:
    qtbot.waitUntil(lambda: call.done, timeout=5000)


def test_answers_arrive_on_the_qt_thread(qtbot: QtBot, bridge: EngineBridge) -> None:
    threads: list[int] = []
    call = bridge.call("reading the state", lambda c: c.state())
    call.succeeded.connect(lambda _: threads.append(threading.get_ident()))
    finished(qtbot, call)
    assert threads == [threading.get_ident()]
    assert call.result.pid == 4242
    assert call.error is None


def test_an_instant_answer_waits_for_its_listener(qtbot: QtBot, bridge: EngineBridge) -> None:
    """The coroutine may finish before ``call`` returns; the signal must still reach a slot that
    is connected right after (it used to fire into the void)."""
    got: list[object] = []
    calls = [bridge.call("state", lambda c: c.state()) for _ in range(50)]
    for call in calls:
        call.succeeded.connect(got.append)
    qtbot.waitUntil(lambda: len(got) == 50, timeout=5000)


def test_errors_arrive_as_api_errors(qtbot: QtBot, bridge: EngineBridge, fake: FakeEngine) -> None:
    fake.fail_next("login", LoginRefused("wrong username or password"))
    refused = bridge.call("logging in", lambda c: c.login("sam", "nope"))
    finished(qtbot, refused)
    assert isinstance(refused.error, LoginRefused)

    async def broken(client: EngineApi) -> None:
        raise RuntimeError("boom")

    crashed = bridge.call("doing something odd", broken)
    finished(qtbot, crashed)
    assert isinstance(crashed.error, ApiError)
    assert crashed.error.message == "doing something odd failed: boom"


def test_events_are_relayed_in_order(qtbot: QtBot, bridge: EngineBridge, fake: FakeEngine) -> None:
    seen: list[int] = []
    bridge.eventReceived.connect(lambda e: seen.append(e.data.peers))
    for n in range(100):
        fake.emit(PeersSeen("barnraise-demo", n))
    qtbot.waitUntil(lambda: seen[-1:] == [99], timeout=5000)
    assert seen[-100:] == list(range(100))


def test_calls_fail_clearly_when_there_is_no_engine(qtbot: QtBot) -> None:
    never = EngineBridge(FakeConnector(FakeEngine()))  # not started
    call = never.call("reading the state", lambda c: c.state())
    finished(qtbot, call)
    assert isinstance(call.error, EngineUnavailable)
    never.stop()


def test_stop_tells_waiting_calls_and_ends_the_thread(qtbot: QtBot, fake: FakeEngine) -> None:
    bridge = EngineBridge(FakeConnector(fake))
    bridge.start()
    qtbot.waitUntil(lambda: bridge.status == "connected", timeout=5000)
    hang: Callable[[EngineApi], object] = lambda c: asyncio.Event().wait()  # noqa: E731
    call = bridge.call("waiting forever", hang)  # type: ignore[arg-type]
    bridge.stop()
    assert call.done
    assert isinstance(call.error, EngineUnavailable)
    assert not [t for t in threading.enumerate() if t.name == "engine-bridge"]


def test_a_call_made_as_the_loop_ends_still_hears_back(qtbot: QtBot, fake: FakeEngine) -> None:
    """A call submitted after the loop's last turn but before it closed would never run; stop()
    must still settle it (it used to stay pending for ever)."""
    bridge = EngineBridge(FakeConnector(fake))
    bridge.start()
    qtbot.waitUntil(lambda: bridge.status == "connected", timeout=5000)
    loop, task = bridge._loop, bridge._task
    assert loop is not None
    assert task is not None
    ending, go_on = threading.Event(), threading.Event()
    close = loop.close

    def held_close() -> None:  # the loop has run its last turn: hold it open a moment
        ending.set()
        go_on.wait(5)
        close()

    loop.close = held_close  # type: ignore[method-assign]
    loop.call_soon_threadsafe(task.cancel)
    assert ending.wait(5)
    call = bridge.call("reading the state", lambda c: c.state())
    go_on.set()
    bridge.stop()
    assert call.done
    assert isinstance(call.error, EngineUnavailable)
