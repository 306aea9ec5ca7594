"""ChildProcess: one peer of the local swarm, a ``barnraise`` command in an OS process of its own.

Each peer runs as if on its own machine: ``barnraise peer|backbone …`` (``core.util.process.launch``: Python's
``-P -m core.cli.main``, or the bundle's program), in its log folder rather than wherever the
swarm was started, detached (``core.util.process.detached``: its own session or process group, so Ctrl-C
in the terminal reaches only the swarm, which then stops each child in order). Its stdout carries
one JSON event per line (``ready``, ``epoch``, ``metrics``), read here; its stderr, its log, is
appended to a file. ``$BARNRAISE_SWARM_LOG_LEVEL`` sets how much the children log (``info`` unless
set), for debugging a swarm.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from pathlib import Path

from core.config.environment import PASSWORD_VARIABLE
from core.util.errors import WireFormatError
from core.util.process.detached import STOP_SIGNAL, start_detached_async
from core.util.process.launch import barnraise_command
from core.worker.events import PeerEvent, from_json

LOG_LEVEL_VARIABLE = "BARNRAISE_SWARM_LOG_LEVEL"
STOP_GRACE = 15.0
"""Seconds a child has to stop once asked, before it is killed."""


class ChildProcess:
    def __init__(self, name: str, proc: asyncio.subprocess.Process) -> None:
        self.name = name
        self.proc = proc

    async def event(self) -> PeerEvent | None:
        """The next peer event on its stdout (None at its end); other lines are skipped."""
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            with contextlib.suppress(ValueError, WireFormatError):
                return from_json(json.loads(line))
        return None

    async def json_line(self) -> dict[str, object] | None:
        """The next JSON object on its stdout (None at its end); other lines are skipped. For
        children whose events are not a trainer's (an expert server's, a DMoE trainer's)."""
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            with contextlib.suppress(ValueError):
                data = json.loads(line)
                if isinstance(data, dict):
                    return data
        return None

    async def stop(self, grace: float = STOP_GRACE) -> bool:
        """Ask it to stop, and kill it if it has not within ``grace`` seconds; False if it had to
        be killed (it could not finish what it does on the way out)."""
        if self.proc.returncode is not None:
            return True
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(STOP_SIGNAL)
        try:
            await asyncio.wait_for(self.proc.wait(), grace)
        except TimeoutError:
            killed = True
            try:
                self.proc.kill()
            except ProcessLookupError:
                killed = False  # it ended by itself just then
            await self.proc.wait()
            return not killed
        return True


async def spawn_command(
    name: str, args: list[str], log_path: Path, *, password: str | None = None
) -> ChildProcess:
    """``barnraise ARGS`` as a child process, its stdout piped, its stderr appended to ``log_path``
    (``password``: handed over in the environment, for moderated projects). It runs in the log's
    folder (made, private, when the log is opened), so paths in ``ARGS`` must be absolute."""
    env = None if password is None else {**os.environ, PASSWORD_VARIABLE: password}
    level = os.environ.get(LOG_LEVEL_VARIABLE, "info")
    command = barnraise_command("--log-level", level, *args)
    proc = await start_detached_async(command, output=log_path, cwd=log_path.parent, env=env)
    return ChildProcess(name, proc)
