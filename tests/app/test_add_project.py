"""File > Add project…: the first-run page's step 1 after the first run, against a fake engine.

What is checked: the menu action (a mnemonic, a shortcut, a status tip; only from the pages) opens
the page in its add mode ("Add a project", Cancel instead of a hidden Back, no "Step 1 of 3", the
attached project not offered again); a URL is looked up, the preview says what joining does to the
project contributing now and offers (ticked) to contribute to the new one instead: ticked, Join
attaches and switches, and a moderated project's account step follows; unticked, Join attaches it
beside the active one (which stays), and lands on the dashboard without the preset step, the
preferences untouched; the account step comes only when the joined project is the one the engine
logs in for; Cancel and Escape return with nothing attached; and the first run afterwards is the
first run again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.pages.dashboard import DashboardPage
from app.pages.first_run import FirstRunPage
from app.pages.first_run.flows import INTRO, TITLE
from app.pages.first_run.preview import joining_note
from app.window import MainWindow
from core.api import NotFound
from core.api.testing import FakeEngine
from core.api.testing.sample_data import DEMO_OFFER, REMOTE_PREVIEW
from tests.app.test_accessibility import (
    activate,
    check_mnemonics,
    check_tab_walk,
    check_tooltips_and_tab_focus,
)

CLICK = Qt.MouseButton.LeftButton
ACCOUNT_STEP = 1
URL = REMOTE_PREVIEW.url
DEMO = DEMO_OFFER.name


def dashboard_of(window: MainWindow, qtbot: QtBot) -> DashboardPage:
    qtbot.waitUntil(lambda: window.root.currentWidget() is window.main, timeout=10_000)
    page = window.page["dashboard"]
    assert isinstance(page, DashboardPage)
    return page


def open_adding(window: MainWindow, qtbot: QtBot) -> FirstRunPage:
    dashboard_of(window, qtbot)
    window.add_project_action.trigger()
    page = window.first_run
    qtbot.waitUntil(lambda: window.root.currentWidget() is page, timeout=10_000)
    return page


def look_up(page: FirstRunPage, qtbot: QtBot, url: str) -> None:
    """Look ``url`` up and trust the key that answers (the link names none)."""
    page.url_field.edit.setText(url)
    qtbot.mouseClick(page.url_field.button, CLICK)
    qtbot.waitUntil(lambda: page.previewing() is not None, timeout=10_000)
    assert not page.next_button.isEnabled()  # Join waits for the key to be trusted
    page.trust_box.click()


def test_the_menu_action_opens_the_page_in_add_mode(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fake)
    action = window.add_project_action
    file_menu = window.menuBar().actions()[0].menu()
    assert action in file_menu.actions()  # type: ignore[union-attr]
    assert action.text() == "&Add project…"
    assert action.shortcut().toString() == "Ctrl+Shift+N"
    assert action.statusTip()
    page = open_adding(window, qtbot)
    assert not action.isEnabled()  # not twice, nor from the first run
    assert page.title.text() == "Add a project"
    assert page.step_label.text() == "Choose a project"
    assert page.back_button.isVisible()
    assert page.back_button.text() == "&Cancel"
    assert page.offer_list.count() == 0  # the attached demo is not offered again
    assert "No other project" in page.no_offers.text()
    assert not page.demo_button.isVisible()


def test_a_url_joins_and_lands_on_the_dashboard_without_the_preset_step(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fake)
    before = dict(fake.values)
    page = open_adding(window, qtbot)
    look_up(page, qtbot, URL)
    assert page.joining.isVisible()
    assert page.instead_box.isVisible()
    assert page.instead_box.isChecked()  # as a BOINC volunteer adding a project expects
    assert page.instead_box.text() == f"Contribute to it &instead of {DEMO}"
    assert page.joining.text() == joining_note("open-albert", DEMO, instead=True)
    page.instead_box.click()  # attach it beside the demo
    assert page.joining.text() == joining_note("open-albert", DEMO, instead=False)
    assert "stays the project this computer contributes to" in page.joining.text()
    qtbot.mouseClick(page.next_button, CLICK)  # Join
    dashboard = dashboard_of(window, qtbot)
    assert [p.name for p in fake.projects_] == [DEMO, "open-albert"]
    assert "activate_project" not in fake.calls
    assert "set_settings" not in fake.calls  # the preset was the first run's
    assert fake.values == before
    assert window.current_page() == "dashboard"
    # the engine still contributes to the demo, and the dashboard says so
    qtbot.waitUntil(lambda: dashboard.project.text() == DEMO, timeout=10_000)
    assert window.banner.isVisible()
    assert "open-albert joined" in window.banner.text.text()
    assert f"{DEMO} stays the project" in window.banner.text.text()
    assert "on the Projects page" in window.banner.text.text()
    assert "barnraise ctl" not in window.banner.text.text()
    assert window.banner.action.text() == "Show projects"
    assert window.add_project_action.isEnabled()
    assert not window.first_run.adding
    assert (page.title.text(), page.intro.text()) == (TITLE, INTRO)
    # where the switch is: the Projects page, with the new project waiting beside the demo
    qtbot.mouseClick(window.banner.action, CLICK)
    assert window.current_page() == "projects"
    projects = window.projects_page
    qtbot.waitUntil(lambda: list(projects.cards) == [DEMO, "open-albert"], timeout=10_000)
    assert projects.cards["open-albert"].switch_button.isVisible()


def test_a_moderated_project_that_becomes_active_goes_through_the_login(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fake)
    page = open_adding(window, qtbot)
    look_up(page, qtbot, URL)
    # meanwhile the demo is detached (from the command line): the joined project becomes active,
    # and the account the engine holds is its coordinator's
    asyncio.run(fake.detach(DEMO))
    qtbot.waitUntil(lambda: window.store.projects == [], timeout=10_000)
    qtbot.waitUntil(lambda: page.joining.text() != "", timeout=10_000)
    qtbot.mouseClick(page.next_button, CLICK)  # Join
    qtbot.waitUntil(lambda: page.steps.currentIndex() == ACCOUNT_STEP, timeout=10_000)
    assert window.root.currentWidget() is page
    assert page.step_label.text() == "Your account"
    assert "open-albert" in page.login.intro.text()
    page.login.username.setText("quinn")
    page.login.password.setText("a long password")
    qtbot.mouseClick(page.login.signup_button, CLICK)
    dashboard = dashboard_of(window, qtbot)
    assert fake.username == "quinn"
    assert "set_settings" not in fake.calls
    qtbot.waitUntil(lambda: dashboard.project.text() == "open-albert", timeout=10_000)
    assert "contributes to it now" in window.banner.text.text()


def test_a_moderated_project_beside_the_active_one_skips_the_login(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    """The engine logs in at the active project's coordinator only: a login now would be the
    demo's, not the joined project's."""
    window = make_window(fake)
    page = open_adding(window, qtbot)
    look_up(page, qtbot, URL)
    page.instead_box.setChecked(False)
    qtbot.mouseClick(page.next_button, CLICK)
    dashboard_of(window, qtbot)
    assert "login" not in fake.calls
    assert "activate_project" not in fake.calls
    assert fake.active == DEMO
    assert page.steps.currentIndex() == 0


def test_contributing_instead_switches_and_goes_through_the_login(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    """The box ticked (as it comes): after the attach the engine switches to the joined project,
    whose coordinator the account now follows, so its login step comes as in the first run."""
    window = make_window(fake)
    page = open_adding(window, qtbot)
    look_up(page, qtbot, URL)
    assert page.instead_box.isChecked()
    qtbot.mouseClick(page.next_button, CLICK)  # Join
    qtbot.waitUntil(lambda: page.steps.currentIndex() == ACCOUNT_STEP, timeout=10_000)
    assert fake.calls.index("attach") < fake.calls.index("activate_project")
    assert fake.active == "open-albert"
    assert [(p.name, p.active) for p in fake.projects_] == [(DEMO, False), ("open-albert", True)]
    assert window.root.currentWidget() is page
    assert "open-albert" in page.login.intro.text()
    page.login.username.setText("quinn")
    page.login.password.setText("a long password")
    qtbot.mouseClick(page.login.signup_button, CLICK)
    dashboard = dashboard_of(window, qtbot)
    assert fake.username == "quinn"
    assert "set_settings" not in fake.calls
    qtbot.waitUntil(lambda: dashboard.project.text() == "open-albert", timeout=10_000)
    assert window.banner.level == "info"
    assert "open-albert joined: this computer contributes to it now" in window.banner.text.text()


def test_a_switch_the_engine_refuses_leaves_the_project_joined_and_says_why(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fake)
    page = open_adding(window, qtbot)
    look_up(page, qtbot, URL)
    fake.fail_next("activate_project", NotFound("no attached project is called 'open-albert'"))
    qtbot.mouseClick(page.next_button, CLICK)  # Join
    dashboard_of(window, qtbot)
    assert [p.name for p in fake.projects_] == [DEMO, "open-albert"]
    assert fake.active == DEMO
    assert "login" not in fake.calls
    qtbot.waitUntil(window.banner.isVisible, timeout=10_000)
    assert window.banner.level == "warning"
    assert "open-albert joined beside" in window.banner.text.text()
    assert (
        "Switching to the joined project failed: No attached project" in window.banner.text.text()
    )


def test_cancel_returns_with_nothing_attached(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fake)
    window.show_page("statistics")
    page = open_adding(window, qtbot)
    look_up(page, qtbot, URL)
    qtbot.mouseClick(page.back_button, CLICK)  # from the preview: back to the choice
    assert page.previewing() is None
    assert window.root.currentWidget() is page
    assert page.back_button.text() == "&Cancel"
    qtbot.mouseClick(page.back_button, CLICK)
    qtbot.waitUntil(lambda: window.root.currentWidget() is window.main, timeout=10_000)
    assert window.current_page() == "statistics"
    assert [p.name for p in fake.projects_] == [DEMO]
    assert "attach" not in fake.calls
    assert not page.adding
    assert page.title.text() == TITLE
    # Escape cancels too
    page = open_adding(window, qtbot)
    qtbot.keyClick(page, Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: window.root.currentWidget() is window.main, timeout=10_000)
    assert "attach" not in fake.calls


def test_the_first_run_is_unchanged_after_an_add_was_cancelled(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fake)
    page = open_adding(window, qtbot)
    qtbot.mouseClick(page.back_button, CLICK)
    dashboard_of(window, qtbot)
    asyncio.run(fake.detach(DEMO))  # no project left: the first run, counted in three steps
    qtbot.waitUntil(lambda: window.root.currentWidget() is page, timeout=10_000)
    assert page.step_label.text() == "Step 1 of 3: Choose a project"
    assert not page.back_button.isVisible()
    qtbot.waitUntil(lambda: page.offer_list.count() > 0, timeout=10_000)


# ---- accessibility ---------------------------------------------------------------------------------


def test_add_mode_is_reachable_and_explained(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fake)
    activate(window, qtbot)
    page = open_adding(window, qtbot)
    check_tooltips_and_tab_focus(page)
    check_tab_walk(page, qtbot)
    check_mnemonics(page)
    assert page.back_button.toolTip() == "Return to the dashboard without adding a project"
    assert page.url_field.edit.accessibleName() == "Project URL"
    look_up(page, qtbot, URL)
    check_tooltips_and_tab_focus(page)
    check_mnemonics(page)
    assert page.joining.accessibleName() == "What joining does"
    assert page.instead_box.toolTip()
    assert page.joining.textFormat() == Qt.TextFormat.PlainText  # it quotes project names
