"""Files written whole or not at all: written aside, synced, renamed into place, the rename synced.

Checkpoints and published checkpoints are large and read by others (peers, a web server): a crash
mid-write must never leave a half-written file under the real name, nor let temporaries pile up.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

TEMP_SUFFIX = ".tmp"


def write_atomically(
    target: Path, write: Callable[[BinaryIO], object], *, prefix: str, mode: int | None = None
) -> None:
    """Call ``write`` on a temporary beside ``target``, then move it into place (``mode``: its
    permissions; a temporary is private to its owner otherwise)."""
    fd, temp_name = tempfile.mkstemp(prefix=prefix, suffix=TEMP_SUFFIX, dir=target.parent)
    temp = Path(temp_name)
    try:
        with os.fdopen(fd, "wb") as writer:
            write(writer)
            writer.flush()
            os.fsync(writer.fileno())
        if mode is not None:
            os.chmod(temp, mode)
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_directory(target.parent)


def fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable."""
    # Windows cannot open a directory, and there the rename is as durable as the file system makes it
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_temporaries(folder: Path, prefix: str) -> None:
    """Remove what interrupted writes with ``prefix`` left in ``folder`` (one writer per folder)."""
    for path in folder.glob(f"{prefix}*{TEMP_SUFFIX}"):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def remove_old(path: Path, log: logging.Logger, what: str) -> None:
    """Remove ``path``, an old copy of ``what``: failing to free space is worth a warning, never an
    error for the write that made it old."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as e:
        log.warning("could not remove old %s %s: %s", what, path, e)
