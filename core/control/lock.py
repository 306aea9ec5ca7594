"""InstanceLock: one engine per user, enforced by an OS file lock.

The lock belongs to the process: the OS drops it when the process dies, however it dies, so a crashed
engine never blocks the next start (a PID file alone could not promise that).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import IO

from core.util.errors import BarnraiseError


class AlreadyRunning(BarnraiseError):
    """Another engine of this user holds the lock."""


class InstanceLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[bytes] | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        handle = self.path.open("a+b")
        try:
            _lock(handle)
        except OSError:
            handle.close()
            raise AlreadyRunning(f"another engine holds {self.path}") from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()).encode())
        handle.flush()
        self._file = handle

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing drops the lock on every platform
            self._file = None


def _lock(handle: IO[bytes]) -> None:
    if sys.platform == "win32":
        import msvcrt  # noqa: PLC0415 - Windows only

        handle.seek(0)
        msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
    else:
        import fcntl  # noqa: PLC0415 - POSIX only

        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
