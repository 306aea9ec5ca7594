"""Events page: the engine's event log, newest first, and "Copy diagnostics" for a bug report.

What is checked: the engine's kept backlog is listed newest first with progress ticks hidden until
asked for; a new event goes on top; the copied report carries the versions, the state, the events
and the engine's log tail but no secret (no token or password, none of the accounts' passwords); when
the engine gives no diagnostics the report is still copied and says why.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app import diagnostics, wording
from app.pages.events import EventsPage
from app.window import MainWindow
from core.api.errors import EngineUnavailable
from core.api.events import ErrorRaised, Event, ProgressUpdated
from core.api.testing import DEMO, FakeEngine

CLICK = Qt.MouseButton.LeftButton
TICKS = 3


def events_page(window: MainWindow) -> EventsPage:
    window.show_page("events")
    page = window.page["events"]
    assert isinstance(page, EventsPage)
    return page


def add_ticks(fake: FakeEngine) -> None:
    """Progress ticks in the engine's backlog, as a training engine sends every few seconds."""
    for speed in (280.0, 284.0, 290.0):
        fake.emit(
            ProgressUpdated(DEMO, dataclasses.replace(fake.progress, samples_per_second=speed))
        )


def listed(page: EventsPage) -> list[tuple[str, str]]:
    table = page.table
    rows = []
    for row in range(table.rowCount()):
        kind, text = table.item(row, 1), table.item(row, 2)
        assert kind is not None
        assert text is not None
        rows.append((kind.text(), text.text()))
    return rows


def described(events: list[Event]) -> list[tuple[str, str]]:
    return [wording.describe_event(e) for e in events]


def copy_and_read(page: EventsPage, qtbot: QtBot) -> str:
    QApplication.clipboard().setText("not yet")
    qtbot.mouseClick(page.copy_button, CLICK)
    qtbot.waitUntil(lambda: page.copied.text().startswith("Copied "), timeout=10_000)
    qtbot.waitUntil(page.copy_button.isEnabled, timeout=10_000)
    text = QApplication.clipboard().text()
    assert text == page.report
    return text


def test_the_backlog_is_listed_newest_first_without_progress_ticks(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    add_ticks(fake)
    window = make_window(fake)
    page = events_page(window)
    backlog = list(fake.recent)  # what the engine kept
    qtbot.waitUntil(lambda: len(window.store.events) == len(backlog), timeout=10_000)
    plain = [e for e in backlog if not isinstance(e.data, ProgressUpdated)]
    assert len(backlog) - len(plain) == TICKS
    assert listed(page) == described(plain[::-1])
    assert all(kind != "Progress" for kind, _ in listed(page))
    assert [e.time for e in backlog] == sorted(e.time for e in backlog)  # kept oldest first
    assert plain[0].time < plain[-1].time - 3600  # a morning's worth: the order is visible

    page.show_progress.click()
    assert page.table.rowCount() == len(backlog)
    assert listed(page) == described(backlog[::-1])
    assert listed(page)[0] == ("Progress", "290 samples/s, 5 peer(s)")
    page.show_progress.click()
    assert page.table.rowCount() == len(plain)


def test_a_new_event_appears_at_the_top(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fake)
    page = events_page(window)
    qtbot.waitUntil(lambda: page.table.rowCount() == len(fake.recent), timeout=10_000)
    before = page.table.rowCount()
    fake.emit(ErrorRaised("project barnraise-demo", "the data server does not answer"))
    qtbot.waitUntil(lambda: page.table.rowCount() == before + 1, timeout=10_000)
    assert listed(page)[0] == ("Error", "project barnraise-demo: the data server does not answer")
    add_ticks(fake)  # hidden ticks do not push anything down
    qtbot.waitUntil(lambda: len(window.store.events) == before + 1 + TICKS, timeout=10_000)
    assert page.table.rowCount() == before + 1
    assert listed(page)[0][0] == "Error"


def test_copy_diagnostics_puts_a_report_without_secrets_on_the_clipboard(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fake)
    page = events_page(window)
    qtbot.waitUntil(lambda: page.table.rowCount() == len(fake.recent), timeout=10_000)
    report = copy_and_read(page, qtbot)
    assert f"app version {diagnostics.app_version()}" in report
    assert "engine version 0.1.0, API 1, pid 4242" in report
    assert "state running (running): Contributing" in report
    assert "averaging round 146 lost 1 of 5 parts (a peer left)" in report  # an event
    assert "Waiting: you are using the computer" in report
    assert "core.engine.engine: waiting: Waiting: you are away" in report  # the log tail
    assert "user sam; logged in True" in report
    assert re.search(r"\btokens?\b", report, re.IGNORECASE) is None
    assert re.search(r"\bpasswords?\b", report, re.IGNORECASE) is None
    leaked = [p for p in fake.coordinator.passwords.values() if p in report]
    assert not leaked, f"passwords in the report: {leaked}"
    assert (
        page.copied.text()
        == f"Copied {report.count(chr(10))} lines of diagnostics to the clipboard."
    )


def test_copy_diagnostics_without_the_engines_part_still_copies_and_says_why(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fake)
    page = events_page(window)
    fake.fail_next(
        "diagnostics", EngineUnavailable("the engine at http://127.0.0.1:1 does not answer")
    )
    report = copy_and_read(page, qtbot)
    assert (
        "no diagnostics from the engine: the engine at http://127.0.0.1:1 does not answer" in report
    )
    assert f"app version {diagnostics.app_version()}" in report
    assert "state running (running): Contributing" in report
    assert "averaging round 146 lost" in report
    assert "== Engine log" not in report
    assert page.copied.text().endswith(
        "(the engine gave none: the engine at http://127.0.0.1:1 does not answer)."
    )
    assert "diagnostics" in fake.calls
