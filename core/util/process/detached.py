"""Starting a child process detached from this one, the same way on every platform.

A detached child has a session of its own (POSIX) or a process group of its own (Windows): Ctrl-C in
this process's terminal does not reach it, and this process ending does not take it down. Whoever
started it stops it on purpose: ``STOP_SIGNAL`` asks politely (SIGTERM, or CTRL_BREAK_EVENT, the one
console signal Windows can send to another process group), ``kill_detached`` insists, taking down
whatever the child started in its session too. Its stdin is closed (nothing ever types to it).

Windows has no fork and no sessions: there the same is said with creation flags, and a child that
must not open a console window of its own (started by the desktop app) asks for ``no_window``.

``start_detached`` returns a ``subprocess.Popen`` whose output goes to a log file (or nowhere);
``start_detached_async`` returns an asyncio process whose stdout the caller reads on its loop (the
local swarm's peers print JSON events there), its stderr going to the log file. The two exist because
on Windows only asyncio's own pipes can be read by its loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from core.util.process.logfiles import OUTPUT_BACKUPS, OUTPUT_MAX_BYTES, rotate_if_over

STOP_SIGNAL: int = getattr(signal, "CTRL_BREAK_EVENT", signal.SIGTERM)
"""What asks a detached child to stop (it reaches only that child's process group on Windows)."""
NEW_SESSION = os.name != "nt"
"""POSIX: the child starts a session of its own (Windows ignores the keyword; flags say it there)."""


def creation_flags(*, no_window: bool = False) -> int:
    """Windows: a new process group (and, with ``no_window``, no console window); 0 elsewhere."""
    if os.name != "nt":
        return 0  # POSIX refuses any other value
    flags = int(getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0))
    if no_window:
        flags |= int(getattr(subprocess, "CREATE_NO_WINDOW", 0))
    return flags


def start_detached(
    command: Sequence[str],
    *,
    output: Path | None = None,
    header: str | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    no_window: bool = False,
) -> subprocess.Popen[bytes]:
    """Start ``command`` detached; its stdout and stderr are appended to ``output`` (a private
    folder is made for it), after the line ``header`` when one is given, or dropped without
    ``output``. Raises ``OSError`` when it cannot be started (a missing program, a folder that
    cannot be written)."""
    with contextlib.ExitStack() as stack:
        log = subprocess.DEVNULL if output is None else _log_file(stack, output, header)
        return subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            cwd=cwd,
            env=env,
            start_new_session=NEW_SESSION,
            creationflags=creation_flags(no_window=no_window),
        )


async def start_detached_async(
    command: Sequence[str],
    *,
    output: Path | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    limit: int = 1 << 20,
) -> asyncio.subprocess.Process:
    """Start ``command`` detached, its stdout piped to the caller (lines up to ``limit`` bytes), its
    stderr appended to ``output`` (dropped without it). Raises ``OSError`` as ``start_detached``."""
    program, *arguments = command
    with contextlib.ExitStack() as stack:
        log = subprocess.DEVNULL if output is None else _log_file(stack, output, None)
        return await asyncio.create_subprocess_exec(
            program,
            *arguments,
            stdin=subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
            cwd=cwd,
            env=env,
            limit=limit,
            start_new_session=NEW_SESSION,
            creationflags=creation_flags(),
        )


def _log_file(stack: contextlib.ExitStack, path: Path, header: str | None) -> int:
    """``path`` opened for appending until ``stack`` closes (the child keeps its own descriptor);
    first moved aside to ``path.1`` when it has grown past ``OUTPUT_MAX_BYTES`` (``logfiles``: the
    child's descriptor could not follow a rotation later)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    rotate_if_over(path, OUTPUT_MAX_BYTES, OUTPUT_BACKUPS)
    log = stack.enter_context(path.open("ab"))
    if header is not None:
        log.write(f"{header}\n".encode())
        log.flush()  # before the child's first line
    return log.fileno()


def kill_detached(process: subprocess.Popen[bytes]) -> None:
    """Kill a detached child and, on POSIX, everything it started in its session."""
    with contextlib.suppress(ProcessLookupError):
        if os.name != "nt":
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()
