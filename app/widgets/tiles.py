"""StatTile and Card: the framed surfaces of the dashboard and the statistics page."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QLabel, QVBoxLayout, QWidget


class Card(QFrame):
    """A white, rounded frame holding a vertical layout."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("card")
        self.box = QVBoxLayout(self)
        self.box.setContentsMargins(16, 14, 16, 14)
        self.box.setSpacing(8)


class StatTile(QFrame):
    """A title, one big value, and a small caption under it."""

    def __init__(self, title: str, explanation: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("tile")
        self.setToolTip(explanation)
        self.setAccessibleName(title)
        box = QVBoxLayout(self)
        box.setContentsMargins(14, 10, 14, 10)
        box.setSpacing(2)
        self.title = QLabel(title, objectName="tileTitle")
        self.value = QLabel("–", objectName="tileValue")
        self.value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.caption = QLabel("", objectName="caption")
        self.caption.setWordWrap(True)
        for label in (self.title, self.value, self.caption):
            box.addWidget(label)

    def set(self, value: str, caption: str = "") -> None:
        self.value.setText(value)
        self.caption.setText(caption)
        self.setAccessibleDescription(f"{value} {caption}".strip())
