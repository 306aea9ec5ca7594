"""End to end: the real window and the real engine (started by the app's own supervisor) join a
project by its URL — a real ``CoordinatorService`` on 127.0.0.1 serving its signed manifest.

A link naming another project key is refused (said under the field, which keeps it). The volunteer
then pastes the coordinator's URL with the right key in its fragment, looks it up (the engine
fetches ``/manifest`` and checks the signature), sees the project's own description and the
key verified by the link, joins, signs up at the coordinator (the project is moderated and open to
sign-up) and lands on the dashboard, paused. The engine then holds the project by its URL, with the
key pinned.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.pages.dashboard import DashboardPage
from app.window import MainWindow
from core.coordinator import CoordinatorService
from core.net import Identity
from core.project import load_any_manifest
from tests.app.real_engine import real_window
from tests.support.signed_project import SCRYPT_N, project_text, rewrite

pytestmark = pytest.mark.slow
CLICK = Qt.MouseButton.LeftButton
DESCRIPTION = "Volunteers train a <b>tiny</b> ALBERT here."
T = TypeVar("T")


def moderated_text(key: Identity, coordinator_url: str) -> str:
    """The test project's manifest, moderated, volunteers may sign up, at ``coordinator_url``."""
    text = project_text(key, description=DESCRIPTION)
    for old, new in (
        ('mode = "open"', 'mode = "moderated"\nallow_signup = true'),
        ("[network]\n", f'[network]\ncoordinator_url = "{coordinator_url}"\n'),
    ):
        assert old in text, f"tests/support/signed_project.py no longer says {old!r}"
        text = text.replace(old, new)
    return text


class CoordinatorThread:
    """A coordinator on its own asyncio loop and thread, beside the Qt test's main thread."""

    def __init__(self, folder: Path) -> None:
        self.key = Identity.generate()
        self.path = folder / "project.toml"
        folder.mkdir(parents=True)
        rewrite(self.path, moderated_text(self.key, "http://127.0.0.1:1"))
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-coordinator")
        self.thread.start()
        self.service = self.run(self._make(folder))

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(30)

    async def _make(self, folder: Path) -> CoordinatorService:
        service = CoordinatorService(
            load_any_manifest(self.path), folder / "coordinator.db", self.key, scrypt_n=SCRYPT_N
        )
        await service.start("127.0.0.1", 0)
        return service

    def usernames(self) -> list[str]:
        """The coordinator's accounts (its database is used from its own thread only)."""

        async def names() -> list[str]:
            return [user.name for user in self.service.store.users()]

        return self.run(names())

    def close(self) -> None:
        try:
            self.run(self.service.close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(30)
            self.loop.close()


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[CoordinatorThread]:
    running = CoordinatorThread(tmp_path / "organizer")
    try:
        # the manifest names its coordinator: the port is known now (nothing was served before)
        rewrite(running.path, moderated_text(running.key, running.service.url))
        yield running
    finally:
        running.close()
    assert not running.thread.is_alive()


@pytest.fixture
def window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, qtbot: QtBot) -> Iterator[MainWindow]:
    monkeypatch.setenv("BARNRAISE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    with real_window(qtbot, tmp_path / "app.ini") as window:
        yield window


def test_the_app_joins_a_real_coordinator_by_its_url(
    window: MainWindow, coordinator: CoordinatorThread, qtbot: QtBot
) -> None:
    store, first = window.store, window.first_run
    qtbot.waitUntil(lambda: window.root.currentWidget() is first, timeout=120_000)
    key = str(coordinator.key.peer_id)
    url = coordinator.service.url
    # a link naming another key: the engine refuses it, the field keeps the text
    stranger = f"{url}/#key={Identity.generate().peer_id}"
    first.url_field.edit.setText(stranger)
    qtbot.mouseClick(first.url_field.button, CLICK)
    qtbot.waitUntil(first.url_field.message.isVisible, timeout=60_000)
    assert key in first.url_field.message.text()
    assert first.url_field.edit.text() == stranger
    assert first.previewing() is None
    assert store.projects == []

    first.url_field.edit.setText(f"{url}/#key={key}")
    qtbot.mouseClick(first.url_field.button, CLICK)
    qtbot.waitUntil(
        lambda: first.previewing() is not None or first.url_field.message.isVisible(),
        timeout=60_000,
    )
    assert first.previewing() is not None, first.url_field.message.text()
    card = first.preview_card
    assert card.name.text() == "url-test"
    assert card.description.text() == DESCRIPTION  # the markup shown as typed
    assert card.address.text() == f"{url} · manifest version 1"
    assert card.access.text() == "Members only: log in, or create an account at the project"
    assert card.key.text().endswith(" — matches the key in the link")
    assert card.uses["Model"].text().endswith(" parameters")

    qtbot.mouseClick(first.next_button, CLICK)  # Join
    qtbot.waitUntil(
        lambda: first.steps.currentIndex() == 1 or first.error.isVisible(), timeout=60_000
    )
    assert first.steps.currentIndex() == 1, first.error.text()
    assert store.projects is not None
    (joined,) = store.projects
    assert (joined.name, joined.source_url, joined.project_key) == ("url-test", url, key)
    assert joined.manifest_version == 1

    qtbot.waitUntil(first.login.signup_button.isVisible, timeout=30_000)
    first.login.username.setText("robin")
    first.login.password.setText("a long new password")
    qtbot.mouseClick(first.login.signup_button, CLICK)
    qtbot.waitUntil(
        lambda: first.steps.currentIndex() == 2 or first.login.message.isVisible(),
        timeout=60_000,
    )
    assert first.steps.currentIndex() == 2, first.login.message.text()
    assert "robin" in coordinator.usernames()
    qtbot.mouseClick(first.next_button, CLICK)  # Finish: Balanced
    qtbot.waitUntil(lambda: window.root.currentWidget() is window.main, timeout=60_000)
    page = window.page["dashboard"]
    assert isinstance(page, DashboardPage)
    qtbot.waitUntil(lambda: page.project.text() == "url-test", timeout=30_000)
    assert page.description.text() == DESCRIPTION
    assert not page.switch.isChecked()
