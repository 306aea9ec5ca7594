"""Leaderboard page: your place, the volunteers around you and at the top, and your last week — and
what the page says when the coordinator is down, when you are not logged in, or when there is none.

What is checked: rank, percentile, your row marked in both tables, the top 10 and the 7 bars; the
samples your expert servers computed, named in your samples' tile only when there are any; a failed
refresh keeps the old board and says when it was fetched; the login form when logged out, the board
after logging in; the plain note for a project without a coordinator; the refresh timer runs only
while the page is on screen.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QTableWidget, QTableWidgetItem
from pytestqt.qtbot import QtBot

from app import wording
from app.pages.leaderboard import LeaderboardPage
from app.window import MainWindow
from core.api.schema import Leaderboard, MyRank
from core.api.testing import FakeEngine

CLICK = Qt.MouseButton.LeftButton


def leaderboard(window: MainWindow) -> LeaderboardPage:
    window.show_page("leaderboard")
    page = window.page["leaderboard"]
    assert isinstance(page, LeaderboardPage)
    return page


def cell(table: QTableWidget, row: int, index: int) -> QTableWidgetItem:
    item = table.item(row, index)
    assert item is not None, f"no cell at row {row}, column {index}"
    return item


def column(table: QTableWidget, index: int) -> list[str]:
    return [cell(table, row, index).text() for row in range(table.rowCount())]


def is_stale(page: LeaderboardPage) -> bool:
    """The freshness line's "stale" style property (the style sheet matches it as text)."""
    return str(page.freshness.property("stale")).lower() == "true"


def bold_rows(table: QTableWidget) -> list[int]:
    return [row for row in range(table.rowCount()) if cell(table, row, 1).font().bold()]


def test_shows_your_place_the_tables_and_your_week(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    page = leaderboard(make_window(fake))
    qtbot.waitUntil(lambda: page.rank.value.text() == "#7", timeout=10_000)
    assert page.stack.currentWidget() is page.board_page
    assert page.who.text() == "Logged in as sam"
    assert page.rank.caption.text() == "of 41 volunteers"
    assert page.percentile.value.text() == "85th"  # 6 of 41 above you
    assert page.mine.value.text() == "1.84 M"
    near = page.near
    assert near.rowCount() == 5  # two above, you, two below
    assert column(near, 0) == ["#5", "#6", "#7", "#8", "#9"]
    assert column(near, 1)[2] == "sam (you)"
    assert bold_rows(near) == [2]
    assert sum("(you)" in name for name in column(near, 1)) == 1
    assert page.top.rowCount() == 10
    assert column(page.top, 0) == [f"#{n}" for n in range(1, 11)]
    assert column(page.top, 1)[6] == "sam (you)"
    assert bold_rows(page.top) == [6]
    assert len(page.history.days) == 7
    assert len(page.history.series["samples"]) == 7
    assert page.freshness.text().startswith("Updated ")
    assert not is_stale(page)


def test_your_samples_say_how_many_your_expert_servers_computed(
    make_window: Callable[..., MainWindow],
    fake: FakeEngine,
    qtbot: QtBot,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    window = make_window(fake)
    page = leaderboard(window)
    qtbot.waitUntil(lambda: page.rank.value.text() == "#7", timeout=10_000)
    mine = window.store.board.mine
    assert mine is not None
    assert mine.expert_samples == 230_400  # an eighth of sam's 1.84 M in the sample data
    compute = f"{wording.hours(mine.compute_seconds)} of compute"
    assert page.mine.caption.text() == f"{compute}, 230 k by your expert servers"

    board = fake.coordinator.board

    def without_experts(project: str, you: str, now: float) -> tuple[Leaderboard, MyRank]:
        top, place = board(project, you, now)
        return top, dataclasses.replace(place, expert_samples=0)

    monkeypatch.setattr(fake.coordinator, "board", without_experts)
    qtbot.mouseClick(page.refresh_button, CLICK)
    qtbot.waitUntil(lambda: page.mine.caption.text() == compute, timeout=10_000)


def test_a_failed_refresh_keeps_the_board_and_says_since_when(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fake)
    page = leaderboard(window)
    qtbot.waitUntil(lambda: page.rank.value.text() == "#7", timeout=10_000)
    fetched = window.store.board.fetched
    assert fetched is not None
    fake.coordinator.down = True
    qtbot.mouseClick(page.refresh_button, CLICK)
    qtbot.waitUntil(lambda: page.freshness.text().startswith("Could not refresh"), timeout=10_000)
    text = page.freshness.text()
    assert (
        "the coordinator at http://127.0.0.1:8765 does not answer. Showing the leaderboard" in text
    )
    assert f"as of {wording.moment(fetched, time.time())}" in text
    assert is_stale(page)
    assert window.store.board.fetched == fetched  # the time of the data shown, not of the try
    assert page.stack.currentWidget() is page.board_page
    assert page.rank.value.text() == "#7"
    assert page.top.rowCount() == 10
    assert page.near.rowCount() == 5

    fake.coordinator.down = False  # back: the next refresh clears the warning
    qtbot.mouseClick(page.refresh_button, CLICK)
    qtbot.waitUntil(lambda: page.freshness.text().startswith("Updated "), timeout=10_000)
    assert not is_stale(page)


def test_not_logged_in_shows_the_login_form_then_the_board(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    fake.username = None
    page = leaderboard(make_window(fake))
    qtbot.waitUntil(lambda: page.stack.currentWidget() is page.login_page, timeout=10_000)
    assert page.who.text() == "Not logged in"
    assert page.login.isVisible()
    assert not page.logout_button.isVisible()
    page.login.username.setText("alice")
    page.login.password.setText("correct horse battery")
    qtbot.mouseClick(page.login.login_button, CLICK)
    qtbot.waitUntil(lambda: page.stack.currentWidget() is page.board_page, timeout=10_000)
    qtbot.waitUntil(lambda: page.rank.value.text() == "#7", timeout=10_000)
    assert fake.username == "alice"
    assert page.who.text() == "Logged in as alice"
    assert "alice (you)" in column(page.near, 1)
    assert page.logout_button.isVisible()


def test_a_project_without_a_coordinator_has_no_leaderboard(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    fake.offered = [dataclasses.replace(fake.offered[0], moderated=False)]
    window = make_window(fake)
    page = leaderboard(window)
    qtbot.waitUntil(lambda: page.stack.currentWidget() is page.none_page, timeout=10_000)
    assert page.none_page.text().startswith("This project has no coordinator")
    assert not page.refresh_button.isEnabled()
    assert not page.logout_button.isVisible()
    assert page.top.rowCount() == 0


def test_a_project_without_a_coordinator_shows_no_fetch_error(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    fake.offered = [dataclasses.replace(fake.offered[0], moderated=False)]
    window = make_window(fake)
    page = leaderboard(window)
    qtbot.waitUntil(lambda: page.stack.currentWidget() is page.none_page, timeout=10_000)
    qtbot.waitUntil(lambda: not window.store.bridge._pending, timeout=10_000)  # all answered
    assert page.freshness.text() == ""


def test_the_refresh_timer_runs_only_while_the_page_is_shown(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fake)
    timer = window.store._board_timer
    assert window.current_page() == "dashboard"
    assert not timer.isActive()
    page = leaderboard(window)
    assert page.isVisible()
    assert timer.isActive()
    qtbot.waitUntil(lambda: "leaderboard" in fake.calls, timeout=10_000)
    window.show_page("statistics")
    assert not timer.isActive()
    window.show_page("leaderboard")
    assert timer.isActive()
    window.hide()  # closed to the tray: nobody looks at it
    assert not timer.isActive()
