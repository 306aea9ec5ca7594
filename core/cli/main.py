"""Entry point of the ``barnraise`` command."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from core import __version__
from core.cli import coordinator, ctl, demo, dht, engine, identity, peer, swarm
from core.util.errors import BarnraiseError

VERSION = __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="barnraise",
        description="Barnraise: train one deep-learning model together, on volunteers' computers.",
    )
    parser.add_argument("--version", action="version", version=f"barnraise {VERSION}")
    parser.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="how much to log to stderr (default: warning)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    identity.register(commands)
    demo.register(commands)
    dht.register(commands)
    peer.register(commands)
    swarm.register(commands)
    engine.register(commands)
    ctl.register(commands)
    coordinator.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
    )
    if args.command is None:
        parser.print_help()
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
