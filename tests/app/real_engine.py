"""The real main window with the real engine, which the app's own supervisor starts: what the app's
end-to-end tests share (the engine's home is whatever ``BARNRAISE_HOME`` names)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pytestqt.qtbot import QtBot

from app.engine.bridge import EngineBridge
from app.engine.local import LocalEngines
from app.engine.store import EngineStore
from app.settings import AppSettings
from app.window import MainWindow


@contextmanager
def real_window(
    qtbot: QtBot, settings: Path, *, statistics_every_ms: int = 30_000
) -> Iterator[MainWindow]:
    """The window, shown, its engine started; on the way out the engine is shut down and must be
    gone."""
    connector = LocalEngines(start_timeout=120)
    bridge = EngineBridge(connector)
    store = EngineStore(bridge, statistics_every_ms=statistics_every_ms)
    window = MainWindow(store, AppSettings(settings), tray_available=False, can_start_demo=False)
    window.ask_close = lambda *_: ("background", True)
    qtbot.addWidget(window)
    window.resize(1100, 760)
    window.show()
    bridge.start()
    try:
        yield window
    finally:
        engine = connector.process
        if store.connected:
            call = store.shutdown_engine()
            qtbot.waitUntil(lambda: call.done, timeout=30_000)
        connector.stop_child()
        bridge.stop()
        if engine is not None:
            assert engine.poll() is not None, "the engine outlived the test"
