"""Driving the first run's "join by URL" step in tests: wait for the wizard, look a URL up, read the
preview, and record what the app asked the engine to attach."""

from __future__ import annotations

from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.pages.first_run import FirstRunPage
from app.window import MainWindow
from core.api.schema import AttachRequest, ProjectPreview
from core.api.testing import FakeEngine

CLICK = Qt.MouseButton.LeftButton
OTHER_KEY = "12D3KooWHxyWyq1dWMYk4xjmhMVGyRd3nMTWG3a3mLqq3Rj7cA4v"
"""A project key that is not the sample project's."""


def wizard(window: MainWindow, qtbot: QtBot) -> FirstRunPage:
    page = window.first_run
    qtbot.waitUntil(lambda: window.root.currentWidget() is page, timeout=10_000)
    qtbot.waitUntil(lambda: page.offer_list.count() > 0, timeout=10_000)
    return page


def look_up(page: FirstRunPage, qtbot: QtBot, text: str) -> None:
    page.url_field.edit.setText(text)
    qtbot.mouseClick(page.url_field.button, CLICK)


def previewed(page: FirstRunPage, qtbot: QtBot) -> ProjectPreview:
    qtbot.waitUntil(lambda: page.previewing() is not None, timeout=10_000)
    preview = page.previewing()
    assert preview is not None
    return preview


def record_attaches(engine: FakeEngine) -> list[AttachRequest]:
    """The requests ``engine.attach`` is called with, in order (it answers as before)."""
    requests: list[AttachRequest] = []
    original = engine.attach

    async def attach(request: AttachRequest) -> object:
        requests.append(request)
        return await original(request)

    engine.attach = attach  # type: ignore[method-assign]
    return requests
