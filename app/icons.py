"""Icons drawn in code: the app's barn, and the state icons of the tray and the state dot.

Drawn with QPainter at the sizes asked for, so there are no image files to ship and they stay sharp
on any screen. The four looks (contributing, waiting, paused, error) differ in colour *and* in the
glyph, so they can be told apart without colour vision.
"""

from __future__ import annotations

from typing import Literal

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPainterPath, QPen, QPixmap, QPolygonF

from app.theme import ACCENT, LOOK_COLOURS

Look = Literal["contributing", "waiting", "paused", "error"]
SIZES = (16, 22, 32, 48, 64, 128)


def look_for(state: str | None, connected: bool) -> Look:
    """The look of an engine state (``EngineState.state``); no engine is an error."""
    if not connected or state is None:
        return "error"
    if state in ("running", "throttled"):
        return "contributing"
    if state in ("waiting", "starting"):
        return "waiting"
    if state == "error":
        return "error"
    return "paused"  # paused, idle


def state_icon(look: Look) -> QIcon:
    icon = QIcon()
    for size in SIZES:
        icon.addPixmap(_state_pixmap(look, size))
    return icon


def app_icon() -> QIcon:
    icon = QIcon()
    for size in SIZES:
        icon.addPixmap(_barn_pixmap(size))
    return icon


def _canvas(size: int) -> tuple[QPixmap, QPainter]:
    pixmap = QPixmap(size, size)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    return pixmap, painter


def _state_pixmap(look: Look, size: int) -> QPixmap:
    pixmap, p = _canvas(size)
    s = float(size)
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(QColor(LOOK_COLOURS[look]))
    p.drawEllipse(QRectF(s * 0.04, s * 0.04, s * 0.92, s * 0.92))
    p.setBrush(QColor("white"))
    white = QPen(QColor("white"), max(1.5, s * 0.1))
    white.setCapStyle(Qt.PenCapStyle.RoundCap)
    if look == "contributing":  # a play triangle: work is going on
        p.drawPolygon(
            QPolygonF(
                [
                    QPointF(s * 0.40, s * 0.28),
                    QPointF(s * 0.40, s * 0.72),
                    QPointF(s * 0.74, s * 0.5),
                ]
            )
        )
    elif look == "paused":  # two bars
        p.drawRect(QRectF(s * 0.33, s * 0.28, s * 0.12, s * 0.44))
        p.drawRect(QRectF(s * 0.55, s * 0.28, s * 0.12, s * 0.44))
    elif look == "waiting":  # clock hands
        p.setPen(white)
        p.drawLine(QPointF(s * 0.5, s * 0.5), QPointF(s * 0.5, s * 0.26))
        p.drawLine(QPointF(s * 0.5, s * 0.5), QPointF(s * 0.69, s * 0.6))
    else:  # an exclamation mark
        p.drawRoundedRect(QRectF(s * 0.44, s * 0.22, s * 0.12, s * 0.38), s * 0.05, s * 0.05)
        p.drawEllipse(QRectF(s * 0.435, s * 0.66, s * 0.13, s * 0.13))
    p.end()
    return pixmap


def _barn_pixmap(size: int) -> QPixmap:
    """A barn with a raised roof: many hands building one thing."""
    pixmap, p = _canvas(size)
    s = float(size)
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(QColor(ACCENT))
    roof = QPainterPath()
    roof.moveTo(s * 0.5, s * 0.06)
    roof.lineTo(s * 0.96, s * 0.42)
    roof.lineTo(s * 0.04, s * 0.42)
    roof.closeSubpath()
    p.drawPath(roof)
    p.drawRect(QRectF(s * 0.14, s * 0.40, s * 0.72, s * 0.54))
    p.setBrush(QColor("white"))
    p.drawRect(QRectF(s * 0.38, s * 0.58, s * 0.24, s * 0.36))  # the door
    p.setPen(QPen(QColor(ACCENT), max(1.0, s * 0.04)))
    p.drawLine(QPointF(s * 0.38, s * 0.58), QPointF(s * 0.62, s * 0.94))
    p.drawLine(QPointF(s * 0.62, s * 0.58), QPointF(s * 0.38, s * 0.94))
    p.end()
    return pixmap
