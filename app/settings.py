"""AppSettings: what the window remembers that the engine need not know (QSettings, an INI file).

Window geometry, the page last shown, what closing the window should do (asked once), and whether
starting at login was asked about (the answer itself is the login item, read back). The file
sits beside the engine's settings in the user's config folder, so ``BARNRAISE_HOME`` moves both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from PySide6.QtCore import QByteArray, QSettings

CloseChoice = Literal["ask", "background", "quit"]


class AppSettings:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._qs = QSettings(str(path), QSettings.Format.IniFormat)

    @property
    def close_choice(self) -> CloseChoice:
        value = self._qs.value("window/close", "ask")
        if value == "background":
            return "background"
        return "quit" if value == "quit" else "ask"

    @close_choice.setter
    def close_choice(self, choice: CloseChoice) -> None:
        self._qs.setValue("window/close", choice)
        self._qs.sync()

    @property
    def login_asked(self) -> bool:
        """Whether the user was asked about starting at login (the answer is the login item)."""
        return str(self._qs.value("login/asked", "false")).lower() == "true"

    @login_asked.setter
    def login_asked(self, asked: bool) -> None:
        self._qs.setValue("login/asked", "true" if asked else "false")
        self._qs.sync()

    @property
    def geometry(self) -> QByteArray | None:
        value = self._qs.value("window/geometry")
        return value if isinstance(value, QByteArray) else None

    @geometry.setter
    def geometry(self, value: QByteArray) -> None:
        self._qs.setValue("window/geometry", value)

    @property
    def last_page(self) -> str:
        return str(self._qs.value("window/page", "dashboard"))

    @last_page.setter
    def last_page(self, key: str) -> None:
        self._qs.setValue("window/page", key)

    def sync(self) -> None:
        self._qs.sync()
