"""``barnraise engine``: the long-running engine that contributes for this user.

    barnraise engine [--headless] [--port PORT]

One per user: a second start names the running one and exits. The control API listens on
127.0.0.1; its URL and token are written to ``engine.json`` in the user's runtime directory (mode
0600), where ``barnraise ctl`` and the desktop app find them. Logs go to stderr and to a rotating
file in the user's log directory. SIGTERM or Ctrl-C stops it within 5 seconds, saving its state.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import logging.handlers
from typing import Any

from core.cli.signals import run_command, stop_on_signals
from core.config.paths import UserDirs
from core.control import EngineDaemon
from core.engine import EngineConfig
from core.engine.config import ENGINE_LOG

log = logging.getLogger(__name__)


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
    folder = dirs.ensure(dirs.logs)
    handler = logging.handlers.RotatingFileHandler(
        folder / ENGINE_LOG, maxBytes=2_000_000, backupCount=3, encoding="utf-8"
    )
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO)
    return handler


async def _run(args: argparse.Namespace) -> int:
    dirs = UserDirs.default()
    handler = _log_to_file(dirs)
    root = logging.getLogger()
    root.addHandler(handler)
    if root.level > logging.INFO:
        root.setLevel(logging.INFO)  # the file gets INFO; stderr keeps the chosen level
        for other in root.handlers:
            if other is not handler:
                other.setLevel(max(other.level, logging.WARNING))
    stop = asyncio.Event()
    stop_on_signals(stop)
    daemon = EngineDaemon(EngineConfig(dirs, headless=args.headless), port=args.port)
    try:
        endpoint = await daemon.start()
        print(f"engine ready at {endpoint.url} (pid {endpoint.pid})", flush=True)
        waiter = asyncio.create_task(daemon.shutdown_requested.wait(), name="engine/shutdown")
        stopper = asyncio.create_task(stop.wait(), name="engine/stop")
        _, pending = await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        log.info("stopping")
    finally:
        await daemon.stop()
        root.removeHandler(handler)
        handler.close()
    print("engine stopped", flush=True)
    return 0


def run(args: argparse.Namespace) -> int:
    return run_command(lambda: _run(args))
