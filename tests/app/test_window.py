"""Main window: what closing it means, keyboard page switching, and the banner about the engine.

What is checked: the first close asks (keep contributing in the background, quit, or cancel) and a
remembered answer is not asked again; without a tray "background" still hands over to the app (which
then exits and leaves the engine running); Ctrl+1 to Ctrl+6 switch pages and the last page is
remembered; an engine stopped on purpose gets a banner whose "Start the engine" reconnects; an error
event after connecting shows a warning banner, while the engine's older backlog shows none.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication, QMessageBox, QWidget
from pytestqt.qtbot import QtBot

from app.engine.preview import FakeConnector
from app.settings import AppSettings
from app.window import Choice, MainWindow, ask_close
from core.api.events import ErrorRaised
from core.api.testing import FakeEngine

CLICK = Qt.MouseButton.LeftButton


class Asker:
    """Stands in for the close question: answers as told and records that it was asked."""

    def __init__(self, choice: Choice | None, remember: bool) -> None:
        self.answer = (choice, remember)
        self.asked: list[bool] = []
        """The ``tray`` argument of each question."""

    def __call__(self, parent: QWidget, tray: bool) -> tuple[Choice | None, bool]:
        self.asked.append(tray)
        return self.answer


def connector(window: MainWindow) -> FakeConnector:
    found = window.store.bridge.connector
    assert isinstance(found, FakeConnector)
    return found


def test_the_first_close_asks_and_a_remembered_background_choice_hides(
    make_window: Callable[..., MainWindow],
    fake: FakeEngine,
    app_settings: AppSettings,
    qtbot: QtBot,
) -> None:
    window = make_window(fake)
    ask = Asker("background", True)
    window.ask_close = ask
    assert app_settings.close_choice == "ask"
    with qtbot.waitSignal(window.backgroundRequested, timeout=10_000):
        window.close()
    assert ask.asked == [True]
    assert not window.isVisible()
    assert app_settings.close_choice == "background"
    assert AppSettings(app_settings.path).close_choice == "background"  # on disk too
    assert window.background_action.isChecked()

    window.show()
    qtbot.waitExposed(window)
    with (
        qtbot.waitSignal(window.backgroundRequested, timeout=10_000),
        qtbot.assertNotEmitted(window.quitRequested),
    ):
        window.close()
    assert ask.asked == [True]  # not asked again
    assert not window.isVisible()
    assert fake.calls.count("shutdown") == 0  # the engine goes on


def test_quit_asks_the_app_to_quit(
    make_window: Callable[..., MainWindow],
    fake: FakeEngine,
    app_settings: AppSettings,
    qtbot: QtBot,
) -> None:
    window = make_window(fake)
    ask = Asker("quit", False)
    window.ask_close = ask
    with (
        qtbot.waitSignal(window.quitRequested, timeout=10_000),
        qtbot.assertNotEmitted(window.backgroundRequested),
    ):
        window.close()
    assert ask.asked == [True]
    assert app_settings.close_choice == "ask"  # not remembered: asked again next time
    window.close()
    assert len(ask.asked) == 2


def test_cancel_keeps_the_window_open(
    make_window: Callable[..., MainWindow],
    fake: FakeEngine,
    app_settings: AppSettings,
    qtbot: QtBot,
) -> None:
    window = make_window(fake)
    ask = Asker(None, False)
    window.ask_close = ask
    with (
        qtbot.assertNotEmitted(window.quitRequested),
        qtbot.assertNotEmitted(window.backgroundRequested),
    ):
        assert not window.close()
    assert ask.asked == [True]
    assert window.isVisible()
    assert app_settings.close_choice == "ask"


def test_without_a_tray_background_hands_over_to_the_app(
    make_window: Callable[..., MainWindow],
    fake: FakeEngine,
    app_settings: AppSettings,
    qtbot: QtBot,
) -> None:
    window = make_window(fake, tray=False)
    ask = Asker("background", True)
    window.ask_close = ask
    with qtbot.waitSignal(window.backgroundRequested, timeout=10_000):
        window.close()
    assert ask.asked == [False]  # the question knows there is no icon to come back to
    assert app_settings.close_choice == "background"
    assert window.isVisible()  # nothing to hide into: the app exits and the engine runs on
    assert fake.calls.count("shutdown") == 0


def test_ctrl_number_switches_pages_and_the_page_is_remembered(
    make_window: Callable[..., MainWindow],
    fake: FakeEngine,
    app_settings: AppSettings,
    qtbot: QtBot,
) -> None:
    window = make_window(fake)
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=10_000)
    assert window.current_page() == "dashboard"
    for number, key in (
        (Qt.Key.Key_2, "schedule"),
        (Qt.Key.Key_3, "statistics"),
        (Qt.Key.Key_4, "leaderboard"),
        (Qt.Key.Key_5, "events"),
        (Qt.Key.Key_6, "projects"),
        (Qt.Key.Key_1, "dashboard"),
        (Qt.Key.Key_3, "statistics"),
    ):
        qtbot.keyClick(window, number, Qt.KeyboardModifier.ControlModifier)
        assert window.current_page() == key
        assert window.pages.currentWidget() is window.page[key]
        assert window.nav.currentItem().text().lower() == key
        assert app_settings.last_page == key
    assert AppSettings(app_settings.path).last_page == "statistics"
    again = make_window(fake)  # the next start opens where the user left
    assert again.current_page() == "statistics"
    assert again.pages.currentWidget() is again.page["statistics"]


def test_a_deliberately_stopped_engine_gets_a_banner_that_starts_it(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fake)
    banner = window.banner
    assert not banner.isVisible()
    fake.shut_down = True  # stopped from elsewhere (barnraise ctl shutdown, say)
    fake.end_streams()
    qtbot.waitUntil(lambda: window.store.connection[0] == "stopped", timeout=10_000)
    assert banner.isVisible()
    assert banner.text.text().startswith("The engine was stopped")
    assert banner.level == "warning"
    assert banner.action.isVisible()
    assert banner.action.text() == "Start the engine"
    assert banner.action.toolTip() != ""
    assert connector(window).launches == 0  # not restarted behind the user's back

    qtbot.mouseClick(banner.action, CLICK)
    qtbot.waitUntil(lambda: window.store.connected, timeout=10_000)
    assert connector(window).launches == 1
    assert not fake.shut_down
    qtbot.waitUntil(lambda: banner.text.text() == "Connected to the engine again.", timeout=10_000)
    assert banner.level == "info"
    assert not banner.action.isVisible()
    assert window.root.currentWidget() is window.main


def test_an_error_event_after_connecting_shows_a_warning_but_the_backlog_does_not(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fake)
    backlog = len(fake.recent)
    assert any(isinstance(e.data, ErrorRaised) for e in fake.recent)  # an old error is kept
    qtbot.waitUntil(lambda: len(window.store.events) == backlog, timeout=10_000)
    assert not window.banner.isVisible()

    fake.emit(ErrorRaised("project barnraise-demo", "the data server does not answer"))
    qtbot.waitUntil(window.banner.isVisible, timeout=10_000)
    assert window.banner.level == "warning"
    assert window.banner.text.text() == "Project barnraise-demo: the data server does not answer"
    assert window.banner.close_button.isVisible()
    qtbot.mouseClick(window.banner.close_button, CLICK)
    assert not window.banner.isVisible()


def test_the_real_close_question_answers_with_the_button_clicked(qtbot: QtBot) -> None:
    """The dialog itself (the tests above replace it): keep, quit, cancel, and "remember"."""
    parent = QWidget()
    qtbot.addWidget(parent)
    for button, remember, expected in (
        ("keep", True, ("background", True)),
        ("stop", False, ("quit", False)),
        (None, True, (None, False)),
    ):

        def answer(button: str | None = button, remember: bool = remember) -> None:
            box = QApplication.activeModalWidget()
            assert isinstance(box, QMessageBox)
            check = box.checkBox()
            assert check is not None
            assert check.isChecked()  # remembering is the default
            check.setChecked(remember)
            if button is None:
                box.reject()
                return
            wanted = "Keep contributing" if button == "keep" else "Quit Barnraise"
            next(b for b in box.buttons() if b.text() == wanted).click()

        QTimer.singleShot(200, answer)
        assert ask_close(parent, True) == expected
