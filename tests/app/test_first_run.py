"""First run: the wizard that joins a project, logs in and picks a preset, against a fresh fake engine.

What is checked: the window opens on the wizard (not the dashboard) while nothing is attached; the
offers are listed and Next attaches the chosen one; a moderated project adds the account step (sign
up, log in, the coordinator's refusal under the form) and an open one skips it; the preset sets
exactly its preferences; the wizard ends on the dashboard with contribution still off; Back goes
back; without offers the demo swarm can be asked for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from PySide6.QtCore import QPoint, Qt
from pytestqt.qtbot import QtBot

from app.pages.dashboard import DashboardPage
from app.pages.first_run import FirstRunPage
from app.presets import preset
from app.window import MainWindow
from core.api.testing import DEMO, FakeEngine
from core.policy import Preferences

CLICK = Qt.MouseButton.LeftButton
ACCOUNT_STEP, PRESET_STEP = 1, 2


def wizard(window: MainWindow, qtbot: QtBot) -> FirstRunPage:
    """The first-run page, once the engine's offers have been shown on it."""
    page = window.first_run
    qtbot.waitUntil(lambda: window.root.currentWidget() is page, timeout=10_000)
    qtbot.waitUntil(
        lambda: page.no_offers.text() != "" or page.offer_list.count() > 0, timeout=10_000
    )
    return page


def attach_the_demo(page: FirstRunPage, qtbot: QtBot, step: int) -> None:
    qtbot.waitUntil(page.next_button.isEnabled, timeout=10_000)
    qtbot.mouseClick(page.next_button, CLICK)
    qtbot.waitUntil(lambda: page.steps.currentIndex() == step, timeout=10_000)


def log_in(page: FirstRunPage, qtbot: QtBot, name: str, password: str, *, signup: bool) -> None:
    page.login.username.setText(name)
    page.login.password.setText(password)
    button = page.login.signup_button if signup else page.login.login_button
    qtbot.mouseClick(button, CLICK)


def test_a_fresh_engine_opens_the_wizard_with_the_demo_on_offer(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fresh)
    page = wizard(window, qtbot)
    qtbot.waitUntil(lambda: page.offer_list.count() == 1, timeout=10_000)
    assert window.root.currentWidget() is page
    assert window.root.currentWidget() is not window.main
    assert page.offer_list.item(0).text().startswith(f"{DEMO}\n")
    offer = page.selected_offer()
    assert offer is not None
    assert offer.source == "local_swarm"
    assert page.next_button.isEnabled()
    assert page.step_label.text() == "Step 1 of 3: Choose a project"
    assert not page.back_button.isVisible()
    assert not page.demo_button.isVisible()  # the demo swarm already runs: nothing to start
    assert fresh.projects_ == []


def test_the_full_wizard_ends_on_the_dashboard_still_paused(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fresh)
    page = wizard(window, qtbot)
    attach_the_demo(page, qtbot, ACCOUNT_STEP)
    assert [p.name for p in fresh.projects_] == [DEMO]
    assert "attach" in fresh.calls
    assert page.step_label.text() == "Step 2 of 3: Your account"
    assert page.login.signup_button.isVisible()
    assert page.next_button.text() == "&Skip for now"

    log_in(page, qtbot, "newcomer", "a long new password", signup=True)
    qtbot.waitUntil(lambda: page.steps.currentIndex() == PRESET_STEP, timeout=10_000)
    assert fresh.username == "newcomer"
    assert fresh.coordinator.passwords["newcomer"] == "a long new password"
    assert page.login.password.text() == ""  # the password is dropped once the engine answered
    assert page.next_button.text() == "&Finish"

    light = preset("light")
    light_button = page.preset_buttons["light"]
    # on its label: the button is as wide as its card, and only the label and circle take clicks
    qtbot.mouseClick(light_button, CLICK, pos=QPoint(8, light_button.height() // 2))
    assert page.chosen_preset() == "light"
    qtbot.mouseClick(page.next_button, CLICK)
    qtbot.waitUntil(lambda: window.root.currentWidget() is window.main, timeout=10_000)
    defaults = Preferences().to_dict()
    assert fresh.values == {**defaults, **light.values}
    assert fresh.calls.count("set_settings") == 1
    assert window.current_page() == "dashboard"
    dashboard = window.page["dashboard"]
    assert isinstance(dashboard, DashboardPage)
    qtbot.waitUntil(
        lambda: window.store.state is not None and window.store.state.code == "not_opted_in",
        timeout=10_000,
    )
    state = window.store.state
    assert state is not None
    assert state.state == "paused"
    assert fresh.values["contribute"] is False
    assert "start" not in fresh.calls
    qtbot.waitUntil(lambda: dashboard.state_word.text() == "Paused", timeout=10_000)
    assert not dashboard.switch.isChecked()
    assert dashboard.switch.isEnabled()


def test_a_wrong_password_shows_the_coordinators_refusal_and_stays(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fresh)
    page = wizard(window, qtbot)
    attach_the_demo(page, qtbot, ACCOUNT_STEP)
    log_in(page, qtbot, "alice", "not her password", signup=False)
    qtbot.waitUntil(page.login.message.isVisible, timeout=10_000)
    assert page.login.message.text() == "Wrong username or password."
    assert page.steps.currentIndex() == ACCOUNT_STEP
    assert fresh.username is None
    assert page.login.login_button.isEnabled()  # ready for another try
    assert page.login.login_button.text() == "Log in"

    log_in(page, qtbot, "alice", "correct horse battery", signup=False)
    qtbot.waitUntil(lambda: page.steps.currentIndex() == PRESET_STEP, timeout=10_000)
    assert fresh.username == "alice"


def test_back_goes_back_a_step(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fresh)
    page = wizard(window, qtbot)
    attach_the_demo(page, qtbot, ACCOUNT_STEP)
    assert page.back_button.isVisible()
    qtbot.mouseClick(page.next_button, CLICK)  # "Skip for now"
    qtbot.waitUntil(lambda: page.steps.currentIndex() == PRESET_STEP, timeout=10_000)
    qtbot.mouseClick(page.back_button, CLICK)
    assert page.steps.currentIndex() == ACCOUNT_STEP
    assert page.step_label.text() == "Step 2 of 3: Your account"
    qtbot.mouseClick(page.back_button, CLICK)
    assert page.steps.currentIndex() == 0
    assert not page.back_button.isVisible()
    assert window.root.currentWidget() is page  # still in the wizard, though a project is attached


def test_an_open_project_skips_the_account_step(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    fresh.offered = [dataclasses.replace(fresh.offered[0], moderated=False)]
    window = make_window(fresh)
    page = wizard(window, qtbot)
    attach_the_demo(page, qtbot, PRESET_STEP)
    assert page.step_label.text() == "Step 3 of 3: How much to give"
    assert window.store.account is not None
    assert window.store.account.coordinator is None
    qtbot.mouseClick(page.back_button, CLICK)  # back over the step that was skipped
    assert page.steps.currentIndex() == 0


def test_without_offers_the_demo_swarm_can_be_started(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    fresh.offered = []
    window = make_window(fresh)
    page = wizard(window, qtbot)
    qtbot.waitUntil(lambda: page.no_offers.text().startswith("No project found"), timeout=10_000)
    assert page.offer_list.count() == 0
    assert not page.next_button.isEnabled()
    assert page.demo_button.isVisible()
    with qtbot.waitSignal(page.demoRequested, timeout=10_000):
        qtbot.mouseClick(page.demo_button, CLICK)
    assert page.no_offers.text().startswith("Starting the local demo swarm")
    assert not page.demo_button.isEnabled()  # one start at a time
    assert fresh.projects_ == []  # asking for the demo attaches nothing by itself


def test_back_to_the_first_step_does_not_offer_a_second_demo_swarm(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fresh)
    page = wizard(window, qtbot)
    attach_the_demo(page, qtbot, ACCOUNT_STEP)
    qtbot.mouseClick(page.back_button, CLICK)
    assert page.steps.currentIndex() == 0
    qtbot.waitUntil(
        lambda: getattr(page.selected_offer(), "source", None) == "attached", timeout=10_000
    )
    assert window.store.projects is not None
    assert window.store.projects[0].local_swarm
    assert not page.demo_button.isVisible()


def test_choosing_maximum_applies_maximum(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    fresh.offered = [dataclasses.replace(fresh.offered[0], moderated=False)]
    window = make_window(fresh)
    page = wizard(window, qtbot)
    attach_the_demo(page, qtbot, PRESET_STEP)
    maximum = page.preset_buttons["maximum"]
    qtbot.mouseClick(maximum, CLICK, pos=QPoint(8, maximum.height() // 2))
    assert maximum.isChecked()
    qtbot.mouseClick(page.next_button, CLICK)
    qtbot.waitUntil(lambda: window.root.currentWidget() is window.main, timeout=10_000)
    values = preset("maximum").values
    assert {name: fresh.values[name] for name in values} == values


def test_enter_goes_on_from_the_list_and_the_presets_but_logs_in_from_the_form(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fresh)
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=10_000)
    page = window.first_run
    qtbot.waitUntil(lambda: page.offer_list.count() > 0, timeout=10_000)
    page.offer_list.setFocus()
    qtbot.keyClick(page.offer_list, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: page.steps.currentIndex() == 1, timeout=10_000)
    assert fresh.calls.count("attach") == 1
    page.login.username.setText("sam")
    page.login.password.setText("wrong")
    qtbot.keyClick(page.login.password, Qt.Key.Key_Return)  # logs in, does not skip
    qtbot.waitUntil(page.login.message.isVisible, timeout=10_000)
    assert page.steps.currentIndex() == 1
    page.login.password.setText("my password")
    qtbot.keyClick(page.login.password, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: page.steps.currentIndex() == 2, timeout=10_000)
    maximum = page.preset_buttons["maximum"]
    maximum.click()
    qtbot.keyClick(maximum, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.root.currentWidget() is window.main, timeout=10_000)
    assert fresh.values["max_other_cpu_percent"] == 100.0
