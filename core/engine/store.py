"""EngineFile: what the engine remembers between runs, in one TOML file under the config folder.

``[preferences]`` (the scheduler's), ``[control]`` (a pause or snooze the user asked for, the
active project) and ``[[projects]]`` (attached projects). Written atomically (temporary file, then
rename), so a crash mid-write leaves the previous file. A damaged file is never overwritten: the
engine refuses to start and says which file and why, so the user's settings are not lost. A file
that cannot be written (disk full, permissions) is a ``SettingsNotSaved``.
"""

from __future__ import annotations

import contextlib
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.engine.errors import SettingsNotSaved
from core.engine.projects import ProjectSlot
from core.policy import Preferences, PreferencesError
from core.util.errors import ConfigError
from core.util.files.regular_file import FileRefused, read_regular_file
from core.util.files.toml_write import dumps

MAX_FILE_BYTES = 1024 * 1024
"""The settings file is a few kilobytes: a larger one (or a FIFO, a device) is refused, unread."""


@dataclass
class EngineMemory:
    preferences: Preferences = field(default_factory=Preferences)
    user_paused: bool = False
    snoozed_until: float | None = None
    projects: list[ProjectSlot] = field(default_factory=list)
    active: str | None = None


class EngineFile:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> EngineMemory:
        if not self.path.exists():
            return EngineMemory()
        try:
            text = read_regular_file(self.path, limit=MAX_FILE_BYTES).decode("utf-8")
            raw = tomllib.loads(text)
            control = raw.get("control", {})
            snooze = control.get("snoozed_until", 0.0)
            memory = EngineMemory(
                preferences=Preferences.from_dict(raw.get("preferences", {})),
                user_paused=bool(control.get("user_paused", False)),
                snoozed_until=float(snooze) if snooze else None,
                projects=[ProjectSlot.from_table(t) for t in raw.get("projects", [])],
                active=str(control["active"]) if control.get("active") else None,
            )
        except (OSError, FileRefused, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read the engine's settings {self.path}: {exc}") from None
        except (PreferencesError, KeyError, TypeError, ValueError, RecursionError) as exc:
            raise ConfigError(
                f"the engine's settings {self.path} are damaged ({exc}); fix or move the file"
            ) from None
        return memory

    def save(self, memory: EngineMemory) -> None:
        document: dict[str, Any] = {
            "preferences": memory.preferences.to_dict(),
            "control": {
                "user_paused": memory.user_paused,
                "snoozed_until": memory.snoozed_until or 0.0,
                "active": memory.active or "",
            },
            "projects": [slot.to_table() for slot in memory.projects],
        }
        text = "# Barnraise engine settings (written by the engine; change them with 'barnraise ctl')\n"
        text += dumps(document)
        partial = self.path.with_name(f".{self.path.name}.part")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            partial.write_text(text, encoding="utf-8")
            os.replace(partial, self.path)
        except OSError as exc:  # disk full, permissions: the engine's problem, said as such
            with contextlib.suppress(OSError):
                partial.unlink()  # a half-written copy only takes space
            raise SettingsNotSaved(
                f"cannot write the engine's settings {self.path}: {exc}"
            ) from exc
