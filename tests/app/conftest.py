"""The app against a FakeEngine: the real bridge, supervisor and store, with a fake on the far side.

Every fixture stops what it started: the bridge's thread is joined (and checked gone), windows are
closed, and the app's settings live in the test's temporary folder.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from app.engine.bridge import EngineBridge
from app.engine.preview import FakeConnector
from app.engine.store import EngineStore
from app.settings import AppSettings
from app.window import MainWindow
from core.api.testing import FakeEngine

MakeStore = Callable[[FakeEngine], EngineStore]

# without a display Qt aborts the whole run when the first QApplication is made; dev.py sets this,
# a bare `pytest` should work too
if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture
def fake() -> FakeEngine:
    """A volunteer some weeks in: attached, logged in, contributing."""
    return FakeEngine("contributing")


@pytest.fixture
def fresh() -> FakeEngine:
    """A first start: nothing attached, a local demo swarm on offer."""
    return FakeEngine("fresh")


def bridge_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "engine-bridge"]


@pytest.fixture
def make_store(qtbot: QtBot) -> Iterator[MakeStore]:
    """Connect a store to a fake engine and wait until its first reads have arrived."""
    bridges: list[EngineBridge] = []

    def make(engine: FakeEngine) -> EngineStore:
        bridge = EngineBridge(FakeConnector(engine))
        store = EngineStore(bridge)
        bridges.append(bridge)
        bridge.start()
        qtbot.waitUntil(
            lambda: (
                store.connected
                and None not in (store.state, store.settings, store.account, store.projects)
                and store.statistics is not None
            ),
            timeout=5000,
        )
        return store

    yield make
    for bridge in bridges:
        bridge.stop()
    assert not bridge_threads(), "an engine bridge thread outlived its test"


@pytest.fixture
def app_settings(tmp_path: Path) -> AppSettings:
    return AppSettings(tmp_path / "app.ini")


@pytest.fixture
def make_window(
    qtbot: QtBot, make_store: MakeStore, app_settings: AppSettings
) -> Callable[..., MainWindow]:
    """A shown main window on a fake engine; closing it answers "keep contributing" unless a test
    sets ``window.ask_close``."""

    def make(engine: FakeEngine, *, tray: bool = True, demo: bool = True) -> MainWindow:
        store = make_store(engine)
        window = MainWindow(store, app_settings, tray_available=tray, can_start_demo=demo)
        window.ask_close = lambda *_: ("background", True)
        qtbot.addWidget(window)
        window.resize(1100, 760)
        window.show()
        qtbot.waitExposed(window)
        return window

    return make
