"""EngineConfig: how one engine process is set up (folders, timings); the user's choices live in
``Preferences`` and the engine file instead."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.config.paths import UserDirs
from core.util.errors import ConfigError

ENGINE_LOG = "engine.log"


@dataclass(frozen=True)
class EngineConfig:
    dirs: UserDirs
    headless: bool = False
    """No user session: keyboard/mouse idleness does not apply (servers, power users' boxes)."""
    tick_computing: float = 0.1
    """How often conditions are read while training computes: bounds the time to notice the user."""
    tick_resting: float = 1.0
    """... and while it does not (a paused engine must stay quiet)."""
    flush_interval: float = 10.0
    """How often the contribution meter is written to the ledger (and at every epoch)."""
    progress_interval: float = 2.0
    stop_budget: float = 3.5
    """Seconds the peer gets to stop when the engine shuts down (the whole stop must take < 5 s)."""
    swarm_interval: float = 5.0
    """How often the records of demo swarms running on this computer are read (to offer and join
    them, to notice one that stopped or was started again, and to leave their CPU use out of
    "other programs'")."""

    def __post_init__(self) -> None:
        for name in (
            "tick_computing",
            "tick_resting",
            "flush_interval",
            "progress_interval",
            "swarm_interval",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"EngineConfig.{name} must be positive")

    @property
    def settings_file(self) -> Path:
        return self.dirs.config / "engine.toml"

    @property
    def ledger_file(self) -> Path:
        return self.dirs.data / "ledger.sqlite3"

    @property
    def engine_log(self) -> Path:
        """Where ``barnraise engine`` logs (rotated); diagnostics show its last lines."""
        return self.dirs.logs / ENGINE_LOG

    @property
    def lock_file(self) -> Path:
        return self.dirs.runtime / "engine.lock"

    def work_dir(self, project: str) -> Path:
        return self.dirs.cache / "projects" / project

    def manifest_copy(self, project: str) -> Path:
        """The engine's copy of the manifest of a project joined by URL (in the data folder: a
        cache cleaner must not take it)."""
        return self.dirs.data / "projects" / project / "manifest.toml"
