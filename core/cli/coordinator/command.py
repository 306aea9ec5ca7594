"""``barnraise coordinator``: run a project's coordinator, or manage its accounts.

Run: ``barnraise coordinator --manifest F [--db PATH] [--key PATH] [--host H] [--port P]
[--bootstrap ADDR ...] [--data DIR]`` serves accounts, access passes and the leaderboard until Ctrl-C
or SIGTERM, after printing ``coordinator for <project> at <url>, project key <PeerID>``. The database
defaults to ``<data dir>/coordinator/<project>.db`` and the project key to ``<project>-key.pem``
beside it (created on first run; put its PeerID in the manifest's ``access.project_key``).
``--data DIR`` also serves the files under DIR (the project's shards and tokenizer: public files
only) at ``<public URL>/data/<path>``, read-only, with byte ranges.

HTTPS: ``--tls-cert FILE --tls-key FILE`` serves it directly (both files checked before listening);
behind a reverse proxy that does, ``--trusted-proxy CIDR ...`` names the proxies whose
``X-Forwarded-For`` gives the client address the rate limits count, and ``--public-url URL`` the
address volunteers use.

Manage: ``barnraise coordinator users add|ban|unban|list ... (--db PATH | --manifest F)``. Adding a
name without ``--password-stdin`` allowlists it: an invitation to sign up under that name.

Evidence: ``barnraise coordinator reports (--db PATH | --manifest F) [--json]`` lists the peers that
members accused (signed evidence the backbone reported), with their user, how many distinct
accounts accused them and of what; ``reports ban USER-OR-PEER [--reason R]`` bans the user (the
account that proved the peer's key), whose peers are then refused within one refresh interval.

Rollback: ``barnraise coordinator rollback --to-epoch N [--reason TEXT] [--checkpoints DIR]
--manifest F [--db PATH] [--key PATH]`` signs an order with the project key and stores it; every
peer reads it within one refresh interval, loads the checkpoint of epoch N and trains on, epochs
numbered on. ``rollback --list`` prints the orders issued.

Audit: ``barnraise coordinator audit --metrics FILE (--db PATH | --manifest F)`` compares what the
coordinator credited with the backbone's records (``audit``).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.cli.coordinator.audit import register_audit
from core.cli.signals import run_command, stop_on_signals
from core.config.paths import UserDirs
from core.coordinator import (
    DEFAULT_PORT,
    CoordinatorService,
    CoordinatorStore,
    User,
    check_project_key,
)
from core.coordinator.data_files import PREFIX as DATA_PREFIX
from core.coordinator.data_files import check_data_folder
from core.coordinator.reports.evidence_records import Accused
from core.coordinator.reports.rollback import StoredOrder
from core.coordinator.tls import ServerTls, server_tls_context
from core.modes import active_modes
from core.net.errors import AddressError
from core.net.host.address import PeerAddress
from core.project import AnyManifest, Manifest, load_any_manifest
from core.trust.errors import PeerIdError
from core.trust.identity import Identity
from core.trust.peer_id import PeerID
from core.trust.rollback import order_to_text, sign_order
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
    parser.add_argument(
        "--data",
        type=Path,
        metavar="DIR",
        help="also serve the files under DIR (public ones only: shards, tokenizer) at /data/",
    )
    _register_https(parser)
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
    _register_reports(sub)
    _register_rollback(sub)
    register_audit(sub, default_db)


def _register_https(parser: argparse.ArgumentParser) -> None:
    https = parser.add_argument_group(
        "HTTPS",
        "serve HTTPS itself (--tls-cert and --tls-key), or plain HTTP behind a reverse proxy "
        "that does (--trusted-proxy)",
    )
    https.add_argument(
        "--tls-cert",
        type=Path,
        metavar="FILE",
        help="the server's certificate, then its chain, in PEM (certbot's fullchain.pem)",
    )
    https.add_argument(
        "--tls-key", type=Path, metavar="FILE", help="its private key in PEM, unencrypted"
    )
    https.add_argument(
        "--public-url",
        metavar="URL",
        help="where volunteers reach this coordinator, e.g. https://coord.example.org "
        "(behind a proxy, the proxy's); the project URL the page shows (default: the "
        "listening address)",
    )
    https.add_argument(
        "--trusted-proxy",
        nargs="+",
        action="extend",
        default=[],
        metavar="CIDR",
        help="reverse proxies (address or network) whose X-Forwarded-For header names the "
        "client that the login and sign-up limits count; from anyone else it is ignored",
    )


def default_db(manifest: AnyManifest) -> Path:
    return UserDirs.default().data / "coordinator" / f"{manifest.project.name}.db"


def run(args: argparse.Namespace) -> int:
    if args.manifest is None:
        raise ConfigError("barnraise coordinator needs --manifest F (the project's manifest)")
    manifest = load_any_manifest(args.manifest)
    bootstrap = _bootstrap(
        manifest.network.initial_peers if args.bootstrap is None else args.bootstrap
    )
    db: Path = args.db or default_db(manifest)
    key_path: Path = args.key or db.parent / f"{manifest.project.name}-key.pem"
    tls = _tls(args.tls_cert, args.tls_key)  # before a first run makes the project key
    if args.data is not None:  # the key must never be downloadable (the service checks the db)
        check_data_folder(args.data, private=(key_path,))
    identity = _project_key(manifest, key_path)
    service = CoordinatorService(
        manifest,
        db,
        identity,
        bootstrap,
        public_url=args.public_url,
        trusted_proxies=args.trusted_proxy,
        data_dir=args.data,
    )
    return run_command(lambda: _serve(service, args.host, args.port, tls))


def _tls(cert: Path | None, key: Path | None) -> ServerTls | None:
    """The server TLS context, checked before anything listens; None for plain HTTP."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        given, missing = ("--tls-cert", "--tls-key") if key is None else ("--tls-key", "--tls-cert")
        raise ConfigError(
            f"{given} needs {missing} too: HTTPS takes the certificate file and its key file"
        )
    return server_tls_context(cert, key)


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


def _project_key(manifest: AnyManifest, path: Path) -> Identity:
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


async def _serve(service: CoordinatorService, host: str, port: int, tls: ServerTls | None) -> int:
    stop = asyncio.Event()
    stop_on_signals(stop)
    try:
        await service.start(host, port, ssl_context=None if tls is None else tls.context)
        print(
            f"coordinator for {service.project} at {service.url}, "
            f"project key {service.project_key.peer_id}",
            flush=True,
        )
        if tls is not None:
            log.info(
                "serving HTTPS with the certificate for %s (expires %s)",
                ", ".join(tls.names) or "no subject alternative names",
                tls.expires.strftime("%Y-%m-%d"),
            )
        if service.public_url != service.url:
            log.info("public URL: %s", service.public_url)
        if service.data is not None:
            log.info("serving %s at %s%s", service.data.root, service.public_url, DATA_PREFIX)
        if host not in _LOOPBACK and tls is None and not service.proxies:
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
    db: Path = args.db or default_db(load_any_manifest(args.manifest))
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


def _register_reports(sub: Any) -> None:
    reports = sub.add_parser(
        "reports", help="list the evidence members reported against peers, or ban one"
    )
    reports.add_argument("--json", action="store_true", help="one JSON array, for scripts")
    _where(reports)
    reports.set_defaults(run=run_reports, reports_command=None)
    actions = reports.add_subparsers(dest="reports_command", metavar="ACTION")
    ban = actions.add_parser("ban", help="ban the user of an accused peer (or a user by name)")
    ban.add_argument("target", metavar="USER-OR-PEER", help="a username, or an accused PeerID")
    ban.add_argument("--reason", default="", help="shown to the user when they are refused")
    _where(ban)


def _where(parser: argparse.ArgumentParser) -> None:
    """``--db`` / ``--manifest`` (one is needed), without defaults: so that either level of
    ``reports [...] ban [...]`` may take them, and the other's default does not overwrite them."""
    default = argparse.SUPPRESS
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--db", type=Path, metavar="PATH", default=default, help="the coordinator's database"
    )
    where.add_argument(
        "--manifest",
        type=Path,
        metavar="F",
        default=default,
        help="use the default database of this project",
    )


def run_reports(args: argparse.Namespace) -> int:
    db: Path | None = getattr(args, "db", None)
    manifest: Path | None = getattr(args, "manifest", None)
    if db is None:
        if manifest is None:
            raise ConfigError("barnraise coordinator reports needs --db PATH or --manifest F")
        db = default_db(load_any_manifest(manifest))
    if not db.exists():
        raise ConfigError(f"there is no coordinator database at {db}")
    with CoordinatorStore(db) as store:
        if args.reports_command == "ban":
            _ban(store, args.target, args.reason[:500])
        elif args.json:
            print(json.dumps([a.to_json() for a in store.evidence.accused()], indent=2))
        else:
            _print_accused(store.evidence.accused())
    return 0


def _ban(store: CoordinatorStore, target: str, reason: str) -> None:
    """Ban the account that proved ``target``'s key if it is a PeerID, else the user it names."""
    try:
        peer: PeerID | None = PeerID.from_string(target)
    except PeerIdError:
        peer = None
    if peer is None:
        user = store.ban(target, reason)
        print(f"banned {user.name}: its peers are refused within one refresh interval")
        return
    key = store.peer_keys.owner(str(peer))
    owner = None if key is None else store.accounts.get(key)
    if owner is None:
        raise ConfigError(
            f"no account here proved it holds the key of peer {peer}: it never had a pass from "
            "this coordinator, so there is nobody to ban (a moderated project refuses it anyway)"
        )
    user = store.ban(owner.name, reason)
    print(
        f"banned {user.name} (the account of peer {peer}): "
        "its peers are refused within one refresh interval"
    )


def _print_accused(accused: list[Accused]) -> None:
    if not accused:
        print("no evidence reported")
        return
    width = max(8, *(len(a.username or "?") for a in accused))
    print(
        f"{'user':<{width}}  {'status':<7}  {'findings':>8}  {'reporters':>9}  "
        f"{'last seen (UTC)':<16}  statistics / peer"
    )
    for a in accused:
        status = "banned" if a.banned else "active"
        print(
            f"{a.username or '?':<{width}}  {status:<7}  {a.findings:>8}  {a.reporters:>9}  "
            f"{_utc(a.last_seen):<16}  {', '.join(a.statistics)}"
        )
        print(f"{'':<{width}}  peer {a.peer}, first seen {_utc(a.first_seen)}")
        print(f"{'':<{width}}  latest: {a.latest_reason}")
    print(
        "\nEach finding is one reporter's signed word (an accusation, not proof); 'reporters' "
        "counts distinct accounts.\nBan with: barnraise coordinator reports ban USER-OR-PEER"
    )


def _utc(when: float) -> str:
    return datetime.datetime.fromtimestamp(when, datetime.UTC).strftime("%Y-%m-%d %H:%M")


def _register_rollback(sub: Any) -> None:
    rollback = sub.add_parser(
        "rollback",
        help="order every peer back onto the checkpoint of an epoch (signed with the project key)",
    )
    rollback.add_argument("--to-epoch", type=int, metavar="N", help="the checkpoint's epoch")
    rollback.add_argument("--reason", default="", help="why, in the volunteers' event log")
    rollback.add_argument(
        "--checkpoints",
        type=Path,
        metavar="DIR",
        help="the backbone's checkpoint folder, if on this computer: refuse an epoch it lacks",
    )
    rollback.add_argument("--list", action="store_true", help="print the orders issued so far")
    rollback.add_argument("--manifest", type=Path, metavar="F", help="the project's manifest")
    rollback.add_argument("--db", type=Path, metavar="PATH", help="the coordinator's database")
    rollback.add_argument(
        "--key", type=Path, metavar="PATH", help="the project key (default: beside the database)"
    )
    rollback.set_defaults(run=run_rollback)


def run_rollback(args: argparse.Namespace) -> int:
    """Sign and store a rollback order (``core.coordinator.reports.rollback``), or list the orders."""
    manifest = load_any_manifest(args.manifest) if args.manifest is not None else None
    if args.db is not None:
        db: Path = args.db
    elif manifest is not None:
        db = default_db(manifest)
    else:
        raise ConfigError("barnraise coordinator rollback needs --manifest F (or --db PATH)")
    if not db.exists():
        raise ConfigError(f"there is no coordinator database at {db}")
    if args.list:
        with CoordinatorStore(db) as store:
            _print_orders(store.rollbacks.all())
        return 0
    if args.to_epoch is None:
        raise ConfigError("say which checkpoint to roll back to: --to-epoch N (or --list)")
    if manifest is None:
        raise ConfigError("signing an order needs --manifest F: the project's name and key")
    if not manifest.access.moderated:
        raise ConfigError(
            f"project {manifest.project.name} is open: peers hear rollback orders only from the "
            "coordinator of a moderated project"
        )
    if isinstance(manifest, Manifest) and not (
        active_modes().parse(manifest.training.mode).follows_rollbacks
    ):
        raise ConfigError(
            f"project {manifest.project.name} trains in {manifest.training.mode} mode ([training] "
            "mode), whose peers do not follow rollback orders yet: no order was signed"
        )
    key_path: Path = args.key or db.parent / f"{manifest.project.name}-key.pem"
    if not key_path.exists():
        raise ConfigError(f"there is no project key at {key_path}; pass --key PATH")
    identity = Identity.load(key_path)
    check_project_key(manifest, identity.peer_id, f"the key in {key_path}")
    epoch, reason = args.to_epoch, args.reason
    if args.checkpoints is not None:
        _check_checkpoint(args.checkpoints, epoch)
    issued = time.time()

    def sign(sequence: int) -> str:
        order = sign_order(
            identity,
            manifest.project.name,
            sequence=sequence,
            to_epoch=epoch,
            issued=issued,
            reason=reason,
        )
        return order_to_text(order)

    with CoordinatorStore(db) as store:
        stored = store.rollbacks.issue(epoch, reason, issued, sign)
    print(
        f"rollback #{stored.sequence} to the checkpoint of epoch {epoch} signed and stored: "
        f"every peer hears of it within one refresh interval "
        f"({manifest.access.refresh_interval:g} s), loads that checkpoint from a backbone peer "
        "that holds it (or the published checkpoint URL) and trains on from there, with epochs "
        "numbered on. A backbone without that checkpoint logs why, and peers keep training."
    )
    return 0


def _check_checkpoint(folder: Path, epoch: int) -> None:
    """``ConfigError`` unless the backbone's folder holds the checkpoint of ``epoch``."""
    # the name ``CheckpointStore.path_for`` gives (not imported: it would load torch here)
    if (folder / f"checkpoint-{epoch:08d}.pt").is_file():
        return
    held = sorted(p.name for p in folder.glob("checkpoint-*.pt")) if folder.is_dir() else []
    raise ConfigError(
        f"{folder} holds no checkpoint of epoch {epoch}"
        + (f"; it holds {', '.join(held)}" if held else "")
    )


def _print_orders(orders: list[StoredOrder]) -> None:
    if not orders:
        print("no rollback ordered")
        return
    for order in orders:
        reason = f": {order.reason}" if order.reason else ""
        print(f"#{order.sequence}  {_utc(order.issued)}  to epoch {order.to_epoch}{reason}")


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
