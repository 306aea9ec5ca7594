"""``barnraise experts``: host experts of a ``dmoe`` project (a volunteer's expert server).

    barnraise experts --manifest resources/dmoe-demo/project.toml --initial-peers /ip4/…/p2p/…
    barnraise experts --manifest project.toml --uids 'ffn.0.*' --checkpoints /shared/experts
    barnraise experts --manifest project.toml --count 2 --host 127.0.0.1 --port 0

Which experts: ``--uids`` (uids, or globs over the grid such as ``ffn.0.*``), else ``--count`` (the
manifest's ``server.experts_per_server`` by default) slots that nobody announces yet. Each expert is
loaded from its newest readable checkpoint in ``--checkpoints`` (default: this project's folder in
the user's cache), so a server started with the uids and the folder of one that left takes its
experts over; checkpoints are written every ``server.checkpoint_interval`` seconds and when it stops.
Experts too large for this computer's memory, as many as it would host, are refused with the figures.

It prints one JSON line per event on stdout (logs go to stderr): ``ready`` with its address, the
uids and what was restored (the line a peer prints, so a swarm reads it the same way), ``served``
every ``--stats-every`` seconds (forward and backward samples served so far), and ``stopped``.
SIGINT/SIGTERM (Ctrl-C) stop it cleanly: announcements are left to expire (the DHT has no delete;
within ``server.announce_ttl`` trainers stop calling), waiting calls are answered "unavailable", and
every expert that learned since its last checkpoint is saved. In a moderated project it logs in
first, as ``barnraise peer`` does (``--username``, the password from ``--password-stdin`` or
``$BARNRAISE_PASSWORD``).

Trainers sign receipts for the samples this server answered them; logged in, it reports them to
the coordinator every 30 seconds and when it stops, and the leaderboard credits them to this
account (when the trainers' keys belong to other accounts).

A call whose tensors are not finite is refused, and each minute the server publishes one signed
accusation per caller that sent such calls (``core.training.moderation.call_evidence``). With
``--collect-evidence`` (the organizer's backbone server) it also reads every server's accusations,
logs them and, in a moderated project, reports them to the coordinator as a moderator.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.cli.access import add_login_arguments, with_access
from core.cli.signals import run_command, stop_on_signals
from core.config.paths import UserDirs
from core.config.ports import PEER_PORT, listen_on
from core.project import DmoeManifest, load_dmoe_manifest
from core.util.errors import ConfigError

if TYPE_CHECKING:
    from core.account.reporter import CoordinatorReporter
    from core.engine.join.memory_fit import Fit
    from core.moe.server.events import ExpertsEvent
    from core.moe.server.runtime import ExpertHostSettings

STATS_EVERY = 10.0
"""Seconds between ``served`` lines by default."""


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "experts",
        help="host experts of a mixture-of-experts (dmoe) project",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--manifest", type=Path, required=True, help="the dmoe project's TOML file")
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--uids",
        nargs="+",
        default=None,
        metavar="UID",
        help="experts to host: uids (ffn.0.3) or globs over the grid (ffn.0.*)",
    )
    which.add_argument(
        "--count",
        type=int,
        default=None,
        help="host this many free slots (default: the manifest's server.experts_per_server)",
    )
    parser.add_argument(
        "--host",
        default=None,
        help="address to listen on (default: every interface; 127.0.0.1 inside this computer)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help=f"port to listen on (default: the manifest's peer_port, else {PEER_PORT}; another "
        "free one if taken; 0: any)",
    )
    parser.add_argument(
        "--initial-peers", nargs="*", default=None, metavar="ADDR", help="peers to join"
    )
    parser.add_argument(
        "--checkpoints",
        type=Path,
        default=None,
        metavar="DIR",
        help="the experts' checkpoint folder, shared with or copied from servers that hosted "
        "them (default: this project's folder in the user's cache)",
    )
    parser.add_argument(
        "--device", default="cpu", help="cpu, cuda, cuda:1, mps, auto (the best here)"
    )
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument(
        "--stats-every",
        type=float,
        default=STATS_EVERY,
        metavar="SECONDS",
        help=f"seconds between 'served' lines (default {STATS_EVERY:g}; 0: none)",
    )
    parser.add_argument(
        "--offer-relay",
        action="store_true",
        help="relay for servers behind home routers while this one is public (an organizer's "
        "backbone server)",
    )
    parser.add_argument(
        "--collect-evidence",
        action="store_true",
        help="read every server's evidence against callers that sent poisoned tensors, log it "
        "and, in a moderated project, report it to the coordinator (the organizer's backbone "
        "server, logged in as a moderator)",
    )
    parser.add_argument(
        "--evidence-window",
        type=float,
        default=None,
        metavar="SECONDS",
        help="seconds of refused calls gathered into one accusation per caller (default "
        "60; at least 10)",
    )
    add_login_arguments(parser)
    parser.set_defaults(run=run)


def settings_from_args(args: argparse.Namespace, manifest: DmoeManifest) -> ExpertHostSettings:
    """The server's settings from the command line (``ConfigError`` for a bad combination)."""
    from core.moe.server.runtime import ExpertHostSettings  # noqa: PLC0415 - torch only for this command
    from core.training.moderation.call_evidence import MIN_WINDOW  # noqa: PLC0415 - as above

    _check_count(args, manifest)
    if args.stats_every < 0:
        raise ConfigError("--stats-every must be 0 (none) or more seconds")
    if args.evidence_window is not None and not args.evidence_window >= MIN_WINDOW:
        raise ConfigError(f"--evidence-window must be at least {MIN_WINDOW:g} seconds")
    port = manifest.network.peer_port if args.port is None else args.port
    checkpoints = args.checkpoints or (
        UserDirs.default().cache / "projects" / manifest.project.name / "experts"
    )
    return ExpertHostSettings(
        manifest,
        uids=tuple(args.uids or ()),
        count=args.count,
        listen=tuple(listen_on(args.host, port)),
        port_fallback=args.port is None,
        initial_peers=tuple(args.initial_peers or ()),
        checkpoints=checkpoints,
        device=args.device,
        stats_interval=args.stats_every,
        offer_relay=args.offer_relay,
    )


def experts_fit(args: argparse.Namespace, manifest: DmoeManifest) -> Fit:
    """How the experts this server would host fit this computer's memory, judged from the manifest
    (``core.engine.join.memory_fit``): those ``--uids`` names, else ``--count``, else the
    manifest's ``server.experts_per_server``, on ``--device``. ``DoesNotFit``, with the figures,
    when they cannot fit."""
    # here, not at the top: the engine's join package loads the coordinator client
    from core.engine.join.memory_fit import check_fit  # noqa: PLC0415 - see above
    from core.worker.accelerator import detect_accelerator  # noqa: PLC0415 - see above
    from core.worker.memory import memory_here  # noqa: PLC0415 - see above

    if args.uids:
        from core.moe.grid import ExpertGrid  # noqa: PLC0415 - only with --uids
        from core.moe.server.selection import expand_uids  # noqa: PLC0415 - only with --uids

        grid = ExpertGrid(manifest.grid.prefix, manifest.grid.shape)
        hosted: int | None = len(expand_uids(grid, args.uids))
    else:
        _check_count(args, manifest)
        hosted = args.count
    memory = memory_here(detect_accelerator(), args.device)
    return check_fit(manifest, memory, experts=hosted)


def _check_count(args: argparse.Namespace, manifest: DmoeManifest) -> None:
    if args.count is not None and not 1 <= args.count <= manifest.grid.size:
        raise ConfigError(f"--count must be 1 to the grid's {manifest.grid.size} experts")


async def _run(args: argparse.Namespace) -> int:
    manifest = load_dmoe_manifest(args.manifest)
    # refused before torch and the experts: ones that cannot fit would fail only after minutes
    # of allocation, with the computer's memory taken meanwhile
    experts_fit(args, manifest)
    import torch  # noqa: PLC0415 - torch loads slowly; only this command needs it here

    settings = settings_from_args(args, manifest)
    if args.threads:
        torch.set_num_threads(args.threads)
    stop = asyncio.Event()
    stop_on_signals(stop)
    # a reporter whenever logged in: every server reports its receipts, a backbone evidence too
    return await with_access(
        settings,
        args,
        lambda chosen, reporter: _serve(chosen, stop, args, reporter),
        report=True,
    )


async def _serve(
    settings: ExpertHostSettings,
    stop: asyncio.Event,
    args: argparse.Namespace,
    reporter: CoordinatorReporter | None,
) -> int:
    from core.moe.server.events import to_json  # noqa: PLC0415
    from core.moe.server.runtime import ExpertHost  # noqa: PLC0415
    from core.training.moderation.call_evidence import WINDOW, evidence_of_refusals  # noqa: PLC0415

    def emit(event: ExpertsEvent) -> None:
        print(json.dumps(to_json(event)), flush=True)

    collect = args.collect_evidence
    evidence = evidence_of_refusals(
        settings.manifest.project.name,
        window=WINDOW if args.evidence_window is None else args.evidence_window,
        collect=collect,
        on_evidence=reporter.submit_evidence if reporter is not None and collect else None,
    )
    on_receipts = None if reporter is None else reporter.submit_receipts
    server = ExpertHost(
        dataclasses.replace(settings, evidence=evidence, on_receipts=on_receipts), emit
    )
    try:
        await server.run(stop)
    finally:
        await server.close()
    return 0


def run(args: argparse.Namespace) -> int:
    return run_command(lambda: _run(args))
