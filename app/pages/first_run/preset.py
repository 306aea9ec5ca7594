"""PresetStep: step 3 of the first run, how much of this computer Barnraise may use.

A preset sets the scheduler's preferences (``app.presets``), Balanced unless the volunteer picks
another; the step also asks, once, whether Barnraise starts in the tray at login (on unless the
volunteer unticks it, as BOINC does). Nothing starts computing: contributing is the dashboard's
switch, as BOINC starts paused until the user opts in.
"""

from __future__ import annotations

from PySide6.QtWidgets import QButtonGroup, QCheckBox, QLabel, QRadioButton, QVBoxLayout, QWidget

from app.presets import DEFAULT_PRESET, PRESETS
from app.start_at_login import StartAtLogin
from app.widgets.tiles import Card


class PresetStep(QWidget):
    def __init__(
        self, start_at_login: StartAtLogin | None = None, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.start_at_login = start_at_login
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 8, 0, 0)
        box.addWidget(QLabel("How much of this computer may Barnraise use?", wordWrap=True))
        self.buttons: dict[str, QRadioButton] = {}
        # each button sits in its own card, so Qt's automatic exclusivity (same parent) does not
        # apply: one group makes them a single choice
        self.group = QButtonGroup(self)
        for p in PRESETS:
            card = Card()
            button = QRadioButton(p.title)
            button.setToolTip(p.summary)
            summary = QLabel(p.summary, objectName="help", wordWrap=True)
            card.box.addWidget(button)
            card.box.addWidget(summary)
            box.addWidget(card)
            self.buttons[p.key] = button
            self.group.addButton(button)
        self.buttons[DEFAULT_PRESET].setChecked(True)
        self.login_box = QCheckBox("Start Barnraise in the tray when I log in")
        self.login_box.setToolTip(
            "Barnraise then follows your schedule from the moment you log in; change it any time "
            "in the Settings menu"
        )
        if start_at_login is not None:
            why_not = start_at_login.unavailable()
            self.login_box.setChecked(start_at_login.first_run_choice())
            self.login_box.setEnabled(why_not is None)
            if why_not is not None:
                self.login_box.setToolTip(f"Not possible here: {why_not}")
            box.addWidget(self.login_box)
        else:
            self.login_box.hide()
        box.addWidget(
            QLabel(
                "You can change every detail later on the Schedule page. Barnraise starts "
                "paused: turn on Contribute on the dashboard when you are ready.",
                objectName="caption",
                wordWrap=True,
            )
        )
        box.addStretch(1)

    def chosen(self) -> str:
        """The key of the preset chosen."""
        return next(k for k, b in self.buttons.items() if b.isChecked())

    def focus_choice(self) -> None:
        self.buttons[self.chosen()].setFocus()

    def apply_login_choice(self) -> str | None:
        """Register (or not) the start at login as ticked; why that failed, or None."""
        if self.start_at_login is None or not self.login_box.isEnabled():
            return None
        return self.start_at_login.choose(self.login_box.isChecked())
