"""Tray: the icon by the clock whose look shows the state, with pause, resume, snooze, open, the logs
folder and quit.

The icon has four looks (contributing, waiting, paused, error); its tooltip and the menu's first,
disabled line say the engine's reason in words. Clicking the icon shows or hides the window.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QSystemTrayIcon

from app import wording
from app.engine.store import EngineStore
from app.icons import Look, look_for, tray_icon
from core.api.schema import EngineState


class Tray(QObject):
    def __init__(
        self,
        store: EngineStore,
        *,
        show_window: Callable[[], None],
        toggle_window: Callable[[], None],
        quit_app: Callable[[], None],
        open_logs: Callable[[], None] | None = None,
    ) -> None:
        super().__init__()
        self.store = store
        self.look: Look = "error"
        self.icon = QSystemTrayIcon(tray_icon("error"))
        self.menu = QMenu()
        self.status = QAction("Connecting…", self.menu)
        self.status.setEnabled(False)
        self.pause_action = QAction("Pause", self.menu)
        self.snooze_action = QAction("Snooze 1 hour", self.menu)
        self.open_action = QAction("Open Barnraise", self.menu)
        self.quit_action = QAction("Quit Barnraise", self.menu)
        self.quit_action.setToolTip("Stop contributing and close Barnraise")
        self.menu.addAction(self.status)
        self.menu.addSeparator()
        for action in (self.pause_action, self.snooze_action):
            self.menu.addAction(action)
        self.menu.addSeparator()
        self.menu.addAction(self.open_action)
        self.logs_action = QAction("Open logs folder", self.menu)
        if open_logs is not None:
            self.logs_action.triggered.connect(open_logs)
            self.menu.addAction(self.logs_action)
        self.menu.addAction(self.quit_action)
        self.icon.setContextMenu(self.menu)
        self.pause_action.triggered.connect(self._pause_or_resume)
        self.snooze_action.triggered.connect(lambda: store.snooze(60))
        self.open_action.triggered.connect(show_window)
        self.quit_action.triggered.connect(quit_app)
        self.icon.activated.connect(
            lambda reason: (
                toggle_window() if reason == QSystemTrayIcon.ActivationReason.Trigger else None
            )
        )
        store.stateChanged.connect(self.show_state)
        store.connectionChanged.connect(lambda *_: self.show_state(store.state))
        self.show_state(store.state)

    def show(self) -> None:
        self.icon.show()

    def hide(self) -> None:
        self.icon.hide()

    def show_state(self, state: EngineState | None) -> None:
        connected = self.store.connected
        self.look = look_for(state.state if state else None, connected)
        self.icon.setIcon(tray_icon(self.look))
        if state is None or not connected:
            text = self.store.connection[1]
        else:
            text = wording.state_line(state.state, state.reason)
        self.status.setText(text)
        self.icon.setToolTip(f"Barnraise — {text}")
        has_project = bool(connected and state is not None and state.project is not None)
        self.pause_action.setEnabled(has_project)
        self.snooze_action.setEnabled(has_project)
        if state is not None and (not state.contribute):
            self.pause_action.setText("Start contributing")
        elif state is not None and (state.user_paused or state.snoozed_until is not None):
            self.pause_action.setText("Resume")
        else:
            self.pause_action.setText("Pause")

    def _pause_or_resume(self) -> None:
        state = self.store.state
        if state is None:
            return
        if not state.contribute:
            self.store.set_contributing(True)
        elif state.user_paused or state.snoozed_until is not None:
            self.store.resume()
        else:
            self.store.set_contributing(False)

    def notify(self, title: str, text: str) -> None:
        if self.icon.isVisible() and QSystemTrayIcon.supportsMessages():
            self.icon.showMessage(title, text, tray_icon(self.look), 5000)
