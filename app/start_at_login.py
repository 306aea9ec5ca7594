"""StartAtLogin: the "Start Barnraise when I log in" setting, which is the login item itself.

Nothing is remembered beside the platform's login item (``core.api.login_item``): whether the setting
is on is read back from it each time it is shown, so what the user sees is what happens at the next
login, whoever changed it (the app, ``barnraise uninstall``, the desktop's own startup settings). The
app only remembers whether it asked (the first run asks once, on by default, as BOINC does).
"""

from __future__ import annotations

from collections.abc import Callable

from app.settings import AppSettings
from core.api.login_item import LoginItem, LoginItemError, login_command, login_item


class StartAtLogin:
    def __init__(
        self,
        settings: AppSettings,
        item: LoginItem | None = None,
        command: Callable[[], list[str]] = login_command,
    ) -> None:
        self.settings = settings
        self.item = item or login_item()
        self._command = command

    def unavailable(self) -> str | None:
        """Why Barnraise cannot start at login here (no installed program to register), or None."""
        try:
            self._command()
        except LoginItemError as exc:
            return str(exc)
        return None

    def enabled(self) -> bool:
        """Whether the platform will start Barnraise at the next login (read back)."""
        try:
            return self.item.read() is not None
        except LoginItemError:
            return False

    def first_run_choice(self) -> bool:
        """What the first run's box shows: on when never asked (and possible), else the truth."""
        if not self.settings.login_asked:
            return self.unavailable() is None
        return self.enabled()

    def choose(self, on: bool) -> str | None:
        """Turn it on or off; None when done, else what went wrong (in words)."""
        self.settings.login_asked = True
        try:
            if on:
                self.item.write(self._command())
                if self.item.read() is None:
                    return f"it was written to {self.item.where} but does not read back"
            else:
                self.item.remove()
        except LoginItemError as exc:
            return str(exc)
        return None
