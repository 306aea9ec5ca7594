"""The Projects page: every attached project, the active one marked, each with its own figures;
switching to another and leaving one.

Against a fake engine with two projects attached (the demo, active, and a project joined by URL,
each with a ledger of its own): the cards show each project's facts and figures and follow a switch
made elsewhere; "Contribute to this project" switches, its buttons off while the engine answers;
"Leave project…" asks, saying what is kept and what is lost: Cancel leaves everything as it was,
Leave detaches it and its card goes; an engine that refuses either leaves the list as it was and the
banner says why in the engine's words. Once against the real engine, which the app starts: two
projects from manifest files, the first run, a switch to the second and the first left.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox
from pytestqt.qtbot import QtBot

from app import wording
from app.errors import explain
from app.pages.dashboard import DashboardPage
from app.pages.projects import ProjectCard, ProjectsPage
from app.window import MainWindow
from core.api import AttachRequest, Conflict, NotFound
from core.api.schema import ProjectInfo
from core.api.testing import FakeEngine
from core.api.testing.sample_data import DEMO, REMOTE_PREVIEW
from tests.app.real_engine import real_window
from tests.app.test_accessibility import (
    activate,
    check_mnemonics,
    check_tab_walk,
    check_tooltips_and_tab_focus,
)
from tests.support.signed_project import project_text

CLICK = Qt.MouseButton.LeftButton
ALBERT = REMOTE_PREVIEW.name


@pytest.fixture
def two() -> FakeEngine:
    """A volunteer contributing to the demo who joined open-albert beside it and gave it a while."""
    engine = FakeEngine("contributing")
    asyncio.run(engine.attach(AttachRequest(REMOTE_PREVIEW.url)))
    engine.ledger_seeds[ALBERT] = 11
    return engine


def projects_page(window: MainWindow, qtbot: QtBot) -> ProjectsPage:
    """The page shown, once it has every card with what the manifests say and its figures."""
    window.show_page("projects")
    page = window.projects_page
    store = window.store
    qtbot.waitUntil(page.isVisible, timeout=10_000)
    names = [p.name for p in store.projects or []]
    qtbot.waitUntil(
        lambda: (
            list(page.cards) == names
            and all(name in store.project_figures for name in names)
            and {o.name for o in store.offers or [] if o.source == "attached"} >= set(names)
        ),
        timeout=10_000,
    )
    return page


def figures(engine: FakeEngine, name: str) -> str:
    return wording.project_figures(asyncio.run(engine.statistics(name, 30)))


def is_active(card: ProjectCard) -> bool:
    return card.marker.text().startswith("Active") and not card.switch_button.isVisible()


def test_each_project_shows_with_the_active_one_marked_and_its_own_figures(
    make_window: Callable[..., MainWindow], two: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(two)
    page = projects_page(window, qtbot)
    assert list(page.cards) == [DEMO, ALBERT]  # the engine's order
    demo, albert = page.cards[DEMO], page.cards[ALBERT]
    assert is_active(demo)
    assert demo.accessibleName() == f"{DEMO}, active"
    assert not is_active(albert)
    assert albert.marker.text() == "Attached: waits while another project is active"
    assert albert.switch_button.isVisible()
    assert albert.switch_button.isEnabled()
    assert albert.switch_button.accessibleName() == f"Contribute to {ALBERT}"
    assert DEMO in albert.switch_button.toolTip()
    for card in (demo, albert):
        assert card.leave_button.isVisible()
        assert card.leave_button.isEnabled()
        assert card.leave_button.accessibleName() == f"Leave {card.name}…"
        assert card.values["Kind"].text() == "Collaborative training"
    assert demo.values["Joined from"].text() == "The demo swarm running on this computer"
    assert albert.values["Joined from"].text() == f"{REMOTE_PREVIEW.url} · manifest version 3"
    assert demo.values["Account"].text() == "Members only: logged in as sam"
    assert albert.values["Account"].text() == "Members only: needs a login at its coordinator"
    assert albert.description.text() == REMOTE_PREVIEW.description
    # each one's own rows of the ledger
    assert demo.values["Contributed"].text() == figures(two, DEMO)
    assert albert.values["Contributed"].text() == figures(two, ALBERT)
    assert figures(two, DEMO) != figures(two, ALBERT)
    assert "samples" in figures(two, ALBERT)

    # a switch made elsewhere (barnraise ctl activate): the engine's ProjectsChanged moves the mark
    asyncio.run(two.activate_project(ALBERT))
    qtbot.waitUntil(lambda: is_active(albert) and not is_active(demo), timeout=10_000)
    assert demo.switch_button.isVisible()
    assert demo.values["Account"].text() == "Members only: needs a login at its coordinator"


def test_with_two_projects_every_button_explains_itself_and_tab_reaches_it(
    make_window: Callable[..., MainWindow], two: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(two)
    activate(window, qtbot)
    page = projects_page(window, qtbot)
    check_tooltips_and_tab_focus(page)
    check_tab_walk(page, qtbot)
    check_mnemonics(page)
    box = leave_question(page, page.cards[ALBERT], qtbot)
    assert all(b.toolTip() for b in box.buttons())
    box.reject()


def test_contribute_to_another_project_switches_to_it_and_the_list_marks_it(
    make_window: Callable[..., MainWindow], two: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(two)
    page = projects_page(window, qtbot)
    demo, albert = page.cards[DEMO], page.cards[ALBERT]
    qtbot.mouseClick(albert.switch_button, CLICK)
    # in flight: every action waits, so a second click asks nothing more
    assert not albert.switch_button.isEnabled()
    assert not demo.leave_button.isEnabled()
    assert page.status.text() == f"Switching to {ALBERT}…"
    qtbot.mouseClick(albert.switch_button, CLICK)
    page.contribute_to(ALBERT)
    qtbot.waitUntil(lambda: is_active(albert) and not is_active(demo), timeout=10_000)
    qtbot.waitUntil(lambda: page.working is None, timeout=10_000)
    assert two.calls.count("activate_project") == 1
    assert two.active == ALBERT
    assert demo.switch_button.isVisible()
    assert demo.switch_button.isEnabled()
    assert not page.status.isVisible()
    assert not window.banner.isVisible()
    dashboard = window.page["dashboard"]
    assert isinstance(dashboard, DashboardPage)
    qtbot.waitUntil(lambda: dashboard.project.text() == ALBERT, timeout=10_000)


def leave_question(page: ProjectsPage, card: ProjectCard, qtbot: QtBot) -> QMessageBox:
    qtbot.mouseClick(card.leave_button, CLICK)
    box = page.question
    assert box is not None
    qtbot.waitUntil(box.isVisible, timeout=10_000)
    return box


def test_leaving_asks_first_and_cancel_changes_nothing_then_leave_detaches(
    make_window: Callable[..., MainWindow], two: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(two)
    page = projects_page(window, qtbot)
    box = leave_question(page, page.cards[DEMO], qtbot)
    assert box.text() == f"Leave {DEMO}?"
    details = box.informativeText()
    assert f"stops contributing to {DEMO}" in details
    assert f"{ALBERT} becomes the project it contributes to" in details
    assert "your statistics go on counting" in details  # the ledger keeps its rows
    assert "your account at its coordinator" in details
    assert "cache folder" in details  # the engine removes no files
    assert "File ▸ Add project…" in details
    cancel = box.button(QMessageBox.StandardButton.Cancel)
    assert box.defaultButton() is cancel
    qtbot.mouseClick(cancel, CLICK)
    qtbot.waitUntil(lambda: page.question is None, timeout=10_000)
    assert "detach" not in two.calls
    assert list(page.cards) == [DEMO, ALBERT]

    box = leave_question(page, page.cards[DEMO], qtbot)
    leave = next(b for b in box.buttons() if b.text() == f"Leave {DEMO}")
    qtbot.mouseClick(leave, CLICK)
    qtbot.waitUntil(lambda: list(page.cards) == [ALBERT], timeout=10_000)
    assert two.calls.count("detach") == 1
    assert [p.name for p in two.projects_] == [ALBERT]
    # the first left is the active one now, and the page says so
    qtbot.waitUntil(lambda: is_active(page.cards[ALBERT]), timeout=10_000)
    qtbot.waitUntil(lambda: page.working is None, timeout=10_000)
    assert page.cards[ALBERT].leave_button.isEnabled()
    assert window.root.currentWidget() is window.main


def test_leaving_a_project_that_waits_says_the_active_one_stays(
    make_window: Callable[..., MainWindow], two: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(two)
    page = projects_page(window, qtbot)
    box = leave_question(page, page.cards[ALBERT], qtbot)
    assert f"{DEMO} stays the one this computer contributes to" in box.informativeText()
    box.reject()  # Escape
    qtbot.waitUntil(lambda: page.question is None, timeout=10_000)
    assert "detach" not in two.calls


def test_an_engine_that_refuses_keeps_the_list_and_the_banner_says_why(
    make_window: Callable[..., MainWindow], two: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(two)
    page = projects_page(window, qtbot)
    demo, albert = page.cards[DEMO], page.cards[ALBERT]
    refusal = Conflict("the engine is busy stopping the active peer; try again in a moment")
    two.fail_next("activate_project", refusal)
    qtbot.mouseClick(albert.switch_button, CLICK)
    qtbot.waitUntil(window.banner.isVisible, timeout=10_000)
    assert window.banner.level == "warning"
    assert window.banner.text.text() == explain(refusal, f"switching to {ALBERT}")
    assert refusal.message in window.banner.text.text().lower()
    qtbot.waitUntil(lambda: page.working is None, timeout=10_000)
    assert is_active(demo)
    assert albert.switch_button.isEnabled()
    assert two.active == DEMO

    window.banner.hide()
    gone = NotFound(f"no attached project is called {ALBERT!r}")
    two.fail_next("detach", gone)
    box = leave_question(page, albert, qtbot)
    qtbot.mouseClick(next(b for b in box.buttons() if b.text() == f"Leave {ALBERT}"), CLICK)
    qtbot.waitUntil(window.banner.isVisible, timeout=10_000)
    assert window.banner.text.text() == explain(gone, f"leaving {ALBERT}")
    assert gone.message in window.banner.text.text().lower()
    qtbot.waitUntil(lambda: page.working is None, timeout=10_000)
    assert list(page.cards) == [DEMO, ALBERT]
    assert [p.name for p in two.projects_] == [DEMO, ALBERT]
    assert albert.leave_button.isEnabled()


def test_the_words_for_the_last_project_a_file_and_an_open_project() -> None:
    question, details = wording.leave_question("solo", active="solo", next_active=None)
    assert question == "Leave solo?"
    assert "No project is left: Barnraise then asks you to join one." in details
    info = ProjectInfo("solo", "", "/home/you/solo.toml")
    assert wording.project_origin(info) == "The manifest file /home/you/solo.toml"
    assert wording.project_account(False, active=True, account=None).startswith("Open")
    assert wording.project_figures(None) == "Reading its figures…"


# ---- the real engine -------------------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("BARNRAISE_HOME", str(home))
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    return home


@pytest.mark.slow
def test_the_real_engine_switches_and_leaves_through_the_page(
    home: Path, tmp_path: Path, qtbot: QtBot
) -> None:
    """Two open projects from manifest files (no peer starts: contributing stays off)."""
    manifests = []
    for name in ("alpha", "beta"):
        path = tmp_path / "manifests" / name / "project.toml"
        path.parent.mkdir(parents=True)
        path.write_text(project_text(None, name=name, description=f"The {name} project."))
        manifests.append(path)
    with real_window(qtbot, tmp_path / "app.ini") as window:
        store, first = window.store, window.first_run
        qtbot.waitUntil(lambda: window.root.currentWidget() is first, timeout=120_000)
        for path in manifests:  # as the first run's "Open a manifest file…" joins one
            call = store.attach_request(AttachRequest(str(path)))
            qtbot.waitUntil(lambda: call.done, timeout=60_000)  # noqa: B023
            assert call.error is None, call.error
        # the first run goes on with a project attached: its preset, then the pages
        qtbot.waitUntil(lambda: first.selected_offer() is not None, timeout=60_000)
        qtbot.mouseClick(first.next_button, CLICK)
        qtbot.waitUntil(lambda: first.steps.currentIndex() == 2, timeout=60_000)
        qtbot.mouseClick(first.next_button, CLICK)
        qtbot.waitUntil(lambda: window.root.currentWidget() is window.main, timeout=60_000)

        page = projects_page(window, qtbot)
        alpha, beta = page.cards["alpha"], page.cards["beta"]
        assert is_active(alpha)
        assert beta.values["Joined from"].text() == f"The manifest file {manifests[1]}"
        assert beta.values["Kind"].text() == "Collaborative training"
        assert beta.values["Account"].text() == "Open to everyone: no account needed"
        assert beta.values["Contributed"].text() == "Nothing contributed to it yet"

        qtbot.mouseClick(beta.switch_button, CLICK)
        qtbot.waitUntil(lambda: is_active(beta) and not is_active(alpha), timeout=60_000)
        assert [(p.name, p.active) for p in store.projects or []] == [
            ("alpha", False),
            ("beta", True),
        ]

        qtbot.waitUntil(alpha.leave_button.isEnabled, timeout=60_000)
        box = leave_question(page, alpha, qtbot)
        qtbot.mouseClick(next(b for b in box.buttons() if b.text() == "Leave alpha"), CLICK)
        qtbot.waitUntil(lambda: list(page.cards) == ["beta"], timeout=60_000)
        assert [(p.name, p.active) for p in store.projects or []] == [("beta", True)]
        assert not window.banner.isVisible()
