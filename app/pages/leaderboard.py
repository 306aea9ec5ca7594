"""Leaderboard: your rank and percentile, the volunteers just above and below you, the top 10, and
your last seven days — from the project's coordinator, through the engine.

The coordinator may be slow or down; the page then keeps showing what it last fetched, marked with
the time of that fetch and why it is not newer. Projects without a coordinator have no leaderboard,
and a volunteer who has not logged in gets the login form instead.
"""

from __future__ import annotations

import time

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QHideEvent, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app import wording
from app.engine.store import BoardSnapshot, EngineStore
from app.widgets.charts import BarChart
from app.widgets.login_form import LoginForm
from app.widgets.tiles import Card, StatTile
from core.api.schema import AccountInfo, LeaderboardEntry

COLUMNS = ("Rank", "Volunteer", "Samples", "Compute", "Devices")


class LeaderboardPage(QWidget):
    def __init__(self, store: EngineStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("page")
        self.store = store
        outer = QVBoxLayout(self)
        outer.setContentsMargins(24, 20, 24, 20)
        top = QHBoxLayout()
        top.addWidget(QLabel("Leaderboard", objectName="pageTitle"), 1)
        self.who = QLabel("", objectName="caption")
        self.logout_button = QPushButton("Log out")
        self.logout_button.setToolTip("End your session at the project's coordinator")
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.setToolTip("Fetch the leaderboard from the coordinator now")
        for widget in (self.who, self.logout_button, self.refresh_button):
            top.addWidget(widget)
        outer.addLayout(top)
        self.freshness = QLabel("", objectName="freshness", wordWrap=True)
        self.stale = False
        outer.addWidget(self.freshness)

        self.stack = QStackedWidget()
        outer.addWidget(self.stack, 1)
        self.none_page = QLabel("", wordWrap=True, alignment=Qt.AlignmentFlag.AlignTop)
        self.login_page = QWidget()
        login_box = QVBoxLayout(self.login_page)
        self.login = LoginForm(store)
        login_box.addWidget(self.login)
        login_box.addStretch(1)
        self.board_page = QWidget()
        self.stack.addWidget(self.none_page)
        self.stack.addWidget(self.login_page)
        self.stack.addWidget(self.board_page)
        self._build_board()

        self.refresh_button.clicked.connect(store.refresh_leaderboard)
        self.logout_button.clicked.connect(store.logout)
        self.login.loggedIn.connect(lambda _: store.refresh_leaderboard())
        store.leaderboardChanged.connect(self.show_board)
        store.accountChanged.connect(self.show_account)
        self.show_account(store.account)

    def _build_board(self) -> None:
        board = QVBoxLayout(self.board_page)
        board.setContentsMargins(0, 0, 0, 0)
        tiles = QHBoxLayout()
        self.rank = StatTile("Your rank", "Your place among the project's volunteers, by samples")
        self.percentile = StatTile(
            "Percentile", "The share of ranked volunteers at or below your rank"
        )
        self.mine = StatTile("Your samples", "Samples counted for you by the coordinator")
        for tile in (self.rank, self.percentile, self.mine):
            tiles.addWidget(tile)
        board.addLayout(tiles)
        middle = QHBoxLayout()
        near_card = Card()
        near_card.box.addWidget(QLabel("<b>Around you</b>"))
        self.near = _table("Volunteers just above and below you")
        near_card.box.addWidget(self.near)
        top_card = Card()
        top_card.box.addWidget(QLabel("<b>Top 10</b>"))
        self.top = _table("The ten volunteers with the most samples")
        top_card.box.addWidget(self.top)
        middle.addWidget(near_card, 1)
        middle.addWidget(top_card, 1)
        board.addLayout(middle, 1)
        self.history = BarChart(
            "Your last 7 days", "Samples the coordinator counted for you each day (UTC)", "samples"
        )
        self.history.setMinimumHeight(170)
        board.addWidget(self.history)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self._watch()

    def _watch(self) -> None:
        """Refresh now and then while shown, and only for a project that has a coordinator."""
        account = self.store.account
        has_board = account is not None and account.coordinator is not None
        self.store.watch_leaderboard(self.isVisible() and has_board)

    def hideEvent(self, event: QHideEvent) -> None:
        super().hideEvent(event)
        self.store.watch_leaderboard(False)

    def show_account(self, account: AccountInfo | None) -> None:
        has_board = account is not None and account.coordinator is not None
        self._watch()
        self.logout_button.setVisible(bool(account and account.logged_in))
        self.refresh_button.setEnabled(has_board)
        if account is None:
            self.none_page.setText("Reading the account from the engine…")
            self.stack.setCurrentWidget(self.none_page)
        elif not has_board:
            self.who.setText("")
            self.freshness.setText("")
            self.none_page.setText(
                "This project has no coordinator, so it keeps no leaderboard: your contribution "
                "is counted on this computer only (see Statistics)."
                if account.project
                else "Join a project to see its leaderboard."
            )
            self.stack.setCurrentWidget(self.none_page)
        elif not account.logged_in:
            self.who.setText("Not logged in")
            self.stack.setCurrentWidget(self.login_page)
        else:
            self.who.setText(f"Logged in as {account.username}")
            self.stack.setCurrentWidget(self.board_page)
            self.show_board(self.store.board)

    def show_board(self, snapshot: BoardSnapshot) -> None:
        account = self.store.account
        if snapshot.needs_login and (account is None or not account.logged_in):
            self.stack.setCurrentWidget(self.login_page)
        now = time.time()
        if snapshot.fetched is None:
            self.freshness.setText(
                f"Could not fetch the leaderboard: {snapshot.error}"
                if snapshot.error
                else "Fetching the leaderboard…"
            )
        elif snapshot.error:
            reason = snapshot.error.rstrip(".")
            self.freshness.setText(
                f"Could not refresh: {reason}. Showing the leaderboard as of "
                f"{wording.moment(snapshot.fetched, now)} ({wording.ago(snapshot.fetched, now)})."
            )
        else:
            self.freshness.setText(f"Updated {wording.moment(snapshot.fetched, now)}")
        self.stale = bool(snapshot.error)
        self.freshness.setProperty("stale", "true" if self.stale else "false")
        self.freshness.style().unpolish(self.freshness)
        self.freshness.style().polish(self.freshness)
        if snapshot.board is not None:
            board = snapshot.board
            you = snapshot.mine.username if snapshot.mine else None
            _fill(self.top, board.users, you)
        if snapshot.mine is not None:
            mine = snapshot.mine
            users = snapshot.board.totals.users if snapshot.board else 0
            if mine.rank is None:
                self.rank.set("–", "no samples counted yet")
                self.percentile.set("–")
            else:
                self.rank.set(f"#{mine.rank}", f"of {users:,} volunteers" if users else "")
                self.percentile.set(
                    wording.ordinal(round(mine.percentile or 0)),
                    f"ahead of or level with {mine.percentile:.0f} % of volunteers",
                )
            detail = f"{wording.hours(mine.compute_seconds)} of compute"
            if mine.expert_samples > 0:
                detail += f", {wording.count(mine.expert_samples)} by your expert servers"
            self.mine.set(wording.count(mine.samples), detail)
            me = LeaderboardEntry(mine.rank or 0, mine.username, mine.samples, mine.compute_seconds)
            _fill(self.near, [*mine.above, me, *mine.below], mine.username)
            days = mine.history_7d
            self.history.set_bars(
                [d.day for d in days],
                {"samples": [d.samples for d in days]},
                empty="no samples counted for you in the last 7 days",
            )


def _table(explanation: str) -> QTableWidget:
    table = QTableWidget(0, len(COLUMNS))
    table.setHorizontalHeaderLabels(COLUMNS)
    table.verticalHeader().hide()
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
    table.setToolTip(explanation)
    table.setAccessibleName(explanation)
    table.setAlternatingRowColors(True)
    table.setTabKeyNavigation(False)  # Tab leaves the table (arrows move between cells)
    return table


def _fill(table: QTableWidget, entries: list[LeaderboardEntry], you: str | None) -> None:
    table.setRowCount(len(entries))
    bold = QFont(table.font())
    bold.setBold(True)
    for row, entry in enumerate(entries):
        devices = f"{entry.active_devices} of {entry.devices}" if entry.devices else ""
        cells = (
            f"#{entry.rank}" if entry.rank else "–",
            entry.username + (" (you)" if entry.username == you else ""),
            f"{entry.samples:,}",
            wording.hours(entry.compute_seconds),
            devices,
        )
        for column, text in enumerate(cells):
            item = QTableWidgetItem(text)
            if column in (0, 2, 3):
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            if entry.username == you:
                item.setFont(bold)
            table.setItem(row, column, item)
    table.resizeColumnsToContents()
    table.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
