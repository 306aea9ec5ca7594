"""Per-user directories, from the platform's conventions or from ``BARNRAISE_HOME``."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import platformdirs

APP_NAME = "barnraise"
HOME_ENV = "BARNRAISE_HOME"


@dataclass(frozen=True)
class UserDirs:
    """The five places Barnraise writes to. Nothing is created until ``ensure`` is called."""

    config: Path
    data: Path
    cache: Path
    runtime: Path
    logs: Path

    @classmethod
    def under(cls, root: Path) -> UserDirs:
        """Everything below one folder; what ``BARNRAISE_HOME`` selects."""
        root = root.expanduser().resolve()
        return cls(
            config=root / "config",
            data=root / "data",
            cache=root / "cache",
            runtime=root / "run",
            logs=root / "logs",
        )

    @classmethod
    def default(cls) -> UserDirs:
        """``BARNRAISE_HOME`` if it is set, else the platform's per-user directories."""
        home = os.environ.get(HOME_ENV)
        if home:
            return cls.under(Path(home))
        dirs = platformdirs.PlatformDirs(APP_NAME, appauthor=False)
        with warnings.catch_warnings():
            # headless servers often lack XDG_RUNTIME_DIR; platformdirs' per-user /tmp fallback is fine
            warnings.simplefilter("ignore")
            runtime = Path(dirs.user_runtime_dir)
        return cls(
            config=Path(dirs.user_config_dir),
            data=Path(dirs.user_data_dir),
            cache=Path(dirs.user_cache_dir),
            runtime=runtime,
            logs=Path(dirs.user_log_dir),
        )

    @property
    def identity_file(self) -> Path:
        """The peer's Ed25519 identity key."""
        return self.data / "identity.key"

    def ensure(self, path: Path) -> Path:
        """Create ``path`` (one of these directories) private to the user, and return it."""
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        return path
