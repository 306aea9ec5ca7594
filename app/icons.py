"""The app's icon, the tray's icon in its four looks, and the state dot.

- ``app_icon``    the barn from ``resources/icons/`` (PNGs rendered from ``barnraise.svg`` by
  ``packaging/icons.py``; the installers use the same files), for the window and the app.
- ``tray_icon``   that barn with a badge of the engine's state in its corner.
- ``state_icon``  the badge alone, drawn with QPainter at each size: the dashboard's state dot.

The four looks (contributing, waiting, paused, error) differ in colour *and* in the glyph, so they
can be told apart without colour vision.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPen, QPixmap, QPolygonF

from app.theme import LOOK_COLOURS
from core.api.program import resource_path

Look = Literal["contributing", "waiting", "paused", "error"]
SIZES = (16, 22, 32, 48, 64, 128)
"""The sizes the state badge is drawn at."""
APP_SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)
"""The sizes of the app's icon files (``packaging/icons.PNG_SIZES``)."""
TRAY_SIZES = (16, 22, 24, 32, 48, 64)
"""Tray icons are 16-24 pixels at 1x, up to 64 on dense screens."""
BADGE = 0.62
"""The state badge's width, as a share of the tray icon's."""


def icon_file(size: int) -> Path:
    """The app's icon at ``size`` pixels, as the installers ship it."""
    return resource_path(f"icons/barnraise-{size}.png")


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
    """The barn at every size there is a file for (none found: an empty icon, Qt's default)."""
    icon = QIcon()
    for size in APP_SIZES:
        if icon_file(size).is_file():
            icon.addFile(str(icon_file(size)))
    return icon


def tray_icon(look: Look) -> QIcon:
    """The barn with the state's badge in its lower right corner, cut out of the barn by a thin
    transparent ring; without the barn's files, the badge alone at full size."""
    icon = QIcon()
    for size in TRAY_SIZES:
        icon.addPixmap(_tray_pixmap(look, size))
    return icon


def _tray_pixmap(look: Look, size: int) -> QPixmap:
    base = QPixmap(str(icon_file(size)))
    if base.isNull():
        return _state_pixmap(look, size)
    pixmap, p = _canvas(size)
    p.drawPixmap(0, 0, base)
    badge = round(size * BADGE)
    corner = size - badge
    gap = max(1.0, size * 0.06)
    p.setCompositionMode(QPainter.CompositionMode.CompositionMode_Clear)
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(QColor("black"))
    p.drawEllipse(QRectF(corner - gap, corner - gap, badge + 2 * gap, badge + 2 * gap))
    p.setCompositionMode(QPainter.CompositionMode.CompositionMode_SourceOver)
    p.drawPixmap(corner, corner, _state_pixmap(look, badge))
    p.end()
    return pixmap


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
