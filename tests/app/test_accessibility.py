"""Accessibility: every control explains itself, the keyboard reaches it, and mnemonics lead somewhere.

For each of the pages (on a volunteer's fake engine), each step of the first-run wizard (on a
fresh one) and the preview of a project looked up by its URL: every visible interactive widget has
a tooltip and takes focus with Tab; pressing Tab from the page's first control visits every enabled
one and comes back round (no widget keeps the focus to itself); and every label with an ``&``
mnemonic has a buddy to send the focus to. Offenders are named.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QLabel,
    QLineEdit,
    QListWidget,
    QRadioButton,
    QTableWidget,
    QTimeEdit,
    QWidget,
)
from pytestqt.qtbot import QtBot

from app.pages.first_run import FirstRunPage
from app.widgets.switch import ToggleSwitch
from app.window import PAGES, MainWindow
from core.api.testing import FakeEngine
from core.api.testing.sample_data import REMOTE_PREVIEW

INTERACTIVE = (
    QAbstractButton,
    QAbstractSpinBox,
    QComboBox,
    QLineEdit,
    QListWidget,
    QRadioButton,
    QTableWidget,
    QTimeEdit,
    ToggleSwitch,
)
MNEMONIC = re.compile(r"(?<!&)&(?!&)\S")
"""An ``&`` that marks the next character as the shortcut (``&&`` is a literal ampersand)."""


def name(widget: QWidget) -> str:
    """Enough to find the widget in the code: its class and its text or accessible name."""
    text = ""
    if isinstance(widget, QAbstractButton):
        text = widget.text()
    text = text or widget.accessibleName() or widget.toolTip()[:40] or widget.objectName()
    return f"{type(widget).__name__}({text!r})"


def interactive(widget: QWidget) -> bool:
    if not isinstance(widget, INTERACTIVE):
        return False
    # a spin box's or a combo box's own line edit is part of it, not a control of its own
    return not isinstance(widget.parentWidget(), QAbstractSpinBox | QComboBox)


def controls(root: QWidget) -> list[QWidget]:
    """The visible interactive widgets under ``root``, in the window's focus order."""
    found = {w for w in root.findChildren(QWidget) if interactive(w) and w.isVisible()}
    ordered: list[QWidget] = []
    widget: QWidget | None = root.window()
    for _ in range(2000):
        widget = widget.nextInFocusChain() if widget is not None else None
        if widget is None:
            break
        if widget in found and widget not in ordered:
            ordered.append(widget)
        if widget is root.window():
            break
    return ordered + [w for w in found if w not in ordered]


def tab_stops(found: list[QWidget]) -> list[QWidget]:
    """The controls Tab should reach: an exclusive group of radio buttons is one stop (its checked
    button; arrow keys move inside it, as on every desktop)."""
    stops = []
    for widget in found:
        group = widget.group() if isinstance(widget, QRadioButton) else None
        if group is not None and group.exclusive() and not widget.isChecked():
            continue
        stops.append(widget)
    return stops


def owner(widget: QWidget | None) -> QWidget | None:
    """The control a focus widget belongs to (a spin box for its line edit, say)."""
    while widget is not None and not interactive(widget):
        widget = widget.parentWidget()
    return widget


def activate(window: MainWindow, qtbot: QtBot) -> None:
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=10_000)


def check_tooltips_and_tab_focus(root: QWidget) -> None:
    found = controls(root)
    assert found, "no controls found: the page did not show"
    no_tip = [name(w) for w in found if not w.toolTip().strip()]
    assert not no_tip, f"controls without a tooltip: {no_tip}"
    stops = tab_stops(found)
    no_tab = [name(w) for w in stops if not w.focusPolicy() & Qt.FocusPolicy.TabFocus]
    assert not no_tab, f"controls Tab cannot reach: {no_tab}"


def check_tab_walk(root: QWidget, qtbot: QtBot) -> None:
    """Tab from the first control: every enabled control is visited and the walk comes back."""
    wanted = [w for w in tab_stops(controls(root)) if w.isEnabled()]
    assert wanted, "no enabled controls found: the page did not show"
    first = wanted[0]
    first.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.waitUntil(lambda: owner(QApplication.focusWidget()) is first, timeout=10_000)
    visited: list[QWidget] = []
    steps = 3 * len(controls(root.window())) + 10
    cycled = False
    for _ in range(steps):
        qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
        now = owner(QApplication.focusWidget())
        if now is first:
            cycled = True
            break
        if now is not None and now not in visited:
            visited.append(now)
    missed = [name(w) for w in wanted[1:] if w not in visited]
    assert not missed, f"Tab from {name(first)} never reaches: {missed}"
    stuck = name(owner(QApplication.focusWidget()) or root)
    assert cycled, f"Tab does not come back round to {name(first)}: it stays in {stuck}"


def check_mnemonics(root: QWidget) -> None:
    orphans = [
        f"QLabel({label.text()!r})"
        for label in root.findChildren(QLabel)
        if MNEMONIC.search(label.text()) and label.buddy() is None
    ]
    assert not orphans, f"labels with a mnemonic but no buddy: {orphans}"


def show(window: MainWindow, key: str, qtbot: QtBot) -> QWidget:
    window.show_page(key)
    page = window.page[key]
    qtbot.waitUntil(page.isVisible, timeout=10_000)
    return page


def ready(window: MainWindow, key: str, qtbot: QtBot) -> QWidget:
    """The page with what it shows once the engine answered (the board, the preferences...)."""
    page = show(window, key, qtbot)
    store = window.store
    waits: dict[str, Callable[[], bool]] = {
        "dashboard": lambda: store.state is not None,
        "schedule": lambda: "idle_minutes" in getattr(page, "controls", {}),
        "statistics": lambda: store.statistics is not None,
        "leaderboard": lambda: store.board.fetched is not None,
        "events": lambda: len(store.events) > 0,
        "projects": lambda: (
            bool(store.projects)
            and all(p.name in store.project_figures for p in store.projects or [])
        ),
    }
    qtbot.waitUntil(waits[key], timeout=10_000)
    return page


PAGE_KEYS = [key for key, _, _ in PAGES]


@pytest.mark.parametrize("key", PAGE_KEYS)
def test_page_controls_have_tooltips_and_take_tab_focus(
    key: str, make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fake)
    page = ready(window, key, qtbot)
    check_tooltips_and_tab_focus(page)
    check_tooltips_and_tab_focus(window.main)  # the navigation (and a banner) too


@pytest.mark.parametrize("key", PAGE_KEYS)
def test_tab_visits_every_control_of_the_page_and_comes_back(
    key: str, make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fake)
    activate(window, qtbot)
    page = ready(window, key, qtbot)
    check_tab_walk(page, qtbot)


def test_mnemonic_labels_have_buddies(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fake)
    for key in PAGE_KEYS:
        ready(window, key, qtbot)
    check_mnemonics(window)


# ---- the first-run wizard ------------------------------------------------------------------------


def wizard_at(step: int, window: MainWindow, qtbot: QtBot) -> FirstRunPage:
    """The wizard on ``step`` (0: projects, 1: account, 2: preset), the demo project attached."""
    page = window.first_run
    qtbot.waitUntil(lambda: window.root.currentWidget() is page, timeout=10_000)
    qtbot.waitUntil(lambda: page.offer_list.count() > 0, timeout=10_000)
    for index in range(1, step + 1):
        page.next_button.click()
        qtbot.waitUntil(lambda: page.steps.currentIndex() == index, timeout=10_000)  # noqa: B023
        qtbot.waitUntil(page.next_button.isEnabled, timeout=10_000)
    return page


@pytest.mark.parametrize("step", [0, 1, 2])
def test_first_run_controls_have_tooltips_and_take_tab_focus(
    step: int, make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fresh)
    page = wizard_at(step, window, qtbot)
    check_tooltips_and_tab_focus(page)


@pytest.mark.parametrize("step", [0, 1, 2])
def test_first_run_tab_visits_every_control_and_comes_back(
    step: int, make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fresh)
    activate(window, qtbot)
    page = wizard_at(step, window, qtbot)
    check_tab_walk(page, qtbot)


@pytest.mark.parametrize("step", [0, 1, 2])
def test_first_run_mnemonic_labels_have_buddies(
    step: int, make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fresh)
    page = wizard_at(step, window, qtbot)
    check_mnemonics(page)


def test_arrow_keys_move_the_preset_choice(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fresh)
    activate(window, qtbot)
    page = wizard_at(2, window, qtbot)
    balanced = page.preset_buttons["balanced"]
    balanced.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.waitUntil(balanced.hasFocus, timeout=10_000)
    qtbot.keyClick(balanced, Qt.Key.Key_Down)
    qtbot.waitUntil(lambda: page.chosen_preset() == "maximum", timeout=10_000)
    assert not balanced.isChecked()


def test_first_run_project_preview_is_accessible(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    """The card a project URL's look-up shows: its controls (Copy key, Back, Join) explain
    themselves and take Tab; the mnemonics lead somewhere."""
    window = make_window(fresh)
    activate(window, qtbot)
    page = wizard_at(0, window, qtbot)
    page.url_field.edit.setText(REMOTE_PREVIEW.url)
    page.url_field.button.click()
    qtbot.waitUntil(lambda: page.previewing() is not None, timeout=10_000)
    check_tooltips_and_tab_focus(page)
    check_tab_walk(page, qtbot)
    check_mnemonics(page)
