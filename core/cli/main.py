"""Entry point of the ``barnraise`` command.

Only the subcommand being run is imported (the coordinator alone pulls in aiohttp's server, torch
comes with the peers): ``barnraise`` on a desktop hands over to the app without loading any of them,
and ``barnraise ctl status`` answers quickly.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from core import __version__
from core.util.errors import BarnraiseError

VERSION = __version__

COMMANDS = {
    "app": "core.cli.app",
    "identity": "core.cli.identity",
    "demo": "core.cli.demo",
    "dht": "core.cli.dht.command",
    "peer": "core.cli.peer.command",
    "backbone": "core.cli.peer.command",
    "aux": "core.cli.peer.command",
    "experts": "core.cli.experts",
    "swarm": "core.cli.swarm.command",
    "engine": "core.cli.engine",
    "ctl": "core.cli.ctl.command",
    "coordinator": "core.cli.coordinator.command",
    "project": "core.cli.project",
    "export": "core.cli.export",
    "uninstall": "core.cli.uninstall",
    "torch": "core.cli.torch_fetch",
}
"""Each command and the module whose ``register`` adds it (one module may add several)."""
_OPTIONS_WITH_VALUES = frozenset({"--log-level"})


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser with every command, or with ``only`` that one's module (a faster start)."""
    parser = argparse.ArgumentParser(
        prog="barnraise",
        description="Barnraise: train one deep-learning model together, on volunteers' computers. "
        "Without a command it opens the desktop app (when there is a display).",
    )
    parser.add_argument("--version", action="version", version=f"barnraise {VERSION}")
    parser.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="how much to log to stderr (default: warning)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = [COMMANDS[only]] if only in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for name in modules:
        importlib.import_module(name).register(commands)
    return parser


def _command_in(argv: Sequence[str]) -> str | None:
    """The first word that is not an option (or an option's value)."""
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word in _OPTIONS_WITH_VALUES:
            skip = True
        elif not word.startswith("-"):
            return word
    return None


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if not arguments:
        from core.cli.app import launch  # noqa: PLC0415 - the light path to the app
        from core.util.process.desktop import display_available  # noqa: PLC0415

        if display_available(os.environ)[0]:
            return launch([])
    parser = build_parser(_command_in(arguments))
    args = parser.parse_args(arguments)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
    )
    if args.command is None:
        parser.print_help()
        if not arguments:
            print("\nNo display was found, so the desktop app cannot open here.")
        return 0
    try:
        code: int = args.run(args)
    except BarnraiseError as exc:
        print(f"barnraise: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
