"""The look: a calm light palette, one accent, and a colour for each state the user must tell apart.

Fusion style everywhere (it looks the same on every platform and follows the palette); a short
style sheet for the few custom surfaces (cards, tiles, the navigation, banners), addressed by
object name so that ordinary widgets keep their platform feel.
"""

from __future__ import annotations

from PySide6.QtGui import QColor, QFont, QPalette
from PySide6.QtWidgets import QApplication, QLabel

ACCENT = "#2f7d5b"
"""Barnraise green: the contribute switch, the selected page, the loss curve."""
TEXT = "#1f2328"
MUTED = "#5c6670"
SURFACE = "#ffffff"
BACKGROUND = "#f4f6f5"
BORDER = "#d8dedb"

LOOK_COLOURS = {
    "contributing": "#2f7d5b",
    "waiting": "#c98a0b",
    "paused": "#6b7580",
    "error": "#c0392b",
}
"""The four looks of the tray icon and the state dot."""

STYLE = f"""
QWidget#page {{ background: {BACKGROUND}; }}
QFrame#card, QFrame#tile {{
    background: {SURFACE}; border: 1px solid {BORDER}; border-radius: 8px;
}}
QLabel#tileValue {{ font-size: 17pt; font-weight: 600; color: {TEXT}; }}
QLabel#tileTitle, QLabel#caption, QLabel#help {{ color: {MUTED}; }}
QLabel#pageTitle {{ font-size: 16pt; font-weight: 600; color: {TEXT}; }}
QLabel#stateWord {{ font-size: 15pt; font-weight: 600; }}
QLabel#inlineError {{ color: {LOOK_COLOURS["error"]}; }}
QLabel#freshness {{ color: {MUTED}; }}
QLabel#freshness[stale="true"] {{ color: #8a5a00; font-weight: 600; }}
QListWidget#nav {{
    background: {SURFACE}; border: none; border-right: 1px solid {BORDER}; font-size: 11pt;
    outline: none;
}}
QListWidget#nav::item {{ padding: 10px 14px; border-radius: 6px; margin: 2px 6px; }}
QListWidget#nav::item:selected {{ background: {ACCENT}; color: white; }}
QListWidget#nav::item:focus {{ border: 1px solid {TEXT}; }}
QFrame#banner {{ border-radius: 6px; padding: 2px; }}
QFrame#banner[level="info"] {{ background: #e6f2ec; border: 1px solid #b9dcc9; }}
QFrame#banner[level="warning"] {{ background: #fdf3dc; border: 1px solid #f0d48c; }}
QFrame#banner[level="error"] {{ background: #fbe5e2; border: 1px solid #eeb4ab; }}
QPushButton#primary {{
    background: {ACCENT}; color: white; border: none; border-radius: 6px; padding: 7px 16px;
}}
QPushButton#primary:focus {{ border: 2px solid {TEXT}; }}
QPushButton#primary:disabled {{ background: #9bbfae; }}
"""


def apply_theme(app: QApplication) -> None:
    app.setStyle("Fusion")
    palette = QPalette()
    palette.setColor(QPalette.ColorRole.Window, QColor(BACKGROUND))
    palette.setColor(QPalette.ColorRole.Base, QColor(SURFACE))
    palette.setColor(QPalette.ColorRole.AlternateBase, QColor("#f7f9f8"))
    palette.setColor(QPalette.ColorRole.Text, QColor(TEXT))
    palette.setColor(QPalette.ColorRole.WindowText, QColor(TEXT))
    palette.setColor(QPalette.ColorRole.Button, QColor("#eef1ef"))
    palette.setColor(QPalette.ColorRole.ButtonText, QColor(TEXT))
    palette.setColor(QPalette.ColorRole.Highlight, QColor(ACCENT))
    palette.setColor(QPalette.ColorRole.HighlightedText, QColor("white"))
    palette.setColor(QPalette.ColorRole.ToolTipBase, QColor("#fffef5"))
    palette.setColor(QPalette.ColorRole.ToolTipText, QColor(TEXT))
    palette.setColor(QPalette.ColorRole.PlaceholderText, QColor(MUTED))
    app.setPalette(palette)
    font = QFont(app.font())
    if font.pointSizeF() < 10:
        font.setPointSizeF(10)
    app.setFont(font)
    app.setStyleSheet(STYLE)


def show_inline(label: QLabel, text: str, *, error: bool) -> None:
    """Show ``text`` in ``label``, in the error colour or the plain one, and say it to screen readers."""
    label.setObjectName("inlineError" if error else "")
    label.style().unpolish(label)  # the style sheet follows the new name
    label.style().polish(label)
    label.setText(text)
    label.setAccessibleDescription(text)
    label.show()
