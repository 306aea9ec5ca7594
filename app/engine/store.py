"""EngineStore: what the app knows about the engine, as snapshots with a signal each.

Pages read the snapshots and listen to the signals; they never call the engine themselves. The store
keeps the snapshots fresh from three sources: the answers to its own calls, the engine's events
(applied at once, so the window reacts within the event's trip), and slow timers as a safety net
(statistics every half minute, each project's own with them while the projects page is looked at,
the leaderboard every few minutes while it is being looked at).
Commands go through the store too and return the ``PendingCall``, so the control that asked can
show an error next to itself.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from app.engine.bridge import EngineBridge, EngineCall, PendingCall
from app.engine.supervisor import Status
from core.api.errors import ApiError, LoginRequired
from core.api.events import (
    AccountChanged,
    CollaborationEpoch,
    EpochFinished,
    ErrorRaised,
    Event,
    HeldOutMeasured,
    ManifestUpdated,
    NetworkChanged,
    PeersSeen,
    ProgressUpdated,
    ProjectsChanged,
    StateChanged,
)
from core.api.protocol import EngineApi
from core.api.schema import (
    AccountInfo,
    AttachRequest,
    EngineState,
    EpochPoint,
    HeldOutPoint,
    Leaderboard,
    MyRank,
    ProjectInfo,
    ProjectList,
    ProjectOffer,
    ProjectOffers,
    Settings,
    SettingValue,
    Statistics,
    TrainingHistory,
)

HISTORY_KEPT = 2000
BACKLOG_SLACK = 1.0
"""Seconds: events older than the connection (less this) are the engine's backlog, not news."""


@dataclasses.dataclass(frozen=True)
class BoardSnapshot:
    """The leaderboard as last fetched, and whether that fetch is still the latest word."""

    board: Leaderboard | None = None
    mine: MyRank | None = None
    fetched: float | None = None
    """Unix time of the last successful fetch."""
    error: str | None = None
    """Why the last attempt failed (the data above is then stale)."""
    needs_login: bool = False


class EngineStore(QObject):
    connectionChanged = Signal(str, str)
    stateChanged = Signal(object)
    settingsChanged = Signal(object)
    statisticsChanged = Signal(object)
    accountChanged = Signal(object)
    historyChanged = Signal()
    pointAdded = Signal(object)
    projectsChanged = Signal(object)
    projectFiguresChanged = Signal(object)
    """Each attached project's own statistics (``project_figures``)."""
    offersChanged = Signal(object)
    leaderboardChanged = Signal(object)
    eventAdded = Signal(object)
    engineError = Signal(str, str)
    """(where, message) — an ``ErrorRaised`` event, or a call of ours that failed in the background."""

    def __init__(
        self,
        bridge: EngineBridge,
        *,
        statistics_every_ms: int = 30_000,
        leaderboard_every_ms: int = 300_000,
        state_every_ms: int = 5_000,
    ) -> None:
        super().__init__()
        self.bridge = bridge
        self.connection = (bridge.status, bridge.status_text)
        self.state: EngineState | None = None
        self.settings: Settings | None = None
        self.statistics: Statistics | None = None
        self.statistics_days = 30
        self.account: AccountInfo | None = None
        self.history: list[EpochPoint] = []
        self.held_out: list[HeldOutPoint] = []
        """The backbone's held-out evaluations of the active project (``historyChanged``)."""
        self.projects: list[ProjectInfo] | None = None
        self.project_figures: dict[str, Statistics] = {}
        """Each attached project's own statistics, by name (read while the projects page shows)."""
        self.offers: list[ProjectOffer] | None = None
        self.board = BoardSnapshot()
        self.events: collections.deque[Event] = collections.deque(maxlen=500)
        self.connected_at: float | None = None
        bridge.statusChanged.connect(self._on_status)
        bridge.connected.connect(self._on_connected)
        bridge.eventReceived.connect(self._on_event)
        self._timers = [
            self._every(statistics_every_ms, self._refresh_figures),
            self._every(state_every_ms, self.refresh_state),
        ]
        self._board_timer = self._every(leaderboard_every_ms, self.refresh_leaderboard)
        self._board_timer.stop()  # runs only while the leaderboard is on screen
        self._projects_watched = False
        # a change of the projects comes as an answer and then an event: their figures once
        self._project_figures_soon = QTimer(self, singleShot=True, interval=200)
        self._project_figures_soon.timeout.connect(self.refresh_project_figures)
        self._statistics_soon = QTimer(self, singleShot=True, interval=1500)
        self._statistics_soon.timeout.connect(self._refresh_figures)

    @property
    def connected(self) -> bool:
        return self.connection[0] == "connected"

    def _every(self, ms: int, action: Callable[[], object]) -> QTimer:
        timer = QTimer(self, interval=ms)
        timer.timeout.connect(action)
        timer.start()
        return timer

    def watch_leaderboard(self, on: bool) -> None:
        """The leaderboard page is (not) visible: refresh it now and then, or stop."""
        if on and not self._board_timer.isActive():
            self.refresh_leaderboard()
            self._board_timer.start()
        elif not on:
            self._board_timer.stop()

    def watch_projects(self, on: bool) -> None:
        """The projects page is (not) visible: read each project's figures and what its manifest
        says now, and its figures again with the statistics, or stop."""
        self._projects_watched = on
        if on:
            self.refresh_offers()
            self.refresh_project_figures()

    # ---- refreshing --------------------------------------------------------------------------------

    def refresh_all(self) -> None:
        self.refresh_state()
        self.refresh_settings()
        self.refresh_statistics()
        self.refresh_account()
        self.refresh_history()
        self.refresh_projects()

    def refresh_state(self) -> PendingCall:
        return self._read("reading the engine's state", lambda c: c.state(), self._set_state)

    def refresh_settings(self) -> PendingCall:
        return self._read("reading the preferences", lambda c: c.settings(), self._set_settings)

    def refresh_statistics(self) -> PendingCall:
        days = self.statistics_days
        return self._read(
            "reading the statistics", lambda c: c.statistics(None, days), self._set_statistics
        )

    def refresh_account(self) -> PendingCall:
        return self._read("reading the account", lambda c: c.account(), self._set_account)

    def refresh_history(self) -> PendingCall:
        return self._read("reading the training history", lambda c: c.history(), self._set_history)

    def refresh_projects(self) -> PendingCall:
        return self._read("reading the projects", lambda c: c.projects(), self._set_projects)

    def refresh_project_figures(self) -> PendingCall:
        """Each attached project's own statistics, one after the other in one call."""
        names = [p.name for p in self.projects or []]
        days = self.statistics_days

        async def each(client: EngineApi) -> dict[str, Statistics]:
            return {name: await client.statistics(name, days) for name in names}

        return self._read("reading each project's statistics", each, self._set_project_figures)

    def refresh_offers(self) -> PendingCall:
        return self._read("looking for projects", lambda c: c.offers(), self._set_offers)

    def refresh_leaderboard(self) -> PendingCall:
        async def both(client: EngineApi) -> tuple[Leaderboard, MyRank | None]:
            board = await client.leaderboard(10)
            try:
                mine = await client.my_rank()
            except LoginRequired:
                mine = None
            return board, mine

        call = self.bridge.call("reading the leaderboard", both)
        call.succeeded.connect(self._set_board)
        call.failed.connect(self._board_failed)
        return call

    # ---- commands ------------------------------------------------------------------------------------

    def set_contributing(self, on: bool) -> PendingCall:
        if on:
            return self._command("starting contribution", lambda c: c.start(), self._set_state)
        return self._command("pausing", lambda c: c.pause(), self._set_state)

    def resume(self) -> PendingCall:
        return self._command("resuming", lambda c: c.resume(), self._set_state)

    def snooze(self, minutes: float) -> PendingCall:
        return self._command("snoozing", lambda c: c.snooze(minutes), self._set_state)

    def change_settings(self, values: Mapping[str, SettingValue]) -> PendingCall:
        changes = dict(values)
        call = self._command(
            "changing the preferences", lambda c: c.set_settings(changes), self._set_settings
        )
        call.succeeded.connect(lambda _: self.refresh_state())
        return call

    def attach_request(self, request: AttachRequest) -> PendingCall:
        call = self._command("joining the project", lambda c: c.attach(request), None)
        call.succeeded.connect(lambda _: self.refresh_all())
        return call

    def activate_project(self, name: str) -> PendingCall:
        """Contribute to the attached project ``name`` instead of the active one (its
        ``ProjectInfo``); the engine's ``ProjectsChanged`` refreshes the rest."""
        return self._command("switching projects", lambda c: c.activate_project(name), None)

    def detach_project(self, name: str) -> PendingCall:
        """Leave the attached project ``name`` (the projects left, a ``ProjectList``). Leaving the
        active one makes another active, so everything that follows the active project is read
        again at once, without waiting for the engine's ``ProjectsChanged``."""
        call = self._command("leaving the project", lambda c: c.detach(name), self._set_projects)
        call.succeeded.connect(lambda _: self.refresh_all())
        return call

    def try_model(self, text: str) -> PendingCall:
        """Ask the active project's model about ``text`` (a ``ModelAnswer``: its guesses or
        completion, or why it cannot answer now)."""
        return self._command("asking the model", lambda c: c.try_model(text), None)

    def credit_check(self) -> PendingCall:
        """Set this computer's count of its epochs beside the project's credit (a
        ``CreditCheck``: a summary, and the epochs that differ with why)."""
        return self._command("checking your credit", lambda c: c.credit_check(), None)

    def preview_project(self, url: str) -> PendingCall:
        """What the project at ``url`` is and would use (a ``ProjectPreview``); attaches nothing."""
        return self._command("looking up the project", lambda c: c.preview_project(url), None)

    def login(self, username: str, password: str, *, signup: bool) -> PendingCall:
        call = self._command(
            "logging in",
            lambda c: c.login(username, password, signup=signup),
            self._set_account,
        )
        call.succeeded.connect(lambda _: self.refresh_leaderboard())
        return call

    def logout(self) -> PendingCall:
        return self._command("logging out", lambda c: c.logout(), self._set_account)

    def shutdown_engine(self) -> PendingCall:
        self.bridge.leaving()
        return self.bridge.call("stopping the engine", lambda c: c.shutdown())

    def diagnostics(self) -> PendingCall:
        return self.bridge.call("reading diagnostics", lambda c: c.diagnostics())

    # ---- plumbing ------------------------------------------------------------------------------------

    def _read(self, what: str, call: EngineCall, apply: Callable[[Any], None]) -> PendingCall:
        """A background read: applied on success; a failure while connected is reported."""
        pending = self.bridge.call(what, call)
        pending.succeeded.connect(apply)
        pending.failed.connect(lambda error: self._background_failed(what, error))
        return pending

    def _command(
        self, what: str, call: EngineCall, apply: Callable[[Any], None] | None
    ) -> PendingCall:
        """A user's command: applied on success; the caller shows the error next to its control."""
        pending = self.bridge.call(what, call)
        if apply is not None:
            pending.succeeded.connect(apply)
        return pending

    def _refresh_figures(self) -> None:
        self.refresh_statistics()
        if self._projects_watched:
            self.refresh_project_figures()

    def _background_failed(self, what: str, error: ApiError) -> None:
        if self.connected:  # while disconnected the connection banner already says it all
            self.engineError.emit(what, error.message)

    def _on_status(self, status: Status, text: str) -> None:
        self.connection = (status, text)
        self.connectionChanged.emit(status, text)

    def _on_connected(self, state: EngineState) -> None:
        self.connected_at = time.time()
        self._set_state(state)
        self.refresh_all()

    def _set_state(self, state: EngineState) -> None:
        self.state = state
        self.stateChanged.emit(state)

    def _set_settings(self, settings: Settings) -> None:
        self.settings = settings
        self.settingsChanged.emit(settings)

    def _set_statistics(self, statistics: Statistics) -> None:
        self.statistics = statistics
        self.statisticsChanged.emit(statistics)

    def _set_account(self, account: AccountInfo) -> None:
        self.account = account
        self.accountChanged.emit(account)

    def _set_history(self, history: TrainingHistory) -> None:
        self.history = list(history.points)[-HISTORY_KEPT:]
        self.held_out = list(history.held_out)[-HISTORY_KEPT:]
        self.historyChanged.emit()

    def _set_projects(self, projects: ProjectList) -> None:
        self.projects = list(projects.projects)
        self.projectsChanged.emit(self.projects)
        if self._projects_watched:  # a project joined shows its figures with it
            self._project_figures_soon.start()

    def _set_project_figures(self, figures: dict[str, Statistics]) -> None:
        self.project_figures = figures
        self.projectFiguresChanged.emit(figures)

    def _set_offers(self, offers: ProjectOffers) -> None:
        self.offers = list(offers.offers)
        self.offersChanged.emit(self.offers)

    def _set_board(self, result: tuple[Leaderboard, MyRank | None]) -> None:
        board, mine = result
        self.board = BoardSnapshot(board, mine, time.time(), None, mine is None)
        self.leaderboardChanged.emit(self.board)

    def _board_failed(self, error: ApiError) -> None:
        # keep what we had, marked with the time it was fetched and why it is not newer
        self.board = dataclasses.replace(
            self.board, error=error.message, needs_login=isinstance(error, LoginRequired)
        )
        self.leaderboardChanged.emit(self.board)

    def _network_changed(self, data: NetworkChanged) -> None:
        state = self.state
        if state is not None and (state.project is None or state.project.name == data.project):
            self._set_state(dataclasses.replace(state, network=data.network))

    def _held_out_measured(self, data: HeldOutMeasured) -> None:
        project = self.state.project if self.state is not None else None
        if project is None or data.project == project.name:
            self.held_out = [*self.held_out[-(HISTORY_KEPT - 1) :], data.point]
            self.historyChanged.emit()

    def _on_event(self, event: Event) -> None:  # noqa: PLR0912 - one case per kind of event
        self.events.append(event)
        self.eventAdded.emit(event)
        if self.connected_at is None or event.time < self.connected_at - BACKLOG_SLACK:
            return  # the engine's kept backlog: for the log only, the snapshots are newer
        data = event.data
        if isinstance(data, StateChanged):
            if self.state is not None:
                self._set_state(
                    dataclasses.replace(
                        self.state,
                        state=data.state,
                        code=data.code,
                        reason=data.reason,
                        since=event.time,
                    )
                )
            self.refresh_state()  # the rest of the state (flags, threads) follows the change
        elif isinstance(data, ProgressUpdated | PeersSeen) and self.state is not None:
            progress = (
                data.progress
                if isinstance(data, ProgressUpdated)
                else dataclasses.replace(self.state.progress, peers=data.peers)
            )
            self._set_state(dataclasses.replace(self.state, progress=progress))
        elif isinstance(data, CollaborationEpoch):
            newest = self.history[-1].epoch if self.history else -1
            project = self.state.project if self.state is not None else None
            if data.point.epoch > newest and (project is None or data.project == project.name):
                self.history = [*self.history[-(HISTORY_KEPT - 1) :], data.point]
                self.pointAdded.emit(data.point)
        elif isinstance(data, HeldOutMeasured):
            self._held_out_measured(data)
        elif isinstance(data, NetworkChanged):
            self._network_changed(data)
        elif isinstance(data, EpochFinished):
            self._statistics_soon.start()  # our samples moved: refresh soon, once per burst
        elif isinstance(data, AccountChanged):
            self._set_account(data.account)
            if self._board_timer.isActive():
                self.refresh_leaderboard()
        elif isinstance(data, ProjectsChanged | ManifestUpdated):
            # an update applied may bring another coordinator; a refused one, its reason
            self.refresh_all()
            self.refresh_offers()
        elif isinstance(data, ErrorRaised):
            self.engineError.emit(data.where, data.message)
