"""A folder that appears whole or not at all, and never over someone's files.

Everything is written into a hidden folder beside the target (the same file system), renamed into
place at the end; a failure or Ctrl-C on the way removes it, leaving things as they were. A target
that holds anything is refused before a byte is written, unless the caller may overwrite it: then
the old folder is moved aside, the new one put in its place, and only then is the old one removed
(put back if the new one cannot take its place). An empty target is replaced (a user may well have
made it first).

``FolderRules`` carries what differs between callers: the error they raise and the advice their
users need (a command-line option to name, say).
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from core.util.errors import BarnraiseError
from core.util.files.atomic import fsync_directory


@dataclass(frozen=True)
class FolderRules:
    error: type[BarnraiseError]
    staging_prefix: str
    """Names the hidden folder the work is written in (``<prefix><target>-<random>``)."""
    not_a_folder: str
    """Said after "<target> exists and is not a folder; "."""
    not_empty: str
    """Said after "<target> already exists and is not empty: "."""
    mode: int = 0o777
    """The new folder's permissions (before the umask)."""
    old_prefix: str = ".barnraise-replaced-"


def check_target(folder: Path, rules: FolderRules, *, overwrite: bool = False) -> None:
    """``rules.error`` unless ``folder`` is absent, an empty folder, or a folder to overwrite."""
    try:
        mode = folder.lstat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise rules.error(f"cannot look at {folder}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(mode):
        raise rules.error(f"{folder} exists and is not a folder; {rules.not_a_folder}")
    if overwrite:
        return
    try:
        empty = next(folder.iterdir(), None) is None
    except OSError as exc:
        raise rules.error(f"cannot read the folder {folder}: {exc.strerror or exc}") from None
    if not empty:
        raise rules.error(f"{folder} already exists and is not empty: {rules.not_empty}")


class StagedFolder:
    """``with StagedFolder(target, rules) as staging:`` write into ``staging``; ``commit()`` puts
    it at ``target``. Leaving the block without a commit removes the staging folder."""

    def __init__(self, target: Path, rules: FolderRules, *, overwrite: bool = False) -> None:
        self.target = target
        self.rules = rules
        self.overwrite = overwrite
        self.path = self._sibling(rules.staging_prefix)
        self._committed = False

    def _sibling(self, prefix: str) -> Path:
        return self.target.parent / f"{prefix}{self.target.name}-{secrets.token_hex(4)}"

    def __enter__(self) -> Path:
        check_target(self.target, self.rules, overwrite=self.overwrite)
        try:
            self.target.parent.mkdir(parents=True, exist_ok=True)
            self.path.mkdir(mode=self.rules.mode)
        except OSError as exc:
            raise self.rules.error(
                f"cannot create a folder in {self.target.parent}: {exc.strerror or exc}"
            ) from None
        return self.path

    def commit(self) -> None:
        """Put the written folder at the target (checked once more, just before)."""
        check_target(self.target, self.rules, overwrite=self.overwrite)
        old: Path | None = None
        try:
            if self.target.is_dir() and next(self.target.iterdir(), None) is None:
                self.target.rmdir()
            elif self.target.is_dir():
                old = self._sibling(self.rules.old_prefix)
                os.rename(self.target, old)
            try:
                os.rename(self.path, self.target)
            except OSError:
                if old is not None:
                    os.rename(old, self.target)
                raise
        except OSError as exc:
            raise self.rules.error(
                f"cannot move the new folder into {self.target}: {exc.strerror or exc}"
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
