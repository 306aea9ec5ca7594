"""Tray: the icon's look follows the engine's state, its menu says why and acts on the engine.

The tray object is built on a store connected to a fake engine; system trays do not exist offscreen,
so the icon is never shown: the test looks at the object (its look, menu, tooltip) and triggers the
menu's actions as a click would.

What is checked: the four looks (contributing, waiting, paused, error — for the engine's error state
and for an engine that is gone); the status line and tooltip carry the engine's reason; Pause, Resume,
Snooze and Start contributing reach the engine; Open, Quit and a click on the icon call back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from PySide6.QtWidgets import QSystemTrayIcon
from pytestqt.qtbot import QtBot

from app.engine.store import EngineStore
from app.tray import Tray
from core.api.testing import FakeEngine

MakeStore = Callable[[FakeEngine], EngineStore]
MakeTray = Callable[[FakeEngine], Tray]


class Recorder:
    """The window's side of the tray: which callback ran, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def show_window(self) -> None:
        self.calls.append("show")

    def toggle_window(self) -> None:
        self.calls.append("toggle")

    def quit_app(self) -> None:
        self.calls.append("quit")


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def make_tray(recorder: Recorder, make_store: MakeStore) -> Iterator[MakeTray]:
    trays: list[Tray] = []

    def make(engine: FakeEngine) -> Tray:
        store = make_store(engine)
        tray = Tray(
            store,
            show_window=recorder.show_window,
            toggle_window=recorder.toggle_window,
            quit_app=recorder.quit_app,
        )
        trays.append(tray)
        return tray

    yield make
    for tray in trays:
        tray.hide()
        tray.deleteLater()


def state_is(store: EngineStore, state: str, code: str | None = None) -> bool:
    return (
        store.state is not None and store.state.state == state and code in (None, store.state.code)
    )


def test_the_look_follows_the_engine(make_tray: MakeTray, fake: FakeEngine, qtbot: QtBot) -> None:
    tray = make_tray(fake)
    store = tray.store
    assert tray.look == "contributing"
    fake.set_conditions(idle_seconds=20.0)  # at the computer: a GPU project waits
    qtbot.waitUntil(lambda: tray.look == "waiting", timeout=10_000)
    fake.set_conditions()
    qtbot.waitUntil(lambda: tray.look == "contributing", timeout=10_000)
    fake.set_conditions(on_battery=True)
    qtbot.waitUntil(lambda: tray.look == "paused", timeout=10_000)
    fake.set_conditions()  # on mains again (a pause comes before the peer) but the peer fails
    fake.fail_peer("the project's peer failed to start")
    qtbot.waitUntil(lambda: tray.look == "error", timeout=10_000)
    assert state_is(store, "error", "peer_failed")


def test_an_engine_that_is_gone_is_an_error(
    make_tray: MakeTray, fake: FakeEngine, qtbot: QtBot
) -> None:
    tray = make_tray(fake)
    assert tray.look == "contributing"
    fake.shut_down = True  # stopped from elsewhere (barnraise ctl shutdown, say)
    fake.end_streams()
    qtbot.waitUntil(lambda: tray.look == "error", timeout=10_000)
    qtbot.waitUntil(lambda: tray.store.connection[0] == "stopped", timeout=10_000)
    assert tray.status.text() == tray.store.connection[1]
    assert tray.status.text().startswith("The engine was stopped")
    assert tray.icon.toolTip() == f"Barnraise — {tray.status.text()}"
    assert not tray.pause_action.isEnabled()
    assert not tray.snooze_action.isEnabled()


def test_the_status_line_and_tooltip_say_the_engines_reason(
    make_tray: MakeTray, fake: FakeEngine, qtbot: QtBot
) -> None:
    tray = make_tray(fake)
    reason = "Waiting: other programs are busy (87% CPU)"
    fake.set_conditions(other_cpu_percent=87.0)
    qtbot.waitUntil(lambda: reason in tray.status.text(), timeout=10_000)
    assert reason in tray.icon.toolTip()
    assert tray.icon.toolTip().startswith("Barnraise — ")
    assert not tray.status.isEnabled()  # a line to read, not a command
    assert tray.menu.actions()[0] is tray.status


def test_pause_then_resume_from_the_menu(
    make_tray: MakeTray, fake: FakeEngine, qtbot: QtBot
) -> None:
    tray = make_tray(fake)
    assert tray.pause_action.text() == "Pause"
    assert tray.pause_action.isEnabled()
    tray.pause_action.trigger()
    qtbot.waitUntil(lambda: tray.look == "paused", timeout=10_000)
    assert fake.user_paused
    assert tray.pause_action.text() == "Resume"
    assert "Paused by you" in tray.status.text()
    tray.pause_action.trigger()
    qtbot.waitUntil(lambda: tray.look == "contributing", timeout=10_000)
    assert not fake.user_paused
    assert tray.pause_action.text() == "Pause"
    assert fake.calls.count("pause") == 1
    assert fake.calls.count("resume") == 1


def test_snooze_from_the_menu(make_tray: MakeTray, fake: FakeEngine, qtbot: QtBot) -> None:
    tray = make_tray(fake)
    tray.snooze_action.trigger()
    qtbot.waitUntil(lambda: fake.snoozed_until is not None, timeout=10_000)
    assert fake.snoozed_until == pytest.approx(time.time() + 3600, abs=120)
    qtbot.waitUntil(lambda: tray.pause_action.text() == "Resume", timeout=10_000)
    assert tray.look == "paused"
    assert "Snoozed until" in tray.status.text()


def test_start_contributing_when_contribution_is_off(
    make_tray: MakeTray, fake: FakeEngine, qtbot: QtBot
) -> None:
    fake.values["contribute"] = False
    tray = make_tray(fake)
    assert state_is(tray.store, "paused", "not_opted_in")
    assert tray.pause_action.text() == "Start contributing"
    tray.pause_action.trigger()
    qtbot.waitUntil(lambda: tray.look == "contributing", timeout=10_000)
    assert fake.values["contribute"] is True
    assert "start" in fake.calls
    assert tray.pause_action.text() == "Pause"


def test_open_quit_and_a_click_on_the_icon_call_back(
    make_tray: MakeTray, fake: FakeEngine, recorder: Recorder
) -> None:
    tray = make_tray(fake)
    assert recorder.calls == []
    tray.open_action.trigger()
    assert recorder.calls == ["show"]
    tray.icon.activated.emit(QSystemTrayIcon.ActivationReason.Trigger)
    assert recorder.calls == ["show", "toggle"]
    tray.icon.activated.emit(QSystemTrayIcon.ActivationReason.Context)  # the menu, not the window
    assert recorder.calls == ["show", "toggle"]
    tray.quit_action.trigger()
    assert recorder.calls == ["show", "toggle", "quit"]
    assert fake.calls.count("shutdown") == 0  # quitting is the app's job, through its callback
