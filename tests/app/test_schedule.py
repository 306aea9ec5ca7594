"""Schedule page: every engine preference has a control explained in the engine's words, and what the
user edits reaches the engine with the engine's types.

What is checked: a control, tooltip and help label per preference (``contribute`` is the dashboard's);
numbers are sent as the engine's type (float minutes, whole cores), once the edit is finished; a
refused value shows the engine's reason under its control, which goes back to the engine's value;
the time window sends its two ends together; the presets, and "Custom" after a hand change; snooze.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import pytest
from PySide6.QtCore import Qt, QTime
from PySide6.QtWidgets import QAbstractSpinBox, QDoubleSpinBox, QSpinBox, QTimeEdit
from pytestqt.qtbot import QtBot

from app.pages.schedule import SchedulePage
from app.presets import preset
from app.window import MainWindow
from core.api.errors import BadRequest
from core.api.schema import Settings, SettingValue
from core.api.testing import FakeEngine
from core.policy import Preferences

CLICK = Qt.MouseButton.LeftButton
HELP = {name: text for name, text, _ in Preferences.describe()}


def schedule(window: MainWindow, qtbot: QtBot) -> SchedulePage:
    window.show_page("schedule")
    page = window.page["schedule"]
    assert isinstance(page, SchedulePage)
    qtbot.waitUntil(lambda: "idle_minutes" in page.controls, timeout=10_000)
    return page


def record_sends(fake: FakeEngine) -> list[dict[str, SettingValue]]:
    """What the app hands the engine's ``set_settings``, exactly (before any conversion)."""
    sent: list[dict[str, SettingValue]] = []
    real = fake.set_settings

    async def recording(values: Mapping[str, SettingValue]) -> Settings:
        sent.append(dict(values))
        return await real(values)

    fake.set_settings = recording  # type: ignore[method-assign]
    return sent


def settled(page: SchedulePage, fake: FakeEngine, name: str, value: SettingValue) -> bool:
    """The engine holds ``value`` and its answer has reached the page (what a user waits for)."""
    shown = page.store.settings.values.get(name) if page.store.settings else None
    return fake.values[name] == value and shown == value


def type_into(qtbot: QtBot, spin: QAbstractSpinBox, text: str) -> None:
    """Replace the number as a user does, and finish with Enter."""
    spin.setFocus()
    spin.selectAll()
    qtbot.keyClicks(spin, text)
    qtbot.keyClick(spin, Qt.Key.Key_Return)


def test_every_preference_has_a_control_with_the_engines_help(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    page = schedule(make_window(fake), qtbot)
    wanted = sorted(name for name in fake.values if name != "contribute")
    missing = [name for name in wanted if name not in page.controls]
    assert not missing, f"preferences without a control: {missing}"
    wrong_tip = {
        name: page.controls[name].toolTip()
        for name in wanted
        if page.controls[name].toolTip() != HELP[name]
    }
    assert not wrong_tip, f"tooltips that are not the engine's help: {wrong_tip}"
    hidden = [name for name in wanted if not page.controls[name].isVisible()]
    assert not hidden, f"controls not on screen: {hidden}"
    assert "contribute" not in page.controls  # the dashboard's switch, not a schedule control
    for name in wanted:
        if name in ("window_start", "window_end"):
            continue  # one label for the pair: see the next test
        label = page.helps[name]
        assert label.isVisible(), name
        assert label.text().startswith(HELP[name]), f"{name}: {label.text()!r}"


def test_the_time_window_shows_the_engines_help_as_a_label(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    page = schedule(make_window(fake), qtbot)
    for name in ("window_start", "window_end"):
        assert name in page.helps, f"no help label for {name}"
        assert HELP[name] in page.helps[name].text()


def test_idle_minutes_are_sent_as_a_float_when_the_edit_is_finished(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    page = schedule(make_window(fake), qtbot)
    sent = record_sends(fake)
    spin = page.controls["idle_minutes"]
    assert isinstance(spin, QDoubleSpinBox)
    spin.setFocus()
    spin.selectAll()
    qtbot.keyClicks(spin, "7.5")
    assert sent == []  # nothing goes out digit by digit
    qtbot.keyClick(spin, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: settled(page, fake, "idle_minutes", 7.5), timeout=10_000)
    assert sent == [{"idle_minutes": 7.5}]
    assert type(sent[0]["idle_minutes"]) is float
    assert type(fake.values["idle_minutes"]) is float
    assert page.errors["idle_minutes"].isHidden()


def test_leave_cores_free_is_sent_as_a_whole_number(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    page = schedule(make_window(fake), qtbot)
    sent = record_sends(fake)
    spin = page.controls["leave_cores_free"]
    assert isinstance(spin, QSpinBox)
    type_into(qtbot, spin, "3")
    qtbot.waitUntil(lambda: settled(page, fake, "leave_cores_free", 3), timeout=10_000)
    assert sent == [{"leave_cores_free": 3}]
    assert type(sent[0]["leave_cores_free"]) is int
    assert type(fake.values["leave_cores_free"]) is int
    assert page.errors["leave_cores_free"].isHidden()


def test_a_refused_value_says_why_under_its_control_and_goes_back(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    page = schedule(make_window(fake), qtbot)
    fake.fail_next("set_settings", BadRequest("idle_minutes must be at most 120"))
    spin = page.controls["idle_minutes"]
    assert isinstance(spin, QDoubleSpinBox)
    type_into(qtbot, spin, "200")
    error = page.errors["idle_minutes"]
    qtbot.waitUntil(error.isVisible, timeout=10_000)
    assert error.text() == "Idle_minutes must be at most 120."
    assert spin.value() == 3.0  # what the engine holds, not what was typed
    assert fake.values["idle_minutes"] == 3.0
    others = [n for n, label in page.errors.items() if n != "idle_minutes" and label.isVisible()]
    assert not others, f"the reason also shows under {others}"
    assert not page.error.isVisible()
    type_into(qtbot, spin, "4")  # the next change clears the message
    qtbot.waitUntil(lambda: settled(page, fake, "idle_minutes", 4.0), timeout=10_000)
    assert error.isHidden()


def test_the_time_window_sends_both_ends_together(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    page = schedule(make_window(fake), qtbot)
    sent = record_sends(fake)
    start, end = page.controls["window_start"], page.controls["window_end"]
    assert isinstance(start, QTimeEdit)
    assert isinstance(end, QTimeEdit)
    assert not page.window_box.isChecked()
    assert not start.isEnabled()
    qtbot.mouseClick(page.window_box, CLICK)
    qtbot.waitUntil(lambda: settled(page, fake, "window_end", "17:00"), timeout=10_000)
    assert sent == [{"window_start": "09:00", "window_end": "17:00"}]
    assert (fake.values["window_start"], fake.values["window_end"]) == ("09:00", "17:00")
    assert start.isEnabled()
    assert end.isEnabled()

    end.setTime(QTime(7, 30))  # past midnight is allowed
    start.setTime(QTime(22, 0))
    end.editingFinished.emit()
    qtbot.waitUntil(lambda: settled(page, fake, "window_end", "07:30"), timeout=10_000)
    assert sent[-1] == {"window_start": "22:00", "window_end": "07:30"}
    assert fake.values["window_start"] == "22:00"

    qtbot.mouseClick(page.window_box, CLICK)
    qtbot.waitUntil(lambda: settled(page, fake, "window_start", ""), timeout=10_000)
    assert sent[-1] == {"window_start": "", "window_end": ""}
    assert fake.values["window_end"] == ""
    assert not start.isEnabled()
    assert all(set(values) == {"window_start", "window_end"} for values in sent)


def test_presets_apply_their_values_and_a_hand_change_is_custom(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    page = schedule(make_window(fake), qtbot)
    assert page.preset_buttons["balanced"].isChecked()  # the defaults are Balanced
    assert page.preset_state.text() == ""
    maximum = preset("maximum")
    qtbot.mouseClick(page.preset_buttons["maximum"], CLICK)
    qtbot.waitUntil(lambda: settled(page, fake, "cpu_when_in_use", "run"), timeout=10_000)
    assert {k: fake.values[k] for k in maximum.values} == maximum.values
    assert page.preset_buttons["maximum"].isChecked()
    assert not page.preset_buttons["balanced"].isChecked()
    cores = page.controls["leave_cores_free"]
    assert isinstance(cores, QSpinBox)
    assert cores.value() == 0  # the controls show what the preset set

    type_into(qtbot, cores, "2")
    qtbot.waitUntil(lambda: page.preset_state.text() == "Custom: changed by hand", timeout=10_000)
    assert fake.values["leave_cores_free"] == 2
    checked = [k for k, b in page.preset_buttons.items() if b.isChecked()]
    assert checked == []


def test_snooze_one_hour(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    page = schedule(make_window(fake), qtbot)
    qtbot.mouseClick(page.snooze_button, CLICK)
    qtbot.waitUntil(lambda: fake.snoozed_until is not None, timeout=10_000)
    assert fake.snoozed_until == pytest.approx(time.time() + 3600, abs=120)
    qtbot.waitUntil(page.notice.isVisible, timeout=10_000)
    assert page.notice.text().startswith("Snoozed until ")


def test_a_quick_correction_is_not_lost_while_a_change_is_in_flight(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    page = schedule(make_window(fake), qtbot)
    spin = page.controls["idle_minutes"]
    assert isinstance(spin, QDoubleSpinBox)
    # no event loop turn between the two edits: the first change's answer has not arrived yet
    type_into(qtbot, spin, "5")
    type_into(qtbot, spin, "3")
    qtbot.waitUntil(lambda: fake.calls.count("set_settings") >= 1, timeout=10_000)
    qtbot.waitUntil(lambda: not page.store.bridge._pending, timeout=10_000)  # all answered
    assert fake.values["idle_minutes"] == 3.0
    assert spin.value() == 3.0
