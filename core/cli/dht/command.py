"""``barnraise dht``: a standalone DHT node, what an organizer's backbone server runs.

It prints its full dialable address on the first line of standard output (other nodes and peers pass
it to ``--initial-peers``) and runs until interrupted. In a moderated project every peer refuses
peers without an access pass, so the node then logs in first (``--manifest F --username U``, the
password from ``--password-stdin`` or ``$BARNRAISE_PASSWORD``) and keeps its pass fresh, as a
project's peers do. With ``--stdio-api`` it also takes JSON commands
on standard input, one per line, and answers on standard output (see ``stdio``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path
from typing import Any

from core.cli.access import add_login_arguments, moderated_access, read_password
from core.cli.dht.stdio import serve_stdio
from core.cli.signals import run_command, stop_on_signals
from core.config.ports import DHT_PORT, listen_on
from core.dht import DHTConfig, DHTNode, HostTransport
from core.net import Host, Identity, NetConfig
from core.net.host.gate import AccessGate

log = logging.getLogger(__name__)


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "dht",
        help="run a standalone DHT node (a backbone server)",
        description=__doc__,
    )
    parser.add_argument(
        "--host",
        default=None,
        help="address to listen on (default: every interface, IPv4 and IPv6)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help=f"port to listen on (default {DHT_PORT}, another free one if taken; 0: any)",
    )
    who = parser.add_mutually_exclusive_group()
    who.add_argument("--identity", type=Path, metavar="PATH", help="identity key file to use")
    who.add_argument(
        "--new-identity",
        action="store_true",
        help="use a fresh throwaway identity (tests, local swarms)",
    )
    parser.add_argument(
        "--initial-peers",
        nargs="*",
        default=[],
        metavar="ADDR",
        help="full addresses of nodes to join",
    )
    parser.add_argument(
        "--client",
        action="store_true",
        help="client mode: query and store, serve nothing (behind NAT)",
    )
    parser.add_argument(
        "--stdio-api",
        action="store_true",
        help="take JSON commands on stdin, one per line (scripts)",
    )
    parser.add_argument(
        "--manifest",
        type=Path,
        metavar="F",
        help="the project it serves: in a moderated one the node logs in and holds a pass",
    )
    add_login_arguments(parser)
    parser.set_defaults(run=run)


def _identity(args: argparse.Namespace) -> Identity:
    if args.new_identity:
        return Identity.generate()
    from core.config.paths import UserDirs  # noqa: PLC0415 - platformdirs, not for --new-identity

    return Identity.load_or_create(args.identity or UserDirs.default().identity_file)


async def _run(args: argparse.Namespace) -> int:
    identity = _identity(args)
    manifest = None
    if args.manifest is not None:
        from core.project import load_any_manifest  # noqa: PLC0415 - only a project's node reads one

        manifest = load_any_manifest(args.manifest)
    stop = asyncio.Event()
    stop_on_signals(stop)
    if manifest is None or not manifest.access.moderated:
        return await _serve(args, identity, None, stop)
    password = read_password(args.password_stdin)
    async with moderated_access(
        manifest, identity, args.username, password, report=False
    ) as access:
        del password
        return await _serve(args, identity, access.gate, stop)


async def _serve(
    args: argparse.Namespace, identity: Identity, gate: AccessGate | None, stop: asyncio.Event
) -> int:
    listen = listen_on(args.host, DHT_PORT if args.port is None else args.port)
    host = Host(identity, NetConfig(), access=gate)
    node = DHTNode(HostTransport(host), DHTConfig(client_mode=args.client))
    try:
        await host.start([] if args.client else listen, port_fallback=args.port is None)
        await node.start(args.initial_peers)
        address = host.addresses[0] if host.addresses else f"(client) /p2p/{host.peer_id}"
        print(address, flush=True)
        if args.stdio_api:
            await serve_stdio(node, stop)
        else:
            await stop.wait()
    finally:
        await node.close()
        await host.close()
    return 0


def run(args: argparse.Namespace) -> int:
    return run_command(lambda: _run(args))
