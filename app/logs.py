"""The app's own log and its crashes, and the "Open logs folder" action.

``AppLog.start`` adds ``app.log`` (rotating, in the user's log folder beside the engine's logs) to the
root logger and installs the crash hooks: an exception no one caught — in a Qt slot, on a thread, on
the bridge's asyncio loop — is written there with its traceback, and a fatal error's stacks go to
``app-crash.log``. Launched from a desktop menu or at login the app has no terminal, so without these
a crash would leave nothing behind.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices

from core.api.logs import CrashLog, app_crash_path, app_log_path, logs_folder, rotating_handler


class AppLog:
    def __init__(self, log_file: Path | None = None, crash_file: Path | None = None) -> None:
        self.log_file = log_file or app_log_path()
        self.crash_file = crash_file or app_crash_path()
        self._handler: logging.Handler | None = None
        self._crashes: CrashLog | None = None

    def start(self) -> AppLog:
        """Log to the file and catch crashes; a log folder that cannot be written leaves the app
        logging to stderr only (it says so there)."""
        root = logging.getLogger()
        try:
            self._handler = rotating_handler(self.log_file, level=logging.INFO)
        except OSError as exc:
            logging.getLogger(__name__).warning(
                "no app log: cannot open %s: %s", self.log_file, exc
            )
        else:
            root.addHandler(self._handler)
        self._crashes = CrashLog(self.crash_file).install()
        return self

    def stop(self) -> None:
        if self._crashes is not None:
            self._crashes.uninstall()
            self._crashes = None
        if self._handler is not None:
            logging.getLogger().removeHandler(self._handler)
            self._handler.close()
            self._handler = None


def open_logs_folder(folder: Path | None = None) -> tuple[bool, Path]:
    """Show the log folder in the desktop's file manager (made first if need be); whether one
    opened, and the folder (to name it when none did)."""
    folder = folder or logs_folder()
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return False, folder
    return open_url(QUrl.fromLocalFile(str(folder))), folder


def open_url(url: QUrl) -> bool:
    """``QDesktopServices.openUrl`` (a separate function so tests can stand in for the desktop)."""
    return QDesktopServices.openUrl(url)
