"""Events: the engine's recent events, newest first, and the "copy diagnostics" button.

Progress ticks arrive every couple of seconds and would bury everything else, so they are hidden
unless asked for.
"""

from __future__ import annotations

import time

from PySide6 import __version__ as pyside_version
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app import diagnostics, wording
from app.engine.store import EngineStore
from core.api.errors import ApiError
from core.api.events import Event, ProgressUpdated
from core.api.schema import Diagnostics

SHOWN = 300


class EventsPage(QWidget):
    def __init__(self, store: EngineStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("page")
        self.store = store
        outer = QVBoxLayout(self)
        outer.setContentsMargins(24, 20, 24, 20)
        top = QHBoxLayout()
        top.addWidget(QLabel("Events", objectName="pageTitle"), 1)
        self.show_progress = QCheckBox("Show &progress ticks")
        self.show_progress.setToolTip(
            "Also list the speed updates the engine sends every few seconds"
        )
        self.copy_button = QPushButton("&Copy diagnostics")
        self.copy_button.setToolTip(
            "Copy versions, state, recent events and the engine's log to the clipboard for a bug "
            "report (no passwords, tokens or keys)"
        )
        top.addWidget(self.show_progress)
        top.addWidget(self.copy_button)
        outer.addLayout(top)
        self.copied = QLabel("", objectName="caption", wordWrap=True)
        outer.addWidget(self.copied)
        self.table = QTableWidget(0, 3)
        self.table.setHorizontalHeaderLabels(("Time", "Kind", "What happened"))
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.horizontalHeader().setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        self.table.setWordWrap(True)
        self.table.setAlternatingRowColors(True)
        self.table.setTabKeyNavigation(False)  # Tab leaves the table (arrows move between rows)
        self.table.setToolTip("The engine's recent events, newest first")
        self.table.setAccessibleName("Recent events")
        outer.addWidget(self.table, 1)
        self.report = ""

        self.copy_button.clicked.connect(self.copy_diagnostics)
        self.show_progress.toggled.connect(lambda _: self.reload())
        store.eventAdded.connect(self._added)
        self.reload()

    def _wanted(self, event: Event) -> bool:
        return self.show_progress.isChecked() or not isinstance(event.data, ProgressUpdated)

    def reload(self) -> None:
        events = [e for e in self.store.events if self._wanted(e)][-SHOWN:]
        self.table.setRowCount(0)
        for event in events:
            self._insert(event)

    def _added(self, event: Event) -> None:
        if self._wanted(event):
            self._insert(event)
            if self.table.rowCount() > SHOWN:
                self.table.removeRow(self.table.rowCount() - 1)

    def _insert(self, event: Event) -> None:
        kind, text = wording.describe_event(event)
        self.table.insertRow(0)
        stamp = time.strftime("%H:%M:%S", time.localtime(event.time))
        for column, value in enumerate((stamp, kind, text)):
            item = QTableWidgetItem(value)
            item.setToolTip(text)
            self.table.setItem(0, column, item)
        self.table.resizeColumnToContents(0)
        self.table.resizeColumnToContents(1)

    def copy_diagnostics(self) -> None:
        self.copy_button.setEnabled(False)
        self.copied.setText("Collecting diagnostics…")
        call = self.store.diagnostics()
        call.succeeded.connect(lambda d: self._copy(d, None))
        call.failed.connect(lambda error: self._copy(None, error))
        call.finished.connect(lambda: self.copy_button.setEnabled(True))

    def _copy(self, engine: Diagnostics | None, error: ApiError | None) -> None:
        store = self.store
        self.report = diagnostics.report(
            state=store.state,
            account=store.account,
            projects=store.projects,
            events=store.events,
            connection=store.connection,
            engine=engine,
            engine_error=None if error is None else error.message,
            qt_version=pyside_version,
        )
        QApplication.clipboard().setText(self.report)
        lines = self.report.count("\n")
        note = "" if error is None else f" (the engine gave none: {error.message})"
        self.copied.setText(f"Copied {lines} lines of diagnostics to the clipboard{note}.")
