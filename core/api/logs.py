"""The app's log files and the folders it shows, with the helpers that keep every log bounded
(``core.util.process.logfiles``, ``core.util.process.crashes``), named here for the app.

``app.log`` (rotating) gets the app's warnings and its uncaught exceptions, ``app-crash.log`` the
stacks of a fatal error; both sit in the user's log folder, beside the engine's logs, so one
"Open logs folder" shows them all.
"""

from __future__ import annotations

from pathlib import Path

from core.config.paths import UserDirs
from core.util.process.crashes import CrashLog, loop_exception_handler
from core.util.process.logfiles import rotating_handler

APP_LOG = "app.log"
APP_CRASH_LOG = "app-crash.log"

__all__ = [
    "APP_CRASH_LOG",
    "APP_LOG",
    "CrashLog",
    "app_crash_path",
    "app_log_path",
    "logs_folder",
    "loop_exception_handler",
    "rotating_handler",
    "user_folders",
]


def logs_folder(dirs: UserDirs | None = None) -> Path:
    """Where every log of this user's Barnraise is written (the engine's, the app's, the demo's)."""
    return (dirs or UserDirs.default()).logs


def app_log_path(dirs: UserDirs | None = None) -> Path:
    return logs_folder(dirs) / APP_LOG


def app_crash_path(dirs: UserDirs | None = None) -> Path:
    return logs_folder(dirs) / APP_CRASH_LOG


def user_folders(dirs: UserDirs | None = None) -> dict[str, Path]:
    """The folders Barnraise keeps things in, by what they hold (for the About box)."""
    dirs = dirs or UserDirs.default()
    return {"Settings": dirs.config, "Data": dirs.data, "Cache": dirs.cache, "Logs": dirs.logs}
