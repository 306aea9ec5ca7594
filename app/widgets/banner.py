"""Banner: a message strip at the top of the window (info, warning, error), with an optional action.

Used for what the user should know but need not answer at once: the engine restarted, a background
refresh failed, the engine was stopped ("Start it"). Errors from a control the user just touched are
shown next to that control instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QWidget

Level = Literal["info", "warning", "error"]


class Banner(QFrame):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("banner")
        self.setProperty("level", "info")
        row = QHBoxLayout(self)
        row.setContentsMargins(12, 6, 6, 6)
        self.text = QLabel(wordWrap=True)
        self.text.setTextFormat(Qt.TextFormat.PlainText)  # it may quote a project's name or error
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.action = QPushButton()
        self.action.hide()
        self.close_button = QPushButton("Dismiss")
        self.close_button.setToolTip("Hide this message")
        self.close_button.clicked.connect(self.hide)
        row.addWidget(self.text, 1)
        row.addWidget(self.action)
        row.addWidget(self.close_button)
        self._callback: Callable[[], None] | None = None
        self.action.clicked.connect(self._act)
        self.level: Level = "info"
        self.hide()

    def show_message(
        self,
        level: Level,
        text: str,
        *,
        action: str | None = None,
        on_action: Callable[[], None] | None = None,
        tip: str = "",
        closable: bool = True,
    ) -> None:
        self.level = level
        self.setProperty("level", level)
        self.style().unpolish(self)
        self.style().polish(self)
        self.text.setText(text)
        self.setAccessibleName(f"{level}: {text}")
        self._callback = on_action
        self.action.setVisible(action is not None)
        if action is not None:
            self.action.setText(action)
            self.action.setToolTip(tip or action)
        self.close_button.setVisible(closable)
        self.show()

    def _act(self) -> None:
        if self._callback is not None:
            self._callback()
