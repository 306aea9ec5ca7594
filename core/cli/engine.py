"""``barnraise engine``: the long-running engine that contributes for this user.

    barnraise engine [--headless] [--port PORT]

One per user: a second start names the running one and exits. The control API listens on
127.0.0.1; its URL and token are written to ``engine.json`` in the user's runtime directory (mode
0600), where ``barnraise ctl`` and the desktop app find them. Logs go to stderr and to a rotating
file in the user's log directory (``engine.log``); when stderr is itself a file (the app sends it to
``engine-output.log``) only errors go there, so that file stays small while the engine runs for weeks
(it is rotated only when the engine starts). Uncaught exceptions (any thread, the loop) are logged,
and a fatal error's stacks go to ``engine-crash.log`` (``core.util.process.crashes``). SIGTERM or Ctrl-C
stops it within 5 seconds, saving its state; should the ledger or the settings fail to be written
then, it says what failed and exits with 1.
Threads stuck in blocking calls (a read that never ends) cannot hold it: once stopped, the process
exits within a few seconds whatever they do (``exit_guard``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Any

from core.cli.exit_guard import leave_stuck_threads
from core.cli.signals import run_command, stop_on_signals
from core.config.paths import UserDirs
from core.control import EngineDaemon
from core.engine import EngineConfig
from core.engine.config import ENGINE_LOG
from core.util.process.crashes import CrashLog
from core.util.process.logfiles import rotating_handler, stream_is_a_file

CRASH_LOG = "engine-crash.log"
"""Beside ``engine.log``: the stacks of every thread when the engine dies of a fatal error."""


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "engine",
        help="run the engine in the background (what the app talks to)",
        description=__doc__,
    )
    parser.add_argument(
        "--headless",
        action="store_true",
        help="no user session here: do not wait for keyboard and mouse idleness",
    )
    parser.add_argument("--port", type=int, default=0, help="control API port (default: any free)")
    parser.set_defaults(run=run)


def _log_to_file(dirs: UserDirs) -> logging.Handler:
    return rotating_handler(dirs.ensure(dirs.logs) / ENGINE_LOG, level=logging.INFO)


def _quiet_stderr(root: logging.Logger, handler: logging.Handler) -> None:
    """The file gets INFO; stderr keeps the chosen level (WARNING at least), and only errors when
    stderr is a file: everything else is in the rotating log already."""
    to_file = stream_is_a_file(sys.stderr)
    for other in root.handlers:
        if other is handler:
            continue
        if root.level > logging.INFO:
            other.setLevel(max(other.level, logging.WARNING))
        if to_file and getattr(other, "stream", None) is sys.stderr:
            other.setLevel(max(other.level, logging.ERROR))


async def _run(args: argparse.Namespace) -> int:
    dirs = UserDirs.default()
    handler = _log_to_file(dirs)
    root = logging.getLogger()
    root.addHandler(handler)
    _quiet_stderr(root, handler)
    root.setLevel(min(root.level, logging.INFO))
    crashes = CrashLog(dirs.logs / CRASH_LOG).install()
    crashes.watch(asyncio.get_running_loop())
    stop = asyncio.Event()
    stop_on_signals(stop)
    try:
        config = EngineConfig(dirs, headless=args.headless)
        daemon = await EngineDaemon.open(config, port=args.port)
        print(f"engine ready at {daemon.endpoint.url} (pid {daemon.endpoint.pid})", flush=True)
        await daemon.run(stop)  # ShutdownIncomplete: main prints what failed and exits with 1
    finally:
        crashes.uninstall()
        root.removeHandler(handler)
        handler.close()
    print("engine stopped", flush=True)
    return 0


async def _run_then_leave(args: argparse.Namespace) -> int:
    """``_run``, then an exit that no stuck thread can delay (the engine has stopped by then)."""
    code = 1
    try:
        code = await _run(args)
    finally:
        leave_stuck_threads(code)
    return code


def run(args: argparse.Namespace) -> int:
    return run_command(lambda: _run_then_leave(args))
