"""Joining by project URL in the first run (BOINC's "Add project"), against a fresh fake engine.

What is checked: a URL is looked up (button or Enter, never "Next" on the list behind it), the
preview says what the project is, who may join, what it would use and how its key was verified;
"Join" attaches that URL with the key the user saw pinned, then asks for an account when the
project is moderated and skips that step when it is open; Back returns to the choice with the URL
still there. What is plainly not a URL (a word, a bare host, a file) is answered without asking the
engine; the engine's refusals (no answer, another key) are shown under the field, which keeps its
text. Markup in a project's name or description is shown as typed. A refused manifest update of
an attached project is shown on the dashboard and in the event log's words.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel
from pytestqt.qtbot import QtBot

from app import wording
from app.errors import explain, own_words
from app.pages.dashboard import DashboardPage
from app.widgets.project_url import url_problem
from app.window import MainWindow
from core.api.errors import BadRequest, CoordinatorUnreachable
from core.api.events import Event, ManifestUpdated
from core.api.schema import ProjectPreview, ResourceUse
from core.api.testing import FakeEngine
from core.api.testing.sample_data import REMOTE_PREVIEW
from tests.app.join_support import CLICK, OTHER_KEY, look_up, previewed, record_attaches, wizard

ACCOUNT_STEP, PRESET_STEP = 1, 2
URL = REMOTE_PREVIEW.url
KEY = REMOTE_PREVIEW.project_key


def test_a_url_is_previewed_then_joined_with_its_key_pinned(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    requests = record_attaches(fresh)
    window = make_window(fresh)
    page = wizard(window, qtbot)
    look_up(page, qtbot, f"  {URL}/  ")
    preview = previewed(page, qtbot)
    assert preview.url == URL
    assert "attach" not in fresh.calls  # a preview joins nothing
    card = page.preview_card
    assert card.name.text() == "open-albert"
    assert card.description.text() == REMOTE_PREVIEW.description
    assert card.address.text() == f"{URL} · manifest version 3"
    assert card.kind.text().startswith("Collaborative training")
    assert card.access.text() == "Members only: log in, or create an account at the project"
    assert card.uses["Trains on"].text() == "NVIDIA GeForce RTX 3060 (12 GB)"
    assert card.uses["Model"].text() == "17.7 M parameters"
    assert card.uses["Disk"].text().startswith("about 1.34 GB")
    assert card.uses["Network"].text() == "about 610 MB per hour while contributing"
    assert card.notes.text() == "\n".join(REMOTE_PREVIEW.uses.notes)
    assert card.key.text() == (
        f"{KEY[:8]}…{KEY[-6:]} — first use: this key will be pinned; check it with the organizer"
    )
    assert KEY in card.key.toolTip()
    assert page.next_button.text() == "&Join"
    assert page.back_button.isVisible()
    assert page.step_label.text() == "Step 1 of 3: Choose a project"
    # the link names no key: Join waits until the volunteer trusts the one that answered
    assert not page.next_button.isEnabled()
    assert page.trust_box.hasFocus()
    page.trust_box.click()

    qtbot.mouseClick(page.next_button, CLICK)
    qtbot.waitUntil(lambda: page.steps.currentIndex() == ACCOUNT_STEP, timeout=10_000)
    assert [(r.manifest, r.pinned_key) for r in requests] == [(URL, KEY)]
    assert requests[0].is_url
    joined = fresh.projects_[0]
    assert (joined.name, joined.source_url, joined.project_key) == ("open-albert", URL, KEY)
    assert page.login.signup_button.isVisible()  # moderated, and volunteers may sign up
    assert "open-albert" in page.login.intro.text()

    qtbot.mouseClick(page.back_button, CLICK)  # back to step 1: the choice, not the preview
    assert page.steps.currentIndex() == 0
    assert page.previewing() is None
    assert page.next_button.text() == "&Next"


def test_a_refused_join_is_said_and_the_preview_stays(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fresh)
    page = wizard(window, qtbot)
    look_up(page, qtbot, URL)
    previewed(page, qtbot)
    page.trust_box.click()
    fresh.fail_next("attach", BadRequest(f"the manifest at {URL} is now signed by another key"))
    qtbot.mouseClick(page.next_button, CLICK)
    qtbot.waitUntil(page.error.isVisible, timeout=10_000)
    assert page.error.text() == f"The manifest at {URL} is now signed by another key."
    assert page.previewing() is not None
    qtbot.waitUntil(page.next_button.isEnabled, timeout=10_000)  # Join may be tried again
    assert page.next_button.text() == "&Join"
    assert fresh.projects_ == []


def test_a_key_in_the_link_is_checked_and_said(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fresh)
    page = wizard(window, qtbot)
    look_up(page, qtbot, f"{URL}/#key={KEY}")
    previewed(page, qtbot)
    assert page.preview_card.key.text().endswith(" — matches the key in the link")


def test_enter_in_the_url_field_looks_up_and_does_not_join_the_listed_project(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fresh)
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=10_000)
    page = wizard(window, qtbot)
    assert page.selected_offer() is not None  # the demo is selected behind the field
    page.url_field.edit.setFocus()
    qtbot.waitUntil(page.url_field.edit.hasFocus, timeout=10_000)
    qtbot.keyClicks(page.url_field.edit, "albert")  # not a URL: said, and nothing else happens
    qtbot.keyClick(page.url_field.edit, Qt.Key.Key_Return)
    assert page.url_field.message.isVisible()
    qtbot.wait(50)  # a wrong attach would be in flight now
    assert "attach" not in fresh.calls
    assert page.steps.currentIndex() == 0
    page.url_field.edit.clear()
    qtbot.keyClicks(page.url_field.edit, URL)
    qtbot.keyClick(page.url_field.edit, Qt.Key.Key_Return)
    previewed(page, qtbot)
    assert fresh.calls.count("preview_project") == 1
    assert "attach" not in fresh.calls
    # the link names no key: the box that trusts it has the focus; Enter joins once it is ticked
    qtbot.waitUntil(page.trust_box.hasFocus, timeout=10_000)
    qtbot.keyClick(page.trust_box, Qt.Key.Key_Return)
    qtbot.wait(50)
    assert "attach" not in fresh.calls
    qtbot.keyClick(page.trust_box, Qt.Key.Key_Space)
    qtbot.keyClick(page.trust_box, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: page.steps.currentIndex() == ACCOUNT_STEP, timeout=10_000)
    assert [p.name for p in fresh.projects_] == ["open-albert"]


def test_back_from_the_preview_keeps_the_url(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fresh)
    page = wizard(window, qtbot)
    look_up(page, qtbot, URL)
    previewed(page, qtbot)
    qtbot.mouseClick(page.back_button, CLICK)
    assert page.previewing() is None
    assert page.url_field.edit.text() == URL
    assert not page.back_button.isVisible()
    assert page.next_button.text() == "&Next"
    assert fresh.projects_ == []


def test_an_open_project_joined_by_url_skips_the_account_step(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    fresh.serve_project(
        dataclasses.replace(
            REMOTE_PREVIEW,
            url="http://192.168.1.20:8470",
            name="lan-demo",
            mode="open",
            allow_signup=False,
            kind="dmoe",
        )
    )
    window = make_window(fresh)
    page = wizard(window, qtbot)
    look_up(page, qtbot, "http://192.168.1.20:8470")
    previewed(page, qtbot)
    assert page.preview_card.access.text() == "Open to everyone: no account needed"
    assert page.preview_card.kind.text().startswith("Mixture of experts")
    assert page.preview_card.model_title.text() == "Experts hosted here"
    page.trust_box.click()
    qtbot.mouseClick(page.next_button, CLICK)
    qtbot.waitUntil(lambda: page.steps.currentIndex() == PRESET_STEP, timeout=10_000)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("https://nowhere.example.org", "The project at https://nowhere.example.org does not"),
        (f"{URL}/#key={OTHER_KEY}", f"is signed by project key {KEY}, not by {OTHER_KEY}"),
    ],
)
def test_an_engine_refusal_is_said_under_the_field_which_keeps_its_text(
    text: str,
    words: str,
    make_window: Callable[..., MainWindow],
    fresh: FakeEngine,
    qtbot: QtBot,
) -> None:
    window = make_window(fresh)
    page = wizard(window, qtbot)
    look_up(page, qtbot, text)
    message = page.url_field.message
    qtbot.waitUntil(message.isVisible, timeout=10_000)
    assert words in message.text()
    assert fresh.calls.count("preview_project") == 1
    assert page.url_field.edit.text() == text
    assert not page.url_field.edit.isReadOnly()
    assert page.url_field.button.isEnabled()
    assert page.previewing() is None
    assert page.next_button.isEnabled()  # the listed project can still be chosen
    assert "attach" not in fresh.calls


def test_the_field_is_busy_while_the_engine_looks(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    release = threading.Event()
    original = fresh.preview_project

    async def slow(url: str) -> ProjectPreview:
        await asyncio.get_running_loop().run_in_executor(None, release.wait, 10)
        return await original(url)

    fresh.preview_project = slow  # type: ignore[method-assign]
    window = make_window(fresh)
    page = wizard(window, qtbot)
    look_up(page, qtbot, URL)
    try:
        field = page.url_field
        assert field.button.text() == "Looking up…"
        assert not field.button.isEnabled()
        assert field.edit.isReadOnly()
        assert field.edit.text() == URL
        assert not page.next_button.isEnabled()
        qtbot.keyClick(field.edit, Qt.Key.Key_Return)  # no second look-up meanwhile
    finally:
        release.set()
    previewed(page, qtbot)
    assert page.url_field.button.text() == "&Look up"
    assert fresh.calls.count("preview_project") == 1


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "Enter the project's address, for example https://coord.example.org."),
        ("albert", "albert is not a project address."),
        ("coord.example.org", "Add https:// in front"),
        ("localhost:8470", "for example https://localhost:8470."),
        ("/home/sam/project.toml", "That looks like a file"),
        ("ftp://coord.example.org", "ftp:// addresses cannot be joined"),
        ("https://", "names no host"),
        ("https://coord.example.org/#key=nope", "is not a PeerID"),
    ],
)
def test_what_is_not_a_url_is_said_without_asking_the_engine(
    text: str,
    words: str,
    make_window: Callable[..., MainWindow],
    fresh: FakeEngine,
    qtbot: QtBot,
) -> None:
    window = make_window(fresh)
    page = wizard(window, qtbot)
    look_up(page, qtbot, text)
    message = page.url_field.message
    assert message.isVisible()
    assert words in message.text()
    assert page.url_field.edit.text() == text
    qtbot.wait(50)  # nothing is in flight: give a wrong call the chance to show
    assert "preview_project" not in fresh.calls


def test_typing_hides_the_message(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fresh)
    page = wizard(window, qtbot)
    look_up(page, qtbot, "albert")
    assert page.url_field.message.isVisible()
    qtbot.keyClicks(page.url_field.edit, ".example.org")
    assert not page.url_field.message.isVisible()


def test_markup_in_a_project_is_shown_as_typed(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    name = "<b>loud</b>"
    description = '<img src="http://tracker.example/x.png"> <a href="http://x">click</a> &amp;'
    fresh.serve_project(
        dataclasses.replace(
            REMOTE_PREVIEW,
            url="https://markup.example.org",
            name=name,
            description=description,
            uses=ResourceUse("<i>GPU</i>", 1, 1, 1, notes=["<script>x</script>"]),
        )
    )
    window = make_window(fresh)
    page = wizard(window, qtbot)
    look_up(page, qtbot, "https://markup.example.org")
    previewed(page, qtbot)
    card = page.preview_card
    assert card.name.text() == name
    assert card.description.text() == description
    assert card.uses["Trains on"].text() == "<i>GPU</i>"
    assert card.notes.text() == "<script>x</script>"
    rich = [
        label.text()
        for label in card.findChildren(QLabel)
        if label.text()
        and label.textFormat() != Qt.TextFormat.PlainText
        and label.objectName() != "help"  # the row titles: our own words
    ]
    assert rich == []
    # joined, its name and description on the dashboard are plain text too
    page.trust_box.click()
    qtbot.mouseClick(page.next_button, CLICK)
    qtbot.waitUntil(lambda: page.steps.currentIndex() == ACCOUNT_STEP, timeout=10_000)
    dashboard = window.page["dashboard"]
    assert isinstance(dashboard, DashboardPage)
    qtbot.waitUntil(lambda: dashboard.project.text() == name, timeout=10_000)
    assert dashboard.project.textFormat() == Qt.TextFormat.PlainText
    assert dashboard.description.text() == description
    assert dashboard.description.textFormat() == Qt.TextFormat.PlainText


def test_a_refused_update_is_shown_on_the_dashboard(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fresh)
    page = wizard(window, qtbot)
    look_up(page, qtbot, URL)
    previewed(page, qtbot)
    page.trust_box.click()
    qtbot.mouseClick(page.next_button, CLICK)
    qtbot.waitUntil(lambda: page.steps.currentIndex() == ACCOUNT_STEP, timeout=10_000)
    dashboard = window.page["dashboard"]
    assert isinstance(dashboard, DashboardPage)
    qtbot.waitUntil(lambda: dashboard.project.text() == "open-albert", timeout=10_000)
    assert dashboard.update_refused.isHidden()
    fresh.update_manifest("open-albert", 4, refused="it changes the model's shape (hidden size)")
    qtbot.waitUntil(lambda: not dashboard.update_refused.isHidden(), timeout=10_000)
    assert dashboard.update_refused.text() == (
        "The project's latest update was not applied: it changes the model's shape (hidden size)."
    )
    fresh.update_manifest("open-albert", 5)  # a later one that is applied clears it
    qtbot.waitUntil(dashboard.update_refused.isHidden, timeout=10_000)


# ---- the words, without a window -------------------------------------------------------------------


def test_url_problem_lets_project_urls_through() -> None:
    for text in (URL, "http://127.0.0.1:8470", f"{URL}/#key={KEY}", "HTTPS://Coord.Example.org/"):
        assert url_problem(text) is None, text


def test_project_words() -> None:
    assert wording.project_access("moderated", False) == (
        "Members only: the organizers make the accounts; ask them for one"
    )
    assert wording.key_check("pinned").startswith("matches the key pinned")
    assert wording.key_check("something new") == "not verified"
    assert wording.short_key("short") == "short"
    assert wording.short_key(KEY) == f"{KEY[:8]}…{KEY[-6:]}"
    assert wording.project_kind("swarm-of-bees").startswith("swarm-of-bees (a kind")
    assert wording.update_refused_line("  signed by another key.  ") == (
        "The project's latest update was not applied: signed by another key."
    )


def test_manifest_updates_in_the_event_log() -> None:
    applied = Event(1, 0.0, ManifestUpdated("open-albert", 4, True, "new bootstrap peers"))
    refused = Event(2, 0.0, ManifestUpdated("open-albert", 5, False, "the model's shape changed"))
    assert wording.describe_event(applied) == (
        "Project",
        "open-albert: manifest version 4 applied: new bootstrap peers",
    )
    assert wording.describe_event(refused) == (
        "Project",
        "open-albert: manifest version 5 refused: the model's shape changed",
    )


def test_a_server_that_does_not_answer_is_said_once() -> None:
    error = CoordinatorUnreachable(
        "the project at https://x.example does not answer; try again later"
    )
    assert explain(error, "logging in") == (
        "The project's server does not answer. The project at https://x.example does not answer; "
        "try again later."
    )
    assert own_words(error) == "The project at https://x.example does not answer; try again later."
