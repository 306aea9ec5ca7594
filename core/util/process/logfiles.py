"""Log files that stay small: every file Barnraise appends to is bounded, by one of two means.

A file this process writes through ``logging`` is a ``RotatingFileHandler`` (``rotating_handler``):
past ``LOG_MAX_BYTES`` it becomes ``<name>.1`` (the older ones shift to ``.2``, ``.3``) and a new
file begins. A file a child's stdout and stderr are redirected to cannot be rotated that way: the
child holds a descriptor of its own, which follows the file when it is renamed (and Windows refuses
to rename an open file at all). Such a file is rotated when the child starts (``rotate_if_over``,
called by ``core.util.process.detached`` for every child it starts), and the children that run for long
keep it small by logging to a rotating file of their own (``barnraise engine``). A JSON-lines file
of records (``metrics.jsonl``) is rotated between two whole records, so every file stays valid.

Rotated copies are named as ``logging.handlers.RotatingFileHandler`` names them (``engine.log.1`` is
the newest older copy), so one folder reads the same whoever rotated it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import logging.handlers
import os
import stat
from pathlib import Path
from typing import Any

LOG_MAX_BYTES = 2_000_000
"""A log a process writes itself (``engine.log``, ``app.log``): a day or more of a busy engine at the
INFO level, yet small enough to open in any editor and to attach to a bug report."""
LOG_BACKUPS = 3
"""Older copies of such a log: with the current one, about 8 MB at most per log."""
OUTPUT_MAX_BYTES = 1_000_000
"""A child's redirected output (``engine-output.log``, ``demo-swarm.log``, a swarm peer's log),
checked when the child starts: it holds what a crash prints before logging could record it, the
engine's errors, a swarm's epoch lines; the start-up failures the app shows are at its end."""
OUTPUT_BACKUPS = 1
"""One older copy of an output file: the run before, for comparison."""
FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
"""One line per record: time, level, logger, message (as ``barnraise`` writes to stderr)."""


def rotate_if_over(path: Path, max_bytes: int, backups: int) -> bool:
    """Move ``path`` aside when it holds ``max_bytes`` or more: ``path.1`` (older copies shift,
    the one beyond ``backups`` is dropped; with 0 backups the file is removed). Returns whether it
    was moved. A file that cannot be moved (another program holds it open on Windows) is left to
    grow until the next try, with a warning: a log is never worth failing a start for."""
    try:
        if path.stat().st_size < max_bytes:
            return False
    except OSError:  # no file yet, or none we can see: nothing to rotate
        return False
    try:
        if backups <= 0:
            path.unlink()
            return True
        for index in range(backups - 1, 0, -1):
            older = backup_path(path, index)
            if older.exists():
                os.replace(older, backup_path(path, index + 1))
        os.replace(path, backup_path(path, 1))
    except OSError as exc:
        logging.getLogger(__name__).warning("could not rotate %s: %s", path, exc)
        return False
    return True


def backup_path(path: Path, index: int) -> Path:
    """The ``index``-th older copy of ``path`` (1 is the newest)."""
    return path.with_name(f"{path.name}.{index}")


def rotated_files(path: Path, backups: int) -> list[Path]:
    """``path`` and its older copies that exist, oldest first (to read a rotated file whole)."""
    candidates = [backup_path(path, i) for i in range(backups, 0, -1)] + [path]
    return [p for p in candidates if p.is_file()]


JSON_LINES_BACKUPS = 2
"""Older copies of a JSON-lines file of records (``metrics.jsonl.1``, ``.2``)."""


def read_json_lines(path: Path, backups: int = JSON_LINES_BACKUPS) -> list[dict[str, Any]]:
    """Every JSON object in ``path`` and its rotated copies, oldest first; a line that is not
    one (a crash mid-write leaves half a line) is skipped."""
    found: list[dict[str, Any]] = []
    for part in rotated_files(path, backups):
        with part.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                with contextlib.suppress(ValueError):
                    record = json.loads(line)
                    if isinstance(record, dict):
                        found.append(record)
    return found


def rotating_handler(
    path: Path,
    *,
    level: int = logging.INFO,
    max_bytes: int = LOG_MAX_BYTES,
    backups: int = LOG_BACKUPS,
) -> logging.handlers.RotatingFileHandler:
    """A handler writing ``path`` (its folder made private to the user), rotated past ``max_bytes``,
    at ``level``, in ``FORMAT``."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    handler = logging.handlers.RotatingFileHandler(
        path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8"
    )
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.setLevel(level)
    return handler


def stream_is_a_file(stream: object) -> bool:
    """Whether ``stream`` (``sys.stderr``, say) was redirected to a regular file: a launcher's log,
    not a terminal, a pipe or a journal."""
    try:
        fileno = stream.fileno()  # type: ignore[attr-defined]
        return stat.S_ISREG(os.fstat(fileno).st_mode)
    except (AttributeError, OSError, ValueError):  # no descriptor (replaced, closed)
        return False
