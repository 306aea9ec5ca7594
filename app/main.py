"""The desktop app's entry point: ``barnraise`` on a desktop, ``barnraise app``, ``python -m app``.

    barnraise app [--demo] [--hidden] [--preview]

Builds the pieces in order — one instance per user, the theme, the engine bridge (which finds or
starts the engine), the store, the window and the tray — shows the window at once (the engine answers
a moment later), and on quit takes them down in reverse: the engine is asked to stop (when the user
quits, not when they only close the window), then the demo swarm, the bridge and the tray.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import QEvent, QEventLoop, QObject, QTimer
from PySide6.QtWidgets import QApplication, QSystemTrayIcon, QWidget

from app.engine.bridge import EngineBridge
from app.engine.demo import DemoSwarm
from app.engine.local import LocalEngines
from app.engine.store import EngineStore
from app.engine.supervisor import Connector
from app.icons import app_icon
from app.instance import SingleInstance
from app.logs import AppLog
from app.preflight import NO_USABLE_DISPLAY, display_problem
from app.settings import AppSettings
from app.start_at_login import StartAtLogin
from app.theme import apply_theme
from app.torch_fetch import TorchFetchDialog
from app.tray import Tray
from app.window import MainWindow
from core.api.endpoint import app_settings_path, endpoint_path, engine_output_path
from core.api.torch_fetch import torch_missing

log = logging.getLogger(__name__)
PROBE_VARIABLE = "BARNRAISE_STARTUP_PROBE"
"""A file to append start-up moments to (window shown, first state shown), for the benchmark."""


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="barnraise app", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--demo",
        action="store_true",
        help="also start the local demo swarm (stopped when the app quits) and offer it",
    )
    parser.add_argument(
        "--hidden", action="store_true", help="start in the tray, without the window"
    )
    parser.add_argument(
        "--preview",
        action="store_true",
        help="show the app with sample data from a fake engine (nothing is started)",
    )
    parser.add_argument("--settings", type=Path, default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


class App:
    """Owns everything the app runs, and takes it down in order."""

    def __init__(self, args: argparse.Namespace, qapp: QApplication, instance: SingleInstance):
        self.args = args
        self.qapp = qapp
        self.instance = instance
        self.started = time.time()
        self.connector: Connector
        if args.preview:
            from app.engine.preview import FakeConnector  # noqa: PLC0415 - only for --preview
            from core.api.testing import FakeEngine  # noqa: PLC0415

            self.connector = FakeConnector(FakeEngine("contributing"))
            self.demo: DemoSwarm | None = None
        else:
            self.connector = LocalEngines()
            self.demo = DemoSwarm(engine_output_path().with_name("demo-swarm.log"))
        self.settings = AppSettings(args.settings or app_settings_path())
        self.bridge = EngineBridge(self.connector)
        self.store = EngineStore(self.bridge)
        tray_available = QSystemTrayIcon.isSystemTrayAvailable()
        self.window = MainWindow(
            self.store,
            self.settings,
            tray_available=tray_available,
            can_start_demo=self.demo is not None,
            # a preview shows sample data: it leaves this computer's logins alone
            start_at_login=None if args.preview else StartAtLogin(self.settings),
        )
        self.tray = (
            Tray(
                self.store,
                show_window=self.window.bring_to_front,
                toggle_window=self._toggle_window,
                quit_app=lambda: self.quit(stop_engine=True),
                open_logs=self.window.open_logs,
            )
            if tray_available
            else None
        )
        self.window.quitRequested.connect(lambda: self.quit(stop_engine=True))
        self.window.backgroundRequested.connect(self._background)
        self.window.demoRequested.connect(self.start_demo)
        self.instance.activated.connect(self.window.bring_to_front)
        self._probe_written: set[str] = set()
        probe = os.environ.get(PROBE_VARIABLE)
        self.probe = Path(probe) if probe else None
        if self.probe is not None:
            self.store.stateChanged.connect(lambda _: self._probe("state_shown"))

    def start(self) -> None:
        if self.tray is not None:
            self.tray.show()
        if not (self.args.hidden and self.tray is not None):
            if self.probe is not None:
                self._first_paint = _FirstPaint(self.window, lambda: self._probe("window_shown"))
                self.qapp.installEventFilter(self._first_paint)
            self.window.show()
        self.bridge.start()
        if not self.args.preview and self.window.isVisible() and torch_missing():
            # a light bundle's first run: fetch torch (app/torch_fetch.py); the app works meanwhile
            self.torch_fetch = TorchFetchDialog(self.window)
            self.torch_fetch.show()
        if self.args.demo:
            self.start_demo()

    def start_demo(self) -> None:
        if self.demo is None:
            return
        try:
            self.demo.start()
        except OSError as exc:
            self.window.first_run.demo_failed(str(exc))
            return
        QTimer.singleShot(3000, self._check_demo)

    def _check_demo(self) -> None:
        if self.demo is None or self.window.quitting:
            return
        failure = self.demo.failure()
        if failure is not None:
            self.window.first_run.demo_failed(failure)
            self.window.banner.show_message("error", f"The demo swarm stopped: {failure}")
        elif self.demo.running:
            QTimer.singleShot(3000, self._check_demo)

    def _toggle_window(self) -> None:
        if self.window.isVisible():
            self.window.hide()
        else:
            self.window.bring_to_front()

    def _background(self) -> None:
        if self.tray is not None:
            self.tray.notify(
                "Barnraise keeps contributing",
                "It follows your schedule in the background; click this icon to open it.",
            )
            return
        self.quit(stop_engine=False)  # no tray: the engine goes on alone; reopen the app to see it

    def quit(self, *, stop_engine: bool) -> None:
        if self.window.quitting:
            return
        self.window.quitting = True
        self.window.hide()
        if self.tray is not None:
            self.tray.hide()
        if stop_engine and self.store.connected:
            call = self.store.shutdown_engine()
            _wait_for(call.finished, 5.0)
        if isinstance(self.connector, LocalEngines):
            if stop_engine:
                self.connector.stop_child()
            else:
                self.connector.forget()
        if self.demo is not None:
            self.demo.stop()
        self.bridge.stop()
        self.instance.release()
        self.window.close()
        self.qapp.quit()

    def _probe(self, what: str) -> None:
        """Start-up timings for ``benchmarks/app/gui_startup.py`` (first time each only)."""
        if self.probe is None or what in self._probe_written:
            return
        self._probe_written.add(what)
        with self.probe.open("a", encoding="utf-8") as out:
            out.write(json.dumps({"event": what, "time": time.time()}) + "\n")


class _FirstPaint(QObject):
    """Calls back once, when a widget of ``window`` is first painted (then removes itself)."""

    def __init__(self, window: QWidget, callback: Callable[[], None]) -> None:
        super().__init__()
        self.window = window
        self.callback: Callable[[], None] | None = callback

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if (
            self.callback is not None
            and event.type() == QEvent.Type.Paint
            and isinstance(watched, QWidget)
            and watched.window() is self.window
        ):
            callback, self.callback = self.callback, None
            QApplication.instance().removeEventFilter(self)  # type: ignore[union-attr]
            callback()
        return False


def _wait_for(signal_: object, seconds: float) -> None:
    """Run the event loop until ``signal_`` fires or ``seconds`` pass (for the quit sequence)."""
    loop = QEventLoop()
    signal_.connect(loop.quit)  # type: ignore[attr-defined]
    QTimer.singleShot(int(seconds * 1000), loop.quit)
    loop.exec()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    problem = display_problem()
    if problem is not None:
        print(f"barnraise: {problem}", file=sys.stderr, flush=True)
        return NO_USABLE_DISPLAY
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    AppLog().start()  # app.log and the crash hooks, for the life of the process
    QApplication.setApplicationName("Barnraise")
    QApplication.setOrganizationName("Barnraise")
    QApplication.setDesktopFileName("barnraise")
    qapp = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(qapp, QApplication)
    instance = SingleInstance(str(endpoint_path()))
    if not instance.claim():
        print("Barnraise is already open: its window was brought forward.", flush=True)
        return 0
    apply_theme(qapp)
    qapp.setWindowIcon(app_icon())
    qapp.setQuitOnLastWindowClosed(False)  # closing the window may leave the tray running
    app = App(args, qapp, instance)
    # Ctrl-C or SIGTERM quit cleanly; the timer lets Python run its signal handlers under Qt's loop
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: QTimer.singleShot(0, lambda: app.quit(stop_engine=True)))
    ticker = QTimer(interval=300)
    ticker.timeout.connect(lambda: None)
    ticker.start()
    app.start()
    return int(qapp.exec())


if __name__ == "__main__":
    sys.exit(main())
