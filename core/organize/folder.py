"""A new project folder that appears whole or not at all, and never over someone's files.

Everything is written into a hidden folder beside the target (same file system), which is renamed
into place at the end; a failure or Ctrl-C on the way removes it, leaving things as they were. A
target that exists and holds anything is refused before a byte is written; an empty one is
replaced (an organizer may well have made it first).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
from pathlib import Path
from types import TracebackType

from core.util.errors import ConfigError
from core.util.files.atomic import fsync_directory

STAGING_PREFIX = ".barnraise-new-"


def check_target(folder: Path) -> None:
    """``ConfigError`` unless ``folder`` is absent or an empty folder."""
    try:
        mode = folder.lstat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ConfigError(f"cannot look at {folder}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(mode):
        raise ConfigError(
            f"{folder} exists and is not a folder; choose another --dir (nothing was written)"
        )
    try:
        empty = next(folder.iterdir(), None) is None
    except OSError as exc:
        raise ConfigError(f"cannot read the folder {folder}: {exc.strerror or exc}") from None
    if not empty:
        raise ConfigError(
            f"{folder} already exists and is not empty: choose another --dir, or move its files "
            "away first (nothing was written, nothing there was touched)"
        )


class StagedFolder:
    """``with StagedFolder(target) as staging:`` write into ``staging``; ``commit()`` moves it to
    ``target``. Leaving the block without a commit removes the staging folder."""

    def __init__(self, target: Path) -> None:
        self.target = target
        self.path = target.parent / f"{STAGING_PREFIX}{target.name}-{secrets.token_hex(4)}"
        self._committed = False

    def __enter__(self) -> Path:
        check_target(self.target)
        try:
            self.target.parent.mkdir(parents=True, exist_ok=True)
            self.path.mkdir(mode=0o750)
        except OSError as exc:
            raise ConfigError(
                f"cannot create a folder in {self.target.parent}: {exc.strerror or exc}"
            ) from None
        return self.path

    def commit(self) -> None:
        """Move the written folder into place (checking the target once more, just before)."""
        check_target(self.target)
        with contextlib.suppress(FileNotFoundError):
            self.target.rmdir()  # empty: checked above
        try:
            os.rename(self.path, self.target)
        except OSError as exc:
            raise ConfigError(
                f"cannot move the new project into {self.target}: {exc.strerror or exc}"
            ) from None
        self._committed = True
        fsync_directory(self.target.parent)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if not self._committed:
            shutil.rmtree(self.path, ignore_errors=True)
