"""``barnraise coordinator``: run a project's coordinator, or manage its accounts.

Run: ``barnraise coordinator --manifest F [--db PATH] [--key PATH] [--host H] [--port P]
[--bootstrap ADDR ...]`` serves accounts, access passes and the leaderboard until Ctrl-C or SIGTERM,
after printing ``coordinator for <project> at <url>, project key <PeerID>``. The database defaults to
``<data dir>/coordinator/<project>.db`` and the project key to ``<project>-key.pem`` beside it
(created on first run; put its PeerID in the manifest's ``access.project_key``).

Manage: ``barnraise coordinator users add|ban|unban|list ... (--db PATH | --manifest F)``. Adding a
name without ``--password-stdin`` allowlists it: an invitation to sign up under that name.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.cli.signals import run_command, stop_on_signals
from core.config.paths import UserDirs
from core.coordinator import (
    DEFAULT_PORT,
    CoordinatorService,
    CoordinatorStore,
    User,
    check_project_key,
)
from core.net.address import PeerAddress
from core.net.errors import AddressError
from core.net.identity import Identity
from core.project import Manifest, load_manifest
from core.util.errors import ConfigError

log = logging.getLogger(__name__)

_LOOPBACK = ("127.0.0.1", "::1", "localhost")


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "coordinator",
        help="run a project's coordinator (accounts, access passes, leaderboard) or manage users",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--manifest", type=Path, metavar="F", help="the project's manifest")
    parser.add_argument("--db", type=Path, metavar="PATH", help="the coordinator's database")
    parser.add_argument(
        "--key", type=Path, metavar="PATH", help="the project key (default: beside the database)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port to listen on ({DEFAULT_PORT})"
    )
    parser.add_argument(
        "--bootstrap",
        nargs="*",
        default=None,
        metavar="ADDR",
        help="peer addresses handed out with passes (default: the manifest's initial_peers)",
    )
    parser.set_defaults(run=run, coordinator_command=None)
    sub = parser.add_subparsers(dest="coordinator_command", metavar="COMMAND")
    users = sub.add_parser("users", help="add, ban, unban or list accounts")
    actions = users.add_subparsers(dest="users_command", metavar="ACTION", required=True)

    add = actions.add_parser("add", help="allowlist a name (an invitation), or create an account")
    add.add_argument("name")
    add.add_argument("--moderator", action="store_true", help="may report contributions")
    add.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the account's password from the first line of standard input",
    )
    ban = actions.add_parser("ban", help="refuse a user's logins and revoke their peers' passes")
    ban.add_argument("name")
    ban.add_argument("--reason", default="", help="shown to the user when they are refused")
    unban = actions.add_parser("unban", help="lift a ban")
    unban.add_argument("name")
    listing = actions.add_parser("list", help="print every account")
    listing.add_argument("--json", action="store_true", help="one JSON array, for scripts")
    for action in (add, ban, unban, listing):
        where = action.add_mutually_exclusive_group(required=True)
        where.add_argument("--db", type=Path, metavar="PATH", help="the coordinator's database")
        where.add_argument(
            "--manifest", type=Path, metavar="F", help="use the default database of this project"
        )
        action.set_defaults(run=run_users)


def default_db(manifest: Manifest) -> Path:
    return UserDirs.default().data / "coordinator" / f"{manifest.project.name}.db"


def run(args: argparse.Namespace) -> int:
    if args.manifest is None:
        raise ConfigError("barnraise coordinator needs --manifest F (the project's manifest)")
    manifest = load_manifest(args.manifest)
    bootstrap = _bootstrap(
        manifest.network.initial_peers if args.bootstrap is None else args.bootstrap
    )
    db: Path = args.db or default_db(manifest)
    key_path: Path = args.key or db.parent / f"{manifest.project.name}-key.pem"
    identity = _project_key(manifest, key_path)
    service = CoordinatorService(manifest, db, identity, bootstrap)
    return run_command(lambda: _serve(service, args.host, args.port))


def _bootstrap(addresses: Sequence[str]) -> list[str]:
    """The addresses as given, once each is known to parse and to name its peer."""
    for address in addresses:
        try:
            parsed = PeerAddress.parse(address)
        except AddressError as exc:
            raise ConfigError(
                f"bootstrap address {address!r} is not a peer address: {exc}"
            ) from None
        if parsed.peer_id is None:
            raise ConfigError(f"bootstrap address {address!r} must name its peer (/p2p/<PeerID>)")
    return list(addresses)


def _project_key(manifest: Manifest, path: Path) -> Identity:
    named = manifest.access.project_key
    if named and not path.exists():
        raise ConfigError(
            f"the manifest names project key {named}, but there is no key file at {path}; "
            "pass --key with the file that holds it"
        )
    existed = path.exists()
    identity = Identity.load_or_create(path)
    if not existed:
        print(f"created a new project key in {path}", file=sys.stderr)
    check_project_key(manifest, identity.peer_id, f"the key in {path}")
    return identity


async def _serve(service: CoordinatorService, host: str, port: int) -> int:
    stop = asyncio.Event()
    stop_on_signals(stop)
    try:
        await service.start(host, port)
        print(
            f"coordinator for {service.project} at {service.url}, "
            f"project key {service.project_key.peer_id}",
            flush=True,
        )
        if host not in _LOOPBACK:
            log.warning(
                "plain HTTP on %s: put the coordinator behind an HTTPS reverse proxy, or passwords "
                "and session tokens cross the network readable",
                host,
            )
        await stop.wait()
    finally:
        await service.close()
    return 0


def run_users(args: argparse.Namespace) -> int:
    db: Path = args.db or default_db(load_manifest(args.manifest))
    if args.users_command != "add" and not db.exists():
        raise ConfigError(f"there is no coordinator database at {db}")
    with CoordinatorStore(db) as store:
        if args.users_command == "add":
            password = _read_password() if args.password_stdin else None
            user = store.add_user(args.name, password, moderator=args.moderator)
            if password is None and not user.has_password:
                print(f"invited {user.name} ({user.role}): they may sign up under this name")
            else:
                print(f"added {user.name} ({user.role}), allowlisted")
        elif args.users_command == "ban":
            user = store.ban(args.name, args.reason[:500])
            print(f"banned {user.name}: its peers are refused within one refresh interval")
        elif args.users_command == "unban":
            print(f"unbanned {store.unban(args.name).name}")
        elif args.json:
            print(json.dumps([user.to_json() for user in store.users()], indent=2))
        else:
            _print_table(store.users())
    return 0


def _read_password() -> str:
    line = sys.stdin.readline()
    password = line.removesuffix("\n").removesuffix("\r")
    if not password:
        raise ConfigError("--password-stdin read no password from standard input")
    return password


def _print_table(users: list[User]) -> None:
    if not users:
        print("no accounts yet")
        return
    width = max(8, *(len(user.name) for user in users))
    print(f"{'username':<{width}}  {'role':<9}  {'status':<11}  created")
    for user in users:
        if user.banned:
            status = "banned"
        elif not user.has_password:
            status = "invited"
        else:
            status = "allowlisted" if user.allowlisted else "signed up"
        created = datetime.datetime.fromtimestamp(user.created, datetime.UTC).strftime("%Y-%m-%d")
        reason = f"  ({user.ban_reason})" if user.banned and user.ban_reason else ""
        print(f"{user.name:<{width}}  {user.role:<9}  {status:<11}  {created}{reason}")
