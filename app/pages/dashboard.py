"""Dashboard: the contribute switch, the state in plain words, this computer's numbers, the loss curve.

The switch is the user's opt-in (on: start, off: pause). The state line is the engine's own reason
("Waiting: you are using the computer", "Paused: on battery"), coloured and marked with the same
look as the tray icon; below it, which device training uses (a GPU or the CPU) and why, and — for
a project joined by URL — a signed update of its manifest the engine refused, and why; a project
training in diloco rounds shows where the round is and what the last exchange sent. While
paused the engine stops listening to the collaboration, so the epoch is shown "as of the pause".
The project's name and description are its organizers' words: shown as plain text, never markup.
"""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app import wording
from app.engine.bridge import PendingCall
from app.engine.store import EngineStore
from app.errors import explain
from app.icons import look_for, state_icon
from app.theme import LOOK_COLOURS
from app.widgets.charts import LineChart
from app.widgets.switch import ToggleSwitch
from app.widgets.tiles import Card, StatTile
from core.api.errors import ApiError
from core.api.schema import EngineState, EpochPoint, Statistics

COMPUTING = ("running", "throttled")


class DashboardPage(QWidget):
    loginRequested = Signal()

    def __init__(self, store: EngineStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("page")
        self.store = store
        box = QVBoxLayout(self)
        box.setContentsMargins(24, 20, 24, 20)
        box.setSpacing(14)
        box.addLayout(self._header())
        box.addWidget(self._state_card())
        box.addLayout(self._tiles())
        self.chart = LineChart(
            "The collaboration's loss",
            "Mean training loss of every peer at each completed epoch: lower is better",
            "epoch",
            "loss",
        )
        box.addWidget(self.chart, 1)

        self.switch.clicked.connect(self._toggled)
        self.snooze_button.clicked.connect(self._snooze)
        self.resume_button.clicked.connect(self._resume)
        self.login_button.clicked.connect(self.loginRequested)
        store.stateChanged.connect(self.show_state)
        store.connectionChanged.connect(lambda *_: self.show_state(store.state))
        store.statisticsChanged.connect(self.show_statistics)
        store.historyChanged.connect(self.show_history)
        store.pointAdded.connect(self._point_added)
        self.show_state(store.state)
        self.show_history()
        if store.statistics is not None:
            self.show_statistics(store.statistics)

    def _header(self) -> QHBoxLayout:
        header = QHBoxLayout()
        titles = QVBoxLayout()
        self.project = QLabel("No project yet", objectName="pageTitle")
        self.description = QLabel("", objectName="caption", wordWrap=True)
        for label in (self.project, self.description):
            label.setTextFormat(Qt.TextFormat.PlainText)
        titles.addWidget(self.project)
        titles.addWidget(self.description)
        header.addLayout(titles, 1)
        self.switch_label = QLabel("&Contribute")
        self.switch = ToggleSwitch("Contribute")
        self.switch.setToolTip(
            "On: contribute whenever your schedule allows. Off: Barnraise stays paused."
        )
        self.switch_label.setBuddy(self.switch)
        header.addWidget(self.switch_label)
        header.addWidget(self.switch)
        return header

    def _state_card(self) -> Card:
        state_card = Card()
        row = QHBoxLayout()
        self.dot = QLabel()
        self.dot.setFixedSize(28, 28)
        self.state_word = QLabel("Connecting…", objectName="stateWord")
        row.addWidget(self.dot)
        row.addWidget(self.state_word)
        row.addStretch(1)
        self.snooze_button = QPushButton("Snooze 1 hour")
        self.snooze_button.setToolTip("Pause for an hour; contribution resumes by itself")
        self.resume_button = QPushButton("Resume now")
        self.resume_button.setToolTip("End the pause or the snooze now")
        self.login_button = QPushButton("Log in…", objectName="primary")
        self.login_button.setToolTip("This project needs an account: log in or create one")
        for button in (self.login_button, self.resume_button, self.snooze_button):
            row.addWidget(button)
        state_card.box.addLayout(row)
        self.reason = QLabel("", wordWrap=True)
        self.reason.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.notes = QLabel("", objectName="caption", wordWrap=True)
        self.device = QLabel("", objectName="caption", wordWrap=True)
        self.device.hide()
        self.network = QLabel("", objectName="caption", wordWrap=True)
        self.network.hide()
        self.rounds = QLabel("", objectName="caption", wordWrap=True)
        self.rounds.hide()
        self.update_refused = QLabel("", objectName="inlineError", wordWrap=True)
        self.update_refused.setTextFormat(Qt.TextFormat.PlainText)
        self.update_refused.setToolTip(
            "Barnraise keeps the version of the project it has; the organizers must publish an "
            "update this computer can take"
        )
        self.update_refused.hide()
        self.error = QLabel("", objectName="inlineError", wordWrap=True)
        self.error.hide()
        labels = (
            self.reason,
            self.notes,
            self.device,
            self.network,
            self.rounds,
            self.update_refused,
        )
        for label in (*labels, self.error):
            state_card.box.addWidget(label)
        return state_card

    def _tiles(self) -> QGridLayout:
        tiles = QGridLayout()
        tiles.setSpacing(10)
        self.speed = StatTile("Samples/s now", "How fast this computer trains right now")
        self.today = StatTile("Samples today", "Samples this computer processed today")
        self.total = StatTile("Samples in total", "Everything this computer has contributed")
        self.peers = StatTile("Peers online", "Computers training this model together with you")
        self.epoch = StatTile(
            "Epoch", "The collaboration's training step: one epoch is one large shared batch"
        )
        for i, tile in enumerate((self.speed, self.today, self.total, self.peers, self.epoch)):
            tiles.addWidget(tile, 0, i)
        return tiles

    # ---- showing -----------------------------------------------------------------------------------

    def show_state(self, state: EngineState | None) -> None:
        connected = self.store.connected
        look = look_for(state.state if state else None, connected)
        self.dot.setPixmap(state_icon(look).pixmap(28, 28))
        colour = LOOK_COLOURS[look]
        self.switch.setEnabled(connected and state is not None and state.project is not None)
        if state is None or not connected:
            self.state_word.setText("Not connected")
            self.state_word.setStyleSheet(f"color: {colour}")
            self.reason.setText(self.store.connection[1])
            self.notes.setText("")
            for button in (self.snooze_button, self.resume_button, self.login_button):
                button.hide()
            self.network.hide()
            self.rounds.hide()
            self.device.hide()
            self.update_refused.hide()
            for tile in (self.speed, self.peers):  # live figures: unknown without the engine
                tile.set("–", "no engine")
            return
        on = state.contribute and not state.user_paused
        self.switch.blockSignals(True)
        self.switch.setChecked(on)
        self.switch.blockSignals(False)
        self.state_word.setText(wording.STATE_WORDS.get(state.state, state.state))
        self.state_word.setStyleSheet(f"color: {colour}")
        since = wording.ago(state.since, time.time())
        word = wording.STATE_WORDS.get(state.state, state.state)
        # "Contributing" under "Contributing" says nothing: then only say since when
        reason = "" if state.reason == word else f"{state.reason} · "
        self.reason.setText(f"{reason}since {since}" if reason else f"Since {since}")
        notes = list(state.notes)
        if state.code == "not_opted_in":
            notes.insert(0, "Turn on Contribute (top right) to start; your schedule decides when.")
        if state.last_error and state.state == "error" and state.last_error not in state.reason:
            notes.insert(0, state.last_error)
        self.notes.setText("\n".join(notes))
        self.notes.setVisible(bool(notes))
        self._show_network(state)
        self._show_rounds(state)
        self._show_device(state)
        paused_by_user = state.user_paused or state.snoozed_until is not None
        self.snooze_button.setVisible(on and state.snoozed_until is None)
        self.resume_button.setVisible(state.contribute and paused_by_user)
        self.login_button.setVisible(state.code == "login_required")
        self._show_project(state)
        p = state.progress
        computing = state.state in COMPUTING
        self.speed.set(
            f"{p.samples_per_second:,.0f}" if computing else "0",
            "" if computing else "not computing now",
        )
        self.peers.set(
            str(p.peers) if p.peers else "–",
            f"{p.collaboration_samples_per_second:,.0f} samples/s together"
            if p.collaboration_samples_per_second
            else "",
        )
        epoch = p.collaboration_epoch if p.collaboration_epoch is not None else p.epoch
        stale = state.state in ("paused", "waiting") and epoch is not None
        self.epoch.set("–" if epoch is None else str(epoch), "as of the pause" if stale else "")

    def _show_project(self, state: EngineState) -> None:
        project = state.project
        self.project.setText(project.name if project else "No project")
        self.description.setText(project.description if project else "")
        refused = project.update_refused if project else None
        self.update_refused.setText(wording.update_refused_line(refused) if refused else "")
        self.update_refused.setVisible(bool(refused))

    def _show_network(self, state: EngineState) -> None:
        network = state.network
        self.network.setVisible(network is not None)
        if network is not None:
            self.network.setText(wording.network_line(network))
            self.network.setToolTip(wording.network_detail(network, time.time()))

    def _show_rounds(self, state: EngineState) -> None:
        rounds = state.rounds
        line = wording.rounds_line(rounds) if rounds is not None else None
        self.rounds.setText(line or "")
        self.rounds.setVisible(line is not None)
        if rounds is not None and line is not None:
            self.rounds.setToolTip(wording.rounds_detail(rounds))

    def _show_device(self, state: EngineState) -> None:
        device = state.device
        self.device.setVisible(device is not None)
        if device is not None:
            self.device.setText(wording.device_line(device))
            self.device.setToolTip(wording.device_detail(device))

    def show_statistics(self, statistics: Statistics) -> None:
        self.today.set(wording.count(statistics.today.samples), "on this computer")
        self.total.set(
            wording.count(statistics.totals.samples),
            f"{wording.hours(statistics.totals.compute_seconds)} of compute",
        )

    def show_history(self) -> None:
        points = self.store.history
        self.chart.set_points(
            [p.epoch for p in points],
            [p.loss for p in points],
            empty="the curve appears after the collaboration's first epoch",
        )

    def _point_added(self, point: EpochPoint) -> None:
        self.show_history()

    # ---- acting ----------------------------------------------------------------------------------

    def _toggled(self, on: bool) -> None:
        self._watch(self.store.set_contributing(on), "starting contribution" if on else "pausing")

    def _snooze(self) -> None:
        self._watch(self.store.snooze(60), "snoozing")

    def _resume(self) -> None:
        self._watch(self.store.resume(), "resuming")

    def _watch(self, call: PendingCall, doing: str) -> None:
        self.error.hide()
        call.failed.connect(lambda error: self._failed(error, doing))

    def _failed(self, error: ApiError, doing: str) -> None:
        self.error.setText(explain(error, doing))
        self.error.show()
        self.show_state(self.store.state)  # the switch goes back to what the engine says
