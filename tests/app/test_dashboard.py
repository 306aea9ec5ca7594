"""Dashboard: the switch opts in and out, the state says why in plain words, tiles and the loss
curve follow the engine."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app import wording
from app.pages.dashboard import DashboardPage
from app.window import MainWindow
from core.api import Rounds
from core.api.errors import EngineUnavailable
from core.api.testing import FakeEngine


def dashboard(window: MainWindow) -> DashboardPage:
    page = window.page["dashboard"]
    assert isinstance(page, DashboardPage)
    return page


def test_shows_the_state_tiles_and_loss_curve(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    page = dashboard(make_window(fake))
    qtbot.waitUntil(lambda: page.chart.count == len(fake.history_))
    assert page.switch.isChecked()
    assert page.state_word.text() == "Contributing"
    assert page.project.text() == "barnraise-demo"
    assert page.speed.value.text() == "286"
    assert page.peers.value.text() == "5"
    assert page.epoch.value.text() == "149"
    assert page.total.value.text().endswith(" M")  # 264 M from the sample ledger
    assert page.chart.count == 150


def test_a_diloco_project_shows_its_round_and_its_last_exchange(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    page = dashboard(make_window(fake))
    qtbot.waitUntil(lambda: page.state_word.text() == "Contributing")
    for rounds, line in (
        (
            Rounds("diloco", 60.0, 34.0, 1_234_567),
            "Round: 34 s of 1 min · Last exchange: 1.23 MB sent",
        ),
        (Rounds("diloco", 300.0, 125.0, None), "Round: 2 min of 5 min · Last exchange: none yet"),
        (
            Rounds("diloco", 60.0, 5.0, 2_000_000, 0),
            "Round: 5 s of 1 min · Last exchange: 2.00 MB sent, on time",
        ),
        (
            Rounds("diloco", 60.0, 5.0, 2_000_000, 2),
            "Round: 5 s of 1 min · Last exchange: 2.00 MB sent, work 2 rounds late",
        ),
    ):
        fake.set_rounds(rounds)
        with qtbot.waitSignal(page.store.stateChanged):
            page.store.refresh_state()
        assert page.rounds.text() == line
        assert not page.rounds.isHidden()
        assert "rounds" in page.rounds.toolTip()
    for dedloc in (Rounds("dedloc"), None):  # a dedloc project: nothing more than before
        fake.set_rounds(dedloc)
        with qtbot.waitSignal(page.store.stateChanged):
            page.store.refresh_state()
        assert page.rounds.isHidden()
        assert page.epoch.value.text() == "149"
    assert wording.rounds_line(Rounds("dedloc", 60.0, 1.0, 5)) is None
    # the tooltip says what late work means, when this computer's was
    assert "still counts in full" in wording.rounds_detail(Rounds("diloco", 60.0, 5.0, 1, 2))
    assert "late" not in wording.rounds_detail(Rounds("diloco", 60.0, 5.0, 1, 0))


def test_the_reason_is_the_engines_own_words(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    page = dashboard(make_window(fake))
    fake.set_conditions(idle_seconds=20.0)  # at the computer: a GPU project waits
    qtbot.waitUntil(lambda: page.state_word.text() == "Waiting")
    assert page.reason.text().startswith("Waiting: you are using the computer")
    assert page.epoch.caption.text() == "as of the pause"
    fake.set_conditions(on_battery=True)
    qtbot.waitUntil(lambda: page.reason.text().startswith("Paused: on battery"))
    assert page.state_word.text() == "Paused"


def test_a_peer_waiting_for_the_collaboration_never_says_contributing(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    page = dashboard(make_window(fake))
    qtbot.waitUntil(lambda: page.state_word.text() == "Contributing")
    fake.wait_for_collaboration("no peer could give the state of epoch 37")
    qtbot.waitUntil(lambda: page.state_word.text() == "Waiting")
    assert page.reason.text().startswith(
        "Waiting for the collaboration: no peer could give the state of epoch 37 · since "
    )
    fake.wait_for_collaboration(None)
    qtbot.waitUntil(lambda: page.state_word.text() == "Contributing")


def test_switch_pauses_and_starts(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    page = dashboard(make_window(fake))
    qtbot.mouseClick(page.switch, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.state_word.text() == "Paused")
    assert fake.user_paused
    assert not page.switch.isChecked()
    assert page.reason.text().startswith("Paused by you")
    page.switch.setFocus()
    qtbot.keyClick(page.switch, Qt.Key.Key_Space)  # the keyboard works the same
    qtbot.waitUntil(lambda: page.state_word.text() == "Contributing")
    assert not fake.user_paused
    assert fake.calls.count("pause") == 1
    assert fake.calls.count("start") == 1


def test_a_failed_command_is_said_next_to_the_switch_and_undone(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    page = dashboard(make_window(fake))
    fake.fail_next("pause", EngineUnavailable("the engine at http://127.0.0.1:1 does not answer"))
    qtbot.mouseClick(page.switch, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(page.error.isVisible)
    assert "Pausing failed: the engine is not answering" in page.error.text()
    assert page.switch.isChecked()  # back to what the engine says
    assert not fake.user_paused


def test_loss_curve_grows_with_each_collaboration_epoch(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    page = dashboard(make_window(fake))
    qtbot.waitUntil(lambda: page.chart.count == 150)
    fake.advance(loss=4.1)
    qtbot.waitUntil(lambda: page.chart.count == 151)
    assert page.epoch.value.text() == "150"
    assert "latest loss 4.100" in page.chart.accessibleDescription()


def test_snooze_and_resume(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    page = dashboard(make_window(fake))
    qtbot.mouseClick(page.snooze_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.reason.text().startswith("Snoozed until"))
    assert fake.snoozed_until is not None
    assert page.resume_button.isVisible()
    qtbot.mouseClick(page.resume_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.state_word.text() == "Contributing")
    assert fake.snoozed_until is None


def test_a_project_that_needs_a_login_offers_one(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    fake.username = None
    page = dashboard(make_window(fake))
    qtbot.waitUntil(lambda: page.state_word.text() == "Problem")
    assert page.login_button.isVisible()
    with qtbot.waitSignal(page.loginRequested):
        qtbot.mouseClick(page.login_button, Qt.MouseButton.LeftButton)
