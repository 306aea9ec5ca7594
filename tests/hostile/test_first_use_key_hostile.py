"""Joining a project by a link that names no project key, in the app's first run (against the fake
engine): whichever server answers first signs the manifest, and joining would pin its key; over
plain ``http://`` anyone on the way can be that server. The preview says the key could not be
checked, names the key that answered, and Join waits for an explicit "Trust this key"; a plain
``http://`` link gets the louder warning. A link with ``#key=`` joins as before, and one whose key
does not match is refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QLabel
from pytestqt.qtbot import QtBot

from app.pages.first_run import FirstRunPage
from app.window import MainWindow
from core.api.schema import ProjectPreview
from core.api.testing import FakeEngine
from core.api.testing.sample_data import REMOTE_PREVIEW
from tests.app import conftest as app_fixtures
from tests.app.join_support import CLICK, OTHER_KEY, previewed, record_attaches, wizard
from tests.app.join_support import look_up as look_up_only

# the app's fixtures, as tests/app has them: a shown window on a fresh fake engine
app_settings = app_fixtures.app_settings
fresh = app_fixtures.fresh
make_store = app_fixtures.make_store
make_window = app_fixtures.make_window

URL = REMOTE_PREVIEW.url
KEY = REMOTE_PREVIEW.project_key
LAN_URL = "http://192.168.1.20:8470"


def look_up(page: FirstRunPage, qtbot: QtBot, text: str) -> ProjectPreview:
    look_up_only(page, qtbot, text)
    return previewed(page, qtbot)


def shown_text(page: FirstRunPage) -> str:
    """Every visible label of the page, one per line."""
    return "\n".join(label.text() for label in page.findChildren(QLabel) if label.isVisible())


def trust_box(page: FirstRunPage) -> QCheckBox | None:
    boxes = [b for b in page.findChildren(QCheckBox) if "trust this key" in b.text().lower()]
    return boxes[0] if boxes else None


def test_a_link_without_a_key_joins_only_once_the_key_is_trusted(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    requests = record_attaches(fresh)
    page = wizard(make_window(fresh), qtbot)
    look_up(page, qtbot, URL)

    # Join waits: neither the button nor Enter joins a key nobody checked
    assert not page.next_button.isEnabled()
    qtbot.mouseClick(page.next_button, CLICK)
    qtbot.keyClick(page, Qt.Key.Key_Return)
    qtbot.wait(100)
    assert requests == []
    text = shown_text(page)
    assert "could not be checked" in text
    assert KEY in text  # the whole key that answered, to compare with the organizers'
    box = trust_box(page)
    assert box is not None
    assert box.isVisible()
    assert not box.isChecked()

    box.setChecked(True)
    assert page.next_button.isEnabled()
    qtbot.mouseClick(page.next_button, CLICK)
    qtbot.waitUntil(lambda: bool(requests), timeout=10_000)
    assert [(r.manifest, r.pinned_key) for r in requests] == [(URL, KEY)]


def test_the_trust_is_asked_again_for_each_project_looked_up(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    page = wizard(make_window(fresh), qtbot)
    look_up(page, qtbot, URL)
    box = trust_box(page)
    assert box is not None
    box.setChecked(True)
    qtbot.mouseClick(page.back_button, CLICK)
    look_up(page, qtbot, URL)
    assert not box.isChecked()
    assert not page.next_button.isEnabled()


def test_plain_http_without_a_key_gets_the_louder_warning(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    fresh.serve_project(dataclasses.replace(REMOTE_PREVIEW, url=LAN_URL, name="lan-demo"))
    page = wizard(make_window(fresh), qtbot)
    look_up(page, qtbot, LAN_URL)
    assert not page.next_button.isEnabled()
    text = shown_text(page)
    assert "could not be checked" in text
    assert KEY in text
    assert "http://" in text
    assert "not encrypted" in text
    warning = page.project.preview.key_warning
    assert warning.property("level") == "error"  # the louder look; https:// gets "warning"
    box = trust_box(page)
    assert box is not None
    box.setChecked(True)
    assert page.next_button.isEnabled()


def test_a_matching_key_in_the_link_joins_as_before(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    requests = record_attaches(fresh)
    page = wizard(make_window(fresh), qtbot)
    preview = look_up(page, qtbot, f"{URL}/#key={KEY}")
    assert preview.key_source == "url"
    assert "could not be checked" not in shown_text(page)
    box = trust_box(page)
    assert box is None or not box.isVisible()
    assert page.next_button.isEnabled()
    qtbot.mouseClick(page.next_button, CLICK)
    qtbot.waitUntil(lambda: bool(requests), timeout=10_000)
    assert [(r.manifest, r.pinned_key) for r in requests] == [(URL, KEY)]


def test_a_mismatching_key_in_the_link_is_refused(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    requests = record_attaches(fresh)
    page = wizard(make_window(fresh), qtbot)
    page.url_field.edit.setText(f"{URL}/#key={OTHER_KEY}")
    qtbot.mouseClick(page.url_field.button, CLICK)
    message = page.url_field.message
    qtbot.waitUntil(message.isVisible, timeout=10_000)
    assert f"is signed by project key {KEY}, not by {OTHER_KEY}" in message.text()
    assert page.previewing() is None
    assert requests == []
    assert fresh.projects_ == []
