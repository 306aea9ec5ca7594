"""Schedule: every scheduler preference, each with the engine's one-line explanation, and the presets.

A change is sent as soon as the user finishes it (a toggle, leaving a number field, picking from a
list); the engine checks it and answers with the preferences as they now are, which the controls
then show. A refused value gets the engine's reason under its control and the control goes back to
the engine's value, so what is on screen is always what the engine will do.

Preferences this version does not know (from a newer engine) still get a plain control by type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QTime
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QTimeEdit,
    QVBoxLayout,
    QWidget,
)

from app import wording
from app.engine.store import EngineStore
from app.errors import explain
from app.presets import PRESETS, current_preset
from core.api.errors import ApiError
from core.api.schema import Settings, SettingValue, Statistics

WINDOW = ("window_start", "window_end")


@dataclass(frozen=True)
class Spec:
    label: str
    group: str
    kind: str = "number"
    """bool, number, choice"""
    suffix: str = ""
    minimum: float = 0.0
    maximum: float = 1e9
    step: float = 1.0
    decimals: int = 0
    choices: tuple[tuple[str, str], ...] = ()


SPECS: dict[str, Spec] = {
    "gpu_only_when_idle": Spec("Use the &GPU only when I am away", "When", "bool"),
    "idle_minutes": Spec(
        "I am &away after", "When", suffix=" min without input", maximum=240, step=1, decimals=1
    ),
    "cpu_when_in_use": Spec(
        "While I use the computer, CPU &training",
        "When",
        "choice",
        choices=(("run", "runs at full pace"), ("throttle", "slows down"), ("pause", "pauses")),
    ),
    "in_use_cpu_fraction": Spec(
        "&Slowed down to",
        "When",
        suffix=" of the time",
        minimum=0.05,
        maximum=1,
        step=0.05,
        decimals=2,
    ),
    "run_on_battery": Spec("Keep contributing on &battery", "When", "bool"),
    "leave_cores_free": Spec("Leave &free", "How much", suffix=" CPU core(s)", maximum=256),
    "max_other_cpu_percent": Spec(
        "Wait while &other programs use more than", "How much", suffix=" % CPU", maximum=100, step=5
    ),
    "min_free_memory_mb": Spec(
        "Wait while free &memory is below", "How much", suffix=" MB", maximum=1_000_000, step=256
    ),
    "max_gpu_temperature_c": Spec(
        "Wait while the GPU is at least", "How much", suffix=" °C", minimum=30, maximum=150
    ),
    "monthly_network_cap_mb": Spec(
        "Monthly &network allowance",
        "Network",
        suffix=" MB (0: no limit)",
        maximum=10_000_000,
        step=500,
    ),
    "listen_port": Spec(
        "Listen on &port", "Network", suffix=" (0: the project's)", maximum=65535, step=1
    ),
    "offer_relay": Spec("&Relay for volunteers behind routers when reachable", "Network", "bool"),
}
GROUPS = (
    ("When", "When to contribute"),
    ("How much", "How much of the computer"),
    ("Network", "Network"),
    ("Other", "Other preferences"),
)
ON_DASHBOARD = ("contribute",)
"""Shown here as a note only: it is the dashboard's switch."""


class SchedulePage(QWidget):
    def __init__(self, store: EngineStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("page")
        self.store = store
        self.controls: dict[str, QWidget] = {}
        self.errors: dict[str, QLabel] = {}
        self.helps: dict[str, QLabel] = {}
        self._apply: dict[str, Callable[[SettingValue], None]] = {}
        self._built_for: tuple[str, ...] = ()
        self._asked: dict[str, SettingValue] = {}
        """Values sent (or waiting to be) whose answer has not come back yet."""
        self._waiting: dict[str, SettingValue] = {}
        self._waiting_name: str | None = None
        self._in_flight = False

        outer = QVBoxLayout(self)
        outer.setContentsMargins(24, 20, 24, 20)
        title_row = QHBoxLayout()
        title_row.addWidget(QLabel("Schedule", objectName="pageTitle"), 1)
        self.snooze_button = QPushButton("Snooze 1 hour")
        self.snooze_button.setToolTip("Pause for an hour; contribution resumes by itself")
        title_row.addWidget(self.snooze_button)
        outer.addLayout(title_row)
        outer.addWidget(
            QLabel(
                "When Barnraise may use this computer. Changes take effect at once. Turning "
                "contribution on or off is the switch on the Dashboard.",
                objectName="caption",
                wordWrap=True,
            )
        )
        outer.addLayout(self._preset_row())
        self.notice = QLabel("", objectName="caption", wordWrap=True)
        self.notice.hide()
        self.error = QLabel("", objectName="inlineError", wordWrap=True)
        self.error.hide()
        outer.addWidget(self.notice)
        outer.addWidget(self.error)

        scroll = QScrollArea(widgetResizable=True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        self.body = QWidget()
        self.body.setObjectName("page")
        self.body_box = QVBoxLayout(self.body)
        self.body_box.setContentsMargins(0, 8, 8, 8)
        scroll.setWidget(self.body)
        outer.addWidget(scroll, 1)
        self.placeholder = QLabel("Reading the preferences from the engine…", objectName="caption")
        self.body_box.addWidget(self.placeholder)

        self.snooze_button.clicked.connect(self._snooze)
        store.settingsChanged.connect(self.show_settings)
        store.statisticsChanged.connect(self._show_usage)
        if store.settings is not None:
            self.show_settings(store.settings)

    def _preset_row(self) -> QHBoxLayout:
        preset_row = QHBoxLayout()
        preset_row.addWidget(QLabel("Preset:"))
        self.preset_buttons: dict[str, QPushButton] = {}
        for p in PRESETS:
            button = QPushButton(p.title)
            button.setCheckable(True)  # checked: the preferences match it (shown, not a mode)
            button.setToolTip(p.summary)
            self.preset_buttons[p.key] = button
            preset_row.addWidget(button)
            button.clicked.connect(lambda _=False, values=p.values: self._send(dict(values), None))
        self.preset_state = QLabel("", objectName="caption")
        preset_row.addWidget(self.preset_state)
        preset_row.addStretch(1)
        return preset_row

    # ---- building ----------------------------------------------------------------------------------

    def _build(self, settings: Settings) -> None:
        names = tuple(d.name for d in settings.descriptions)
        if names == self._built_for:
            return
        self._built_for = names
        while self.body_box.count():
            item = self.body_box.takeAt(0)
            old = item.widget() if item is not None else None
            if old is not None:
                old.deleteLater()
        self.controls.clear()
        self.errors.clear()
        self.helps.clear()
        self._apply.clear()
        helps = {d.name: d.help for d in settings.descriptions}
        grids: dict[str, QGridLayout] = {}
        for key, title in GROUPS:
            box = QGroupBox(title)
            grid = QGridLayout(box)
            grid.setColumnStretch(1, 1)
            grids[key] = grid
            self.body_box.addWidget(box)
        for d in settings.descriptions:
            if d.name in ON_DASHBOARD or d.name == "window_end":
                continue
            if d.name == "window_start":
                self._add_window(grids["When"], helps)
                continue
            spec = SPECS.get(d.name) or _generic_spec(d.name, d.default)
            whole = isinstance(d.default, int) and not isinstance(d.default, bool)
            self._add_control(grids[spec.group], d.name, spec, helps.get(d.name, ""), whole)
        for grid in grids.values():
            holder = grid.parentWidget()
            if grid.count() == 0 and holder is not None:  # an empty "Other" group
                holder.hide()
        self.body_box.addStretch(1)

    def _row(
        self, grid: QGridLayout, name: str, label: QLabel | None, control: QWidget, help_text: str
    ) -> None:
        row = grid.rowCount()
        if label is not None:
            label.setBuddy(control)
            grid.addWidget(label, row, 0)
        grid.addWidget(control, row, 1 if label is not None else 0, 1, 2 if label is None else 1)
        control.setToolTip(help_text)
        control.setAccessibleDescription(help_text)
        help_label = QLabel(help_text, objectName="help", wordWrap=True)
        error = QLabel("", objectName="inlineError", wordWrap=True)
        error.hide()
        grid.addWidget(help_label, row + 1, 0, 1, 2)
        grid.addWidget(error, row + 2, 0, 1, 2)
        self.controls[name] = control
        self.helps[name] = help_label
        self.errors[name] = error

    def _add_control(
        self, grid: QGridLayout, name: str, spec: Spec, help_text: str, whole: bool
    ) -> None:
        if spec.kind == "bool":
            box = QCheckBox(spec.label)
            box.clicked.connect(lambda on: self._send({name: bool(on)}, name))
            self._row(grid, name, None, box, help_text)
            self._apply[name] = lambda v: box.setChecked(bool(v))
            return
        label = QLabel(spec.label)
        if spec.kind == "choice":
            combo = QComboBox()
            for value, text in spec.choices:
                combo.addItem(text, value)
            combo.activated.connect(lambda _: self._send({name: combo.currentData()}, name))
            self._row(grid, name, label, combo, help_text)
            self._apply[name] = lambda v: combo.setCurrentIndex(max(0, combo.findData(v)))
            return
        if spec.kind == "text":
            line = QLineEdit()
            line.editingFinished.connect(lambda: self._send_if_changed(name, line.text()))
            self._row(grid, name, label, line, help_text)
            self._apply[name] = lambda v: line.setText(str(v))
            return
        spin: QSpinBox | QDoubleSpinBox
        if whole:  # the engine wants a whole number: never send 1.0 for 1
            spin = QSpinBox()
            spin.setRange(int(spec.minimum), int(spec.maximum))
            spin.setSingleStep(int(spec.step))
        else:
            spin = QDoubleSpinBox()
            spin.setDecimals(spec.decimals)
            spin.setRange(spec.minimum, spec.maximum)
            spin.setSingleStep(spec.step)
        spin.setSuffix(spec.suffix)
        spin.setKeyboardTracking(False)  # send the number once it is typed, not each digit
        spin.setAccelerated(True)
        spin.editingFinished.connect(lambda: self._send_if_changed(name, spin.value()))
        self._row(grid, name, label, spin, help_text)
        self._apply[name] = spin.setValue  # type: ignore[assignment]

    def _add_window(self, grid: QGridLayout, helps: dict[str, str]) -> None:
        holder = QWidget()
        row = QHBoxLayout(holder)
        row.setContentsMargins(0, 0, 0, 0)
        self.window_box = QCheckBox("Only &between")
        self.window_start = QTimeEdit(displayFormat="HH:mm")
        self.window_end = QTimeEdit(displayFormat="HH:mm")
        self.window_box.setToolTip("Contribute only inside a daily time window")
        self.window_start.setToolTip(helps.get("window_start", "Daily start time"))
        self.window_end.setToolTip(helps.get("window_end", "Daily end time"))
        self.window_start.setAccessibleName("Window start")
        self.window_end.setAccessibleName("Window end")
        row.addWidget(self.window_box)
        row.addWidget(self.window_start)
        row.addWidget(QLabel("and"))
        row.addWidget(self.window_end)
        row.addStretch(1)
        text = (
            " ".join(helps[name] for name in ("window_start", "window_end") if helps.get(name))
            or "Daily hours when Barnraise may contribute."
        )
        self._row(grid, "window_start", None, holder, text)
        holder.setToolTip(text)
        self.controls["window_end"] = self.window_end
        self.controls["window_start"] = self.window_start
        self.errors["window_end"] = self.errors["window_start"]
        self.helps["window_end"] = self.helps["window_start"]  # one label explains the pair
        self.window_box.clicked.connect(self._send_window)
        self.window_start.editingFinished.connect(self._send_window)
        self.window_end.editingFinished.connect(self._send_window)

    # ---- showing -----------------------------------------------------------------------------------

    def show_settings(self, settings: Settings) -> None:
        self._build(settings)
        values = settings.values
        for name, apply in self._apply.items():
            if name in values and name not in self._waiting:  # a newer value is on its way
                widget = self.controls[name]
                widget.blockSignals(True)
                apply(values[name])
                widget.blockSignals(False)
        if hasattr(self, "window_box"):
            start, end = str(values.get("window_start", "")), str(values.get("window_end", ""))
            for widget in (self.window_box, self.window_start, self.window_end):
                widget.blockSignals(True)
            self.window_box.setChecked(bool(start))
            self.window_start.setTime(_time(start or "09:00"))
            self.window_end.setTime(_time(end or "17:00"))
            self.window_start.setEnabled(bool(start))
            self.window_end.setEnabled(bool(start))
            for widget in (self.window_box, self.window_start, self.window_end):
                widget.blockSignals(False)
        if "in_use_cpu_fraction" in self.controls:
            self.controls["in_use_cpu_fraction"].setEnabled(
                values.get("cpu_when_in_use") == "throttle"
            )
        matched = current_preset(values)
        for key, button in self.preset_buttons.items():
            button.setChecked(matched is not None and matched.key == key)
        self.preset_state.setText("" if matched else "Custom: changed by hand")
        if self.store.statistics is not None:
            self._show_usage(self.store.statistics)

    def _show_usage(self, statistics: Statistics) -> None:
        label = self.helps.get("monthly_network_cap_mb")
        if label is not None and self.store.settings is not None:
            base = next(
                (
                    d.help
                    for d in self.store.settings.descriptions
                    if d.name == "monthly_network_cap_mb"
                ),
                "",
            )
            label.setText(f"{base} Used this month: {wording.data_size(statistics.month_bytes)}.")

    # ---- sending -----------------------------------------------------------------------------------

    def _current(self, name: str) -> SettingValue | None:
        """What the engine will hold once the changes sent so far are in: the last value asked
        for, else the engine's."""
        if name in self._asked:
            return self._asked[name]
        return self.store.settings.values.get(name) if self.store.settings else None

    def _send_if_changed(self, name: str, value: SettingValue) -> None:
        if value != self._current(name):
            self._send({name: value}, name)

    def _send_window(self) -> None:
        if self.window_box.isChecked():
            start = self.window_start.time().toString("HH:mm")
            end = self.window_end.time().toString("HH:mm")
        else:
            start = end = ""
        self.window_start.setEnabled(self.window_box.isChecked())
        self.window_end.setEnabled(self.window_box.isChecked())
        if (self._current("window_start"), self._current("window_end")) != (start, end):
            self._send({"window_start": start, "window_end": end}, "window_start")

    def _send(self, values: dict[str, SettingValue], name: str | None) -> None:
        """One change at a time, in order: a change made while another is on its way waits for
        it (merged with any other waiting one), so the last thing the user did is what stays."""
        for label in (*self.errors.values(), self.error, self.notice):
            label.hide()
        self._asked.update(values)
        if self._in_flight:
            self._waiting.update(values)
            self._waiting_name = name
            return
        self._in_flight = True
        call = self.store.change_settings(values)
        call.failed.connect(lambda error: self._refused(error, name, values))
        call.finished.connect(self._sent)

    def _sent(self) -> None:
        self._in_flight = False
        if self._waiting:
            values, self._waiting = self._waiting, {}
            self._send(values, self._waiting_name)
        elif self.store.settings is not None:
            self._asked.clear()  # everything asked is answered: the engine's values rule again
            self.show_settings(self.store.settings)

    def _refused(
        self, error: ApiError, name: str | None, values: dict[str, SettingValue] | None = None
    ) -> None:
        for refused in values or {}:
            self._asked.pop(refused, None)
        label = self.errors.get(name) if name else None
        text = explain(error, "changing the preference")
        if label is None:
            self.error.setText(text)
            self.error.show()
        else:
            label.setText(text)
            label.show()
        if self.store.settings is not None:
            self.show_settings(self.store.settings)  # back to what the engine holds

    def _snooze(self) -> None:
        self.error.hide()
        call = self.store.snooze(60)
        call.succeeded.connect(lambda state: self._say(state.reason))
        call.failed.connect(lambda error: self._refused(error, None))

    def _say(self, text: str) -> None:
        self.notice.setText(text)
        self.notice.show()


def _generic_spec(name: str, default: SettingValue) -> Spec:
    label = name.replace("_", " ").capitalize()
    if isinstance(default, bool):
        return Spec(label, "Other", "bool")
    if isinstance(default, int):
        return Spec(label, "Other")
    if isinstance(default, float):
        return Spec(label, "Other", decimals=2, step=0.5)
    return Spec(label, "Other", "text")


def _time(text: str) -> QTime:
    parsed = QTime.fromString(text, "HH:mm")
    return parsed if parsed.isValid() else QTime(9, 0)
