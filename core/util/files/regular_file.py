"""Reading a small file that a person named, without letting the name hang or flood the reader.

A path given by a user (a project manifest, say) may be anything: a FIFO, whose plain ``open``
waits for ever for a writer; a device such as ``/dev/zero``, which never ends; a sparse file of
gigabytes. ``read_regular_file`` opens without blocking (``O_NONBLOCK`` where the OS has it;
Windows has no FIFOs to wait on), checks on the open descriptor that it is a regular file of at
most ``limit`` bytes, and reads at most ``limit + 1`` bytes, so a file that grows meanwhile is
refused too. Symbolic links are followed: a link to a regular file is fine, and what it points to
is what gets checked. Errors of the file system (no such file, permissions) leave as ``OSError``;
a file that is not of the kind asked for is a ``FileRefused``. ``open_regular_file`` makes the same
checks for a reader that reads only part of a file (the end of a log, say).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from core.util.errors import BarnraiseError

_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)


class FileRefused(BarnraiseError):
    """The path names something other than a regular file, or one larger than allowed.

    ``reason`` says which in words that fit after the file's name ("is a folder, not a file")."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def open_regular_file(path: Path) -> BinaryIO:
    """``path`` opened for reading in binary, refused (``FileRefused``) unless it is a regular
    file; ``OSError`` if it cannot be opened. Opening never blocks."""
    fd = os.open(path, _FLAGS)
    try:
        kind = _kind(os.fstat(fd).st_mode)
        if kind is not None:
            raise FileRefused(path, f"is {kind}, not a regular file")
        return open(fd, "rb", closefd=True)  # the caller closes it
    except BaseException:
        os.close(fd)
        raise


def read_regular_file(path: Path, *, limit: int) -> bytes:
    """The content of the regular file at ``path``, refused (``FileRefused``) if it is anything
    else or holds more than ``limit`` bytes; ``OSError`` if it cannot be opened or read."""
    with open_regular_file(path) as file:
        size = os.fstat(file.fileno()).st_size
        if size > limit:
            raise FileRefused(path, _too_large(size, limit))
        data = file.read(limit + 1)  # at most one byte more than allowed, whatever fstat said
    if len(data) > limit:  # it grew after fstat, or says 0 bytes as /proc's files do
        raise FileRefused(path, _too_large(None, limit))
    return data


def _kind(mode: int) -> str | None:
    """What a non-regular file is, in words; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def _too_large(size: int | None, limit: int) -> str:
    said = f"{size:,} bytes" if size is not None else "more than that"
    return f"is too large ({said}; the limit is {limit:,} bytes)"
