"""``barnraise identity``: this user's PeerID, created on first use."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from core.config.paths import UserDirs
from core.trust.identity import Identity


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "identity",
        help="print this peer's PeerID (creating its key on first use)",
        description="Print the PeerID of this user's identity key, creating the key if it is missing.",
    )
    parser.add_argument(
        "--identity",
        type=Path,
        metavar="PATH",
        help="key file to use (default: identity.key in the user's data directory)",
    )
    parser.add_argument("--show-path", action="store_true", help="also print where the key lives")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    dirs = UserDirs.default()
    path: Path = args.identity or dirs.identity_file
    existed = path.exists()
    identity = Identity.load_or_create(path)
    if not existed:
        print(f"created a new identity key in {path}", file=sys.stderr)
    print(identity.peer_id)
    if args.show_path:
        print(path)
    return 0
