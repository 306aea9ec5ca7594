"""Where a running engine listens, and its token: one small private file in the runtime directory.
(Also where its clients keep their own files: the started engine's output, the app's settings.)

The engine writes ``engine.json`` (URL, token, pid, API version) readable only by the user (0600)
when its control server is up, and removes it when it stops. Clients — ``barnraise ctl``, the GUI —
read it to find the engine; whoever can read the file may drive the engine, nobody else.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from core.api.errors import EngineUnavailable
from core.config.paths import UserDirs

ENDPOINT_FILE = "engine.json"
OUTPUT_FILE = "engine-output.log"
APP_SETTINGS_FILE = "app.ini"


def endpoint_path(dirs: UserDirs | None = None) -> Path:
    return (dirs or UserDirs.default()).runtime / ENDPOINT_FILE


def engine_output_path(dirs: UserDirs | None = None) -> Path:
    """Where a launcher (the desktop app) sends the output of an engine it starts: what a crash
    prints before the engine's own log could record it (an import error, a segfault)."""
    return (dirs or UserDirs.default()).logs / OUTPUT_FILE


def app_settings_path(dirs: UserDirs | None = None) -> Path:
    """The desktop app's own settings (window geometry, what closing the window does)."""
    return (dirs or UserDirs.default()).config / APP_SETTINGS_FILE


@dataclass(frozen=True)
class Endpoint:
    url: str
    """``http://127.0.0.1:<port>``"""
    token: str
    pid: int
    api_version: int

    def write(self, path: Path) -> None:
        """Atomically, and private from the first byte (the token must never be world-readable)."""
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        partial = path.with_name(f".{path.name}.{os.getpid()}.part")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(asdict(self), out)
        os.replace(partial, path)

    @classmethod
    def read(cls, path: Path) -> Endpoint:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            return cls(
                url=str(raw["url"]),
                token=str(raw["token"]),
                pid=int(raw["pid"]),
                api_version=int(raw["api_version"]),
            )
        except FileNotFoundError:
            raise EngineUnavailable(
                f"no engine is running (no endpoint file at {path}); start one with "
                "'barnraise engine'"
            ) from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise EngineUnavailable(
                f"the engine's endpoint file {path} is unreadable: {exc}"
            ) from None
