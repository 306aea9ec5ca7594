"""ToggleSwitch: an on/off switch, a checkable button painted as a track and a knob.

It is a ``QAbstractButton``, so Space toggles it, it takes focus with Tab, screen readers see a
checkable button with a name, and ``toggled`` fires like any other button's.
"""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPen
from PySide6.QtWidgets import QAbstractButton, QSizePolicy, QWidget

from app.theme import ACCENT, BORDER, TEXT


class ToggleSwitch(QAbstractButton):
    def __init__(self, name: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setCheckable(True)
        self.setAccessibleName(name)
        self.setText(name)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)

    def sizeHint(self) -> QSize:
        return QSize(56, 30)

    def paintEvent(self, event: QPaintEvent) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        rect = QRectF(self.rect()).adjusted(2, 2, -2, -2)
        radius = rect.height() / 2
        on = self.isChecked()
        track = QColor(ACCENT if on else "#b9c1bd")
        if not self.isEnabled():
            track.setAlpha(110)
        p.setPen(QPen(QColor(TEXT), 2) if self.hasFocus() else QPen(QColor(BORDER), 1))
        p.setBrush(track)
        p.drawRoundedRect(rect, radius, radius)
        knob = rect.height() - 6
        x = rect.right() - knob - 3 if on else rect.left() + 3
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(QColor("white"))
        p.drawEllipse(QRectF(x, rect.top() + 3, knob, knob))
        p.end()
