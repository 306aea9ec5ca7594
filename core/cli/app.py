"""``barnraise app``: open the desktop app (also what ``barnraise`` alone does on a desktop).

    barnraise app [--demo] [--hidden] [--preview]

The app is its own program (``python -P -m app``, PySide6; ``core.util.process.launch`` says how, frozen
too); the engine never imports it, so this command hands over to it: on POSIX the process becomes
the app (exec, nothing left behind), on Windows it runs the app and returns its exit status.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Any

from core.util.process.desktop import display_available
from core.util.process.launch import app_command


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "app",
        help="open the desktop app (the default on a desktop)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--demo", action="store_true", help="also start the local demo swarm and offer it"
    )
    parser.add_argument("--hidden", action="store_true", help="start in the tray")
    parser.add_argument(
        "--preview", action="store_true", help="sample data from a fake engine; nothing runs"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    flags = [f"--{name}" for name in ("demo", "hidden", "preview") if getattr(args, name)]
    return launch(flags)


def launch(flags: list[str]) -> int:
    available, why = display_available(os.environ)
    if not available:
        print(
            f"barnraise: cannot open the app: {why}. On a server, run 'barnraise engine "
            "--headless' and drive it with 'barnraise ctl', or try 'barnraise swarm'.",
            file=sys.stderr,
        )
        return 2
    command = app_command(*flags)
    sys.stdout.flush()
    sys.stderr.flush()
    if os.name == "nt":  # exec on Windows starts a new process and returns at once
        return subprocess.call(command)
    os.execv(command[0], command)
    raise AssertionError("unreachable: execv does not return")  # pragma: no cover
