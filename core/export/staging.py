"""The output folder, which appears whole or not at all.

Everything is written into a hidden folder beside the target (the same file system), renamed into
place at the end; a failure or Ctrl-C on the way removes it. A target that holds anything is
refused before a byte is written, unless the caller asked to overwrite it: then the old folder is
moved aside, the new one put in its place, and only then is the old one removed (put back if the
new one cannot take its place).
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
from pathlib import Path
from types import TracebackType

from core.export.errors import ExportError
from core.util.files.atomic import fsync_directory

STAGING_PREFIX = ".barnraise-export-"
OLD_PREFIX = ".barnraise-replaced-"


def check_target(folder: Path, *, overwrite: bool) -> None:
    """``ExportError`` unless ``folder`` is absent, an empty folder, or a folder to overwrite."""
    try:
        mode = folder.lstat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ExportError(f"cannot look at {folder}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(mode):
        raise ExportError(f"{folder} exists and is not a folder; choose another output folder")
    if overwrite:
        return
    try:
        empty = next(folder.iterdir(), None) is None
    except OSError as exc:
        raise ExportError(f"cannot read the folder {folder}: {exc.strerror or exc}") from None
    if not empty:
        raise ExportError(
            f"{folder} already exists and is not empty: choose another output folder, or "
            "overwrite it (--overwrite); nothing was written"
        )


class StagedFolder:
    """``with StagedFolder(target, overwrite=...) as staging:`` write into ``staging``; ``commit()``
    puts it at ``target``. Leaving the block without a commit removes the staging folder."""

    def __init__(self, target: Path, *, overwrite: bool) -> None:
        self.target = target
        self.overwrite = overwrite
        self.path = self._sibling(STAGING_PREFIX)
        self._committed = False

    def _sibling(self, prefix: str) -> Path:
        return self.target.parent / f"{prefix}{self.target.name}-{secrets.token_hex(4)}"

    def __enter__(self) -> Path:
        check_target(self.target, overwrite=self.overwrite)
        try:
            self.target.parent.mkdir(parents=True, exist_ok=True)
            self.path.mkdir()
        except OSError as exc:
            raise ExportError(
                f"cannot create a folder in {self.target.parent}: {exc.strerror or exc}"
            ) from None
        return self.path

    def commit(self) -> None:
        """Put the written folder at the target (checked once more, just before)."""
        check_target(self.target, overwrite=self.overwrite)
        old: Path | None = None
        try:
            if self.target.is_dir() and next(self.target.iterdir(), None) is None:
                self.target.rmdir()
            elif self.target.is_dir():
                old = self._sibling(OLD_PREFIX)
                os.rename(self.target, old)
            try:
                os.rename(self.path, self.target)
            except OSError:
                if old is not None:
                    os.rename(old, self.target)
                raise
        except OSError as exc:
            raise ExportError(
                f"cannot move the export into {self.target}: {exc.strerror or exc}"
            ) from None
        self._committed = True
        fsync_directory(self.target.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if not self._committed:
            shutil.rmtree(self.path, ignore_errors=True)
