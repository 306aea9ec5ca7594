"""MainWindow: navigation, pages, the banner, and what closing the window means.

Three views share the window: "connecting" until the engine first answers, the first-run steps while
no project is attached (and, in its add mode, while File > Add project… joins one more), and the
pages with their navigation. The banner at the top carries what the
user should know about the engine (restarted, stopped, cannot start) with the action that helps.

Closing the window asks once whether Barnraise should keep contributing in the background (the tray
icon stays) or quit; the answer is remembered and can be changed in the Settings menu, beside
"Start Barnraise when I log in" (read back from the login item each time the menu opens). The Help
menu opens the logs folder and the About box.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence
from PySide6.QtWidgets import (
    QAbstractButton,
    QCheckBox,
    QDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMessageBox,
    QPushButton,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app import logs
from app.about import AboutBox
from app.engine.store import EngineStore
from app.icons import app_icon
from app.pages.dashboard import DashboardPage
from app.pages.events import EventsPage
from app.pages.first_run import FirstRunPage
from app.pages.leaderboard import LeaderboardPage
from app.pages.projects import ProjectsPage
from app.pages.schedule import SchedulePage
from app.pages.statistics import StatisticsPage
from app.settings import AppSettings
from app.start_at_login import StartAtLogin
from app.widgets.banner import Banner, Level
from app.widgets.login_form import LoginForm

PAGES = (
    ("dashboard", "Dashboard", "Contribute switch, state and the loss curve"),
    ("schedule", "Schedule", "When Barnraise may use this computer"),
    ("statistics", "Statistics", "What this computer contributed, day by day"),
    ("leaderboard", "Leaderboard", "Your place among the project's volunteers"),
    ("events", "Events", "What the engine did recently, and diagnostics"),
    ("projects", "Projects", "Every project you joined: switch to another, or leave one"),
)
"""Projects comes last so that the other pages keep their shortcuts (Ctrl+1 to Ctrl+5)."""
Choice = Literal["background", "quit"]


@dataclass
class CloseQuestion:
    """The one-time question asked when the window is first closed (built, not yet shown)."""

    box: QMessageBox
    keep: QAbstractButton
    stop: QAbstractButton
    remember: QCheckBox

    @classmethod
    def build(cls, parent: QWidget, tray: bool) -> CloseQuestion:
        box = QMessageBox(parent)
        box.setWindowTitle("Close Barnraise")
        box.setIcon(QMessageBox.Icon.Question)
        where = "the icon by the clock stays" if tray else "reopen Barnraise to see it again"
        box.setText("Keep contributing in the background when the window is closed?")
        box.setInformativeText(
            f"Barnraise goes on following your schedule; {where}. Or quit, which stops "
            "contributing until you open Barnraise again."
        )
        keep = box.addButton("Keep contributing", QMessageBox.ButtonRole.AcceptRole)
        stop = box.addButton("Quit Barnraise", QMessageBox.ButtonRole.DestructiveRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        remember = QCheckBox("Remember my choice")
        remember.setChecked(True)
        box.setCheckBox(remember)
        box.setDefaultButton(keep)
        return cls(box, keep, stop, remember)


def ask_close(parent: QWidget, tray: bool) -> tuple[Choice | None, bool]:
    """Ask the close question; (None, _) when the user cancels the close."""
    question = CloseQuestion.build(parent, tray)
    question.box.exec()
    clicked = question.box.clickedButton()
    if clicked is question.keep:
        return "background", question.remember.isChecked()
    if clicked is question.stop:
        return "quit", question.remember.isChecked()
    return None, False


class MainWindow(QMainWindow):
    quitRequested = Signal()
    """The user wants Barnraise to stop contributing and close."""
    backgroundRequested = Signal()
    """The user closed the window and wants contribution to go on without it."""
    demoRequested = Signal()

    def __init__(
        self,
        store: EngineStore,
        settings: AppSettings,
        *,
        tray_available: bool,
        can_start_demo: bool,
        start_at_login: StartAtLogin | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.store = store
        self.settings = settings
        self.start_at_login = start_at_login
        """None: the setting is not offered (tests, ``--preview``: nothing touches the login)."""
        self.about: AboutBox | None = None
        self.tray_available = tray_available
        self.quitting = False
        self.ask_close: Callable[[QWidget, bool], tuple[Choice | None, bool]] = ask_close
        self.in_first_run = False
        self.adding_project = False
        """File > Add project…: the first-run page in its add mode is showing."""
        self.setWindowTitle("Barnraise")
        self.setWindowIcon(app_icon())
        self.resize(1100, 760)
        self.setMinimumSize(960, 600)

        self.root = QStackedWidget()
        self.setCentralWidget(self.root)
        self.connecting = self._connecting_view()
        self.first_run = FirstRunPage(
            store, can_start_demo=can_start_demo, start_at_login=start_at_login
        )
        self.main = QWidget()
        self.root.addWidget(self.connecting)
        self.root.addWidget(self.first_run)
        self.root.addWidget(self.main)

        self._build_main()
        self.status_label = QLabel("")
        self.statusBar().addPermanentWidget(self.status_label)
        self._menus()

        self.nav.currentRowChanged.connect(self._page_chosen)
        self.first_run.finished.connect(self._first_run_done)
        self.first_run.added.connect(self._project_added)
        self.first_run.cancelled.connect(self._adding_cancelled)
        self.first_run.demoRequested.connect(self.demoRequested)
        self.page["dashboard"].loginRequested.connect(self.open_login)  # type: ignore[attr-defined]
        self.projects_page.problem.connect(self._project_problem)
        self.projects_page.addRequested.connect(self.open_add_project)
        store.connectionChanged.connect(self._connection)
        # bound methods, not lambdas: Qt drops a connection when its receiver is deleted, and a
        # lambda has none (a state change during teardown reached a deleted label)
        store.projectsChanged.connect(self._projects_changed)
        store.accountChanged.connect(self._status_changed)
        store.stateChanged.connect(self._status_changed)
        store.engineError.connect(self._engine_error)
        geometry = settings.geometry
        if geometry is not None:
            self.restoreGeometry(geometry)
        self.show_page(settings.last_page)
        self._connection(*store.connection)

    def _build_main(self) -> None:
        store = self.store
        self.nav = QListWidget()
        self.nav.setObjectName("nav")
        self.nav.setFixedWidth(190)
        self.nav.setToolTip(f"Pages (Ctrl+1 to Ctrl+{len(PAGES)})")
        self.nav.setAccessibleName("Pages")
        self.pages = QStackedWidget()
        self.projects_page = ProjectsPage(store)
        self.page: dict[str, QWidget] = {
            "dashboard": DashboardPage(store),
            "schedule": SchedulePage(store),
            "statistics": StatisticsPage(store),
            "leaderboard": LeaderboardPage(store),
            "events": EventsPage(store),
            "projects": self.projects_page,
        }
        for key, title, tip in PAGES:
            item = QListWidgetItem(title)
            item.setToolTip(tip)
            item.setData(Qt.ItemDataRole.UserRole, key)
            self.nav.addItem(item)
            self.pages.addWidget(self.page[key])
        self.banner = Banner()
        row = QHBoxLayout(self.main)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(0)
        row.addWidget(self.nav)
        column = QVBoxLayout()
        column.setContentsMargins(12, 10, 12, 0)
        column.addWidget(self.banner)
        column.addWidget(self.pages, 1)
        row.addLayout(column, 1)

    # ---- views -------------------------------------------------------------------------------------

    def _connecting_view(self) -> QWidget:
        view = QWidget()
        view.setObjectName("page")
        box = QVBoxLayout(view)
        box.addStretch(1)
        self.connecting_title = QLabel("Connecting to the engine…", objectName="pageTitle")
        self.connecting_title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.connecting_text = QLabel("", wordWrap=True, objectName="caption")
        self.connecting_text.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.retry_button = QPushButton("Try again", objectName="primary")
        self.retry_button.setToolTip("Look for the engine again, starting it if needed")
        self.retry_button.hide()
        self.retry_button.clicked.connect(self.store.bridge.retry)
        box.addWidget(self.connecting_title)
        box.addWidget(self.connecting_text)
        box.addWidget(self.retry_button, 0, Qt.AlignmentFlag.AlignCenter)
        box.addStretch(2)
        return view

    def _choose_view(self) -> None:
        projects = self.store.projects
        if self.in_first_run or self.adding_project:
            target: QWidget = self.first_run
        elif self.store.state is None or projects is None:
            target = self.connecting
        elif not projects:
            self.in_first_run = True
            target = self.first_run
        else:
            target = self.main
        if self.root.currentWidget() is not target:
            self.root.setCurrentWidget(target)
        # only from the pages: the first run adds its project itself
        self.add_project_action.setEnabled(target is self.main)

    def _first_run_done(self) -> None:
        self.in_first_run = False
        self._show_login_item()
        if self.first_run.login_problem:
            self.banner.show_message(
                "warning", f"Barnraise cannot start at login: {self.first_run.login_problem}"
            )
        self.show_page("dashboard")
        self._choose_view()

    def open_add_project(self) -> None:
        """File > Add project…: the first-run page's step 1, to join one more project."""
        if self.root.currentWidget() is not self.main:
            return
        self.adding_project = True
        self.first_run.start_adding()
        self._choose_view()

    def _project_added(self, name: str) -> None:
        self.adding_project = False
        joined = self.first_run.joined
        # the engine's answer first: the projects' snapshot may not have heard of a switch yet
        active = next((p.name for p in self.store.projects or [] if p.active), None)
        level: Level = "info"
        beside = not (joined is not None and joined.active) and active not in (None, name)
        if not beside:
            text = f"{name} joined: this computer contributes to it now."
        else:
            text = (
                f"{name} joined. {active} stays the project this computer contributes to; to "
                "switch, choose “Contribute to this project” on the Projects page."
            )
            if self.first_run.switch_problem is not None:
                level = "warning"
                text = f"{name} joined beside {active}. {self.first_run.switch_problem}"
        self.banner.setProperty("about", "project")
        self.banner.show_message(
            level,
            text,
            action="Show projects" if beside else None,
            on_action=lambda: self.show_page("projects"),
            tip="Open the Projects page, where you can switch to it",
        )
        self.show_page("dashboard")
        self._choose_view()

    def _adding_cancelled(self) -> None:
        self.adding_project = False
        self._choose_view()

    def show_page(self, key: str) -> None:
        keys = [k for k, _, _ in PAGES]
        self.nav.setCurrentRow(keys.index(key) if key in keys else 0)

    def current_page(self) -> str:
        return PAGES[max(0, self.nav.currentRow())][0]

    def _page_chosen(self, row: int) -> None:
        if row < 0:
            return
        key = PAGES[row][0]
        self.pages.setCurrentWidget(self.page[key])
        self.settings.last_page = key

    def bring_to_front(self) -> None:
        self.show()
        self.setWindowState(self.windowState() & ~Qt.WindowState.WindowMinimized)
        self.raise_()
        self.activateWindow()

    def open_login(self) -> None:
        dialog = QDialog(self)
        dialog.setWindowTitle("Log in")
        box = QVBoxLayout(dialog)
        form = LoginForm(self.store)
        box.addWidget(form)
        form.loggedIn.connect(lambda _: dialog.accept())
        dialog.open()

    # ---- engine connection and errors ------------------------------------------------------------

    def _connection(self, status: str, text: str) -> None:
        self.connecting_text.setText(text)
        failed = status in ("failed", "stopped")
        self.retry_button.setVisible(failed)
        self.retry_button.setText("Start the engine" if status == "stopped" else "Try again")
        if status == "connected":
            if self.banner.isVisible() and self.banner.property("about") == "engine":
                self.banner.show_message("info", "Connected to the engine again.")
        elif status == "restarting":
            self._engine_banner("warning", text, None)
        elif status == "stopped":
            self._engine_banner("warning", text, "Start the engine")
        elif status == "failed":
            self._engine_banner("error", text, "Try again")
        self._status_line()
        self._choose_view()

    def _engine_banner(
        self, level: Literal["warning", "error"], text: str, action: str | None
    ) -> None:
        self.banner.setProperty("about", "engine")
        self.banner.show_message(
            level,
            text,
            action=action,
            on_action=self.store.bridge.retry,
            tip="Start the engine again and reconnect",
        )

    def _project_problem(self, text: str) -> None:
        self.banner.setProperty("about", "project")
        self.banner.show_message("warning", text)

    def _engine_error(self, where: str, message: str) -> None:
        self.banner.setProperty("about", "error")
        self.banner.show_message("warning", f"{where[:1].upper()}{where[1:]}: {message}")

    def _projects_changed(self, _: object) -> None:
        self._choose_view()

    def _status_changed(self, _: object) -> None:
        self._status_line()

    def _status_line(self) -> None:
        status, text = self.store.connection
        parts = [text if status != "connected" else "Engine connected"]
        state = self.store.state
        if status == "connected" and state is not None:
            parts[0] = f"Engine {state.engine_version}, pid {state.pid}"
        account = self.store.account
        if account is not None and account.logged_in:
            parts.append(f"logged in as {account.username}")
        self.status_label.setText(" · ".join(parts))

    # ---- menus and closing -----------------------------------------------------------------------

    def _menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self.add_project_action = QAction("&Add project…", self)
        self.add_project_action.setShortcut(QKeySequence("Ctrl+Shift+N"))
        self.add_project_action.setStatusTip(
            "Join another project by its address or its manifest file"
        )
        self.add_project_action.triggered.connect(self.open_add_project)
        file_menu.addAction(self.add_project_action)
        file_menu.addSeparator()
        quit_action = QAction("&Quit Barnraise", self)
        quit_action.setShortcut(QKeySequence.StandardKey.Quit)
        quit_action.setStatusTip("Stop contributing and close Barnraise")
        quit_action.triggered.connect(self.quitRequested)
        file_menu.addAction(quit_action)
        view_menu = self.menuBar().addMenu("&View")
        for index, (key, title, tip) in enumerate(PAGES, start=1):
            action = QAction(title, self)
            action.setShortcut(QKeySequence(f"Ctrl+{index}"))
            action.setStatusTip(tip)
            action.triggered.connect(lambda _=False, k=key: self.show_page(k))
            view_menu.addAction(action)
        settings_menu = self.menuBar().addMenu("&Settings")
        self.background_action = QAction("&Keep contributing when the window is closed", self)
        self.background_action.setCheckable(True)
        self.background_action.setChecked(self.settings.close_choice == "background")
        self.background_action.toggled.connect(
            lambda on: setattr(self.settings, "close_choice", "background" if on else "quit")
        )
        settings_menu.addAction(self.background_action)
        if self.start_at_login is not None:
            self.login_action = QAction("Start Barnraise when I &log in", self)
            self.login_action.setCheckable(True)
            self.login_action.setStatusTip("Open Barnraise in the tray each time you log in")
            self.login_action.triggered.connect(self._choose_login)
            settings_menu.aboutToShow.connect(self._show_login_item)
            settings_menu.addAction(self.login_action)
            self._show_login_item()
        help_menu = self.menuBar().addMenu("&Help")
        logs_action = QAction("Open &logs folder", self)
        logs_action.setStatusTip("Show the folder with the app's and the engine's logs")
        logs_action.triggered.connect(self.open_logs)
        help_menu.addAction(logs_action)
        about_action = QAction("&About Barnraise", self)
        about_action.setStatusTip("Version, folders and the device Barnraise trains on")
        about_action.triggered.connect(self.show_about)
        help_menu.addAction(about_action)

    def _show_login_item(self) -> None:
        """The checkbox says what the platform holds (changed elsewhere, too)."""
        if self.start_at_login is None:
            return
        why_not = self.start_at_login.unavailable()
        self.login_action.setChecked(self.start_at_login.enabled())
        self.login_action.setEnabled(why_not is None or self.login_action.isChecked())
        self.login_action.setToolTip(why_not or "Open Barnraise in the tray each time you log in")

    def _choose_login(self, on: bool) -> None:
        if self.start_at_login is None:
            return
        problem = self.start_at_login.choose(on)
        self._show_login_item()
        if problem is not None:
            what = "start" if on else "stop starting"
            self.banner.show_message("warning", f"Barnraise could not {what} at login: {problem}")

    def open_logs(self) -> None:
        opened, folder = logs.open_logs_folder()
        if not opened:
            self.banner.show_message("info", f"Barnraise's logs are in {folder}")

    def show_about(self) -> None:
        self.about = AboutBox(self.store, self)
        self.about.open()

    def closeEvent(self, event: QCloseEvent) -> None:
        if self.quitting:
            self.settings.geometry = self.saveGeometry()
            self.settings.sync()
            event.accept()
            return
        choice: Choice | None
        if self.settings.close_choice == "ask":
            choice, remember = self.ask_close(self, self.tray_available)
            if choice is None:
                event.ignore()
                return
            if remember:
                self.settings.close_choice = choice
                self.background_action.setChecked(choice == "background")
        else:
            choice = "background" if self.settings.close_choice == "background" else "quit"
        self.settings.geometry = self.saveGeometry()
        self.settings.sync()
        event.ignore()
        if choice == "background":
            if self.tray_available:
                self.hide()
            self.backgroundRequested.emit()
        else:
            self.quitRequested.emit()
