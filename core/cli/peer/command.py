"""``barnraise peer`` and ``barnraise backbone``: one peer of a project, as volunteers and organizers
run it (``barnraise aux`` is the backbone's older name, still accepted).

    barnraise peer     --manifest project.toml --initial-peers /ip4/…/tcp/…/p2p/…
    barnraise backbone --manifest project.toml --checkpoint-every 10
    barnraise backbone --manifest project.toml --publish-checkpoints /srv/www/ckpt --project-key K.pem

In a moderated project the peer logs in to the coordinator first (``--username``; the password from
``--password-stdin`` or ``$BARNRAISE_PASSWORD``) and keeps its access pass fresh; a backbone
also reports each completed epoch's contributions there, for the leaderboard. An open project's
backbone given ``--username`` (a moderator's account) logs in too and reports its epochs'
figures (loss, speed, peers online), which the coordinator's project page shows. Either reports
each held-out evaluation of its replica too (the manifest's ``[evaluation]``).

With ``--publish-checkpoints`` a backbone also copies each checkpoint into a folder, with an
``index.json`` signed by the project key (``--project-key``), for a web server to serve at the
manifest's ``network.checkpoint_url``. Beside each checkpoint it publishes the model for everyone:
the checkpoint exported in the transformers format (``barnraise export``), packed into
``model-EPOCH.zip``, with a signed ``model.json`` that carries the newest held-out figures at or
before its epoch; the coordinator's page offers it for download. A failed export is logged and
changes nothing else.

The peer prints one JSON line per event (ready with its address, each finished epoch; for the backbone,
the collaboration's metrics per epoch; last ``stopped``, with its samples, compute and wall time
since ready, and bytes sent) on stdout; logs go to stderr. SIGINT/SIGTERM (Ctrl-C) stop it
cleanly after the current microbatch.

A model that cannot fit this computer's memory (its weights and optimizer state, estimated from
the manifest, larger than the RAM or the GPU's memory) is refused with the figures before torch
loads (``core.engine.join.memory_fit``).

A ``dmoe`` manifest (a decentralized mixture of experts) makes ``barnraise peer`` one of its
asynchronous trainers instead (``core.cli.peer.dmoe_trainer``); such a project has no backbone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.cli.access import (
    add_login_arguments,
    moderated_access,
    read_password,
    reporting_access,
)
from core.cli.peer.backbone import backbone_settings, reporting_to
from core.cli.signals import run_command, stop_on_signals
from core.config.paths import UserDirs
from core.config.ports import BACKBONE_PORT, PEER_PORT, listen_on
from core.config.roles import BACKBONE, CLIENT, TRAINER
from core.modes import active_modes
from core.project import DmoeManifest, Manifest, load_any_manifest, load_manifest
from core.trust.identity import Identity
from core.worker.events import PeerEvent, PeerReady, PeerStopped, to_json

if TYPE_CHECKING:
    from core.swarm.byzantine import Misbehaviour
    from core.training.peer.project_peer import PeerSettings

log = logging.getLogger(__name__)


def register(commands: Any) -> None:
    for name, aliases, role_help in (
        ("peer", [], "train with a project (a volunteer's peer)"),
        (
            BACKBONE,
            ["aux"],
            "keep a project's model without training: averaging, metrics, checkpoints, credit",
        ),
    ):
        parser: argparse.ArgumentParser = commands.add_parser(
            name, aliases=aliases, help=role_help, description=__doc__
        )
        parser.add_argument("--manifest", type=Path, required=True, help="the project's TOML file")
        parser.add_argument(
            "--initial-peers", nargs="*", default=None, metavar="ADDR", help="peers to join"
        )
        parser.add_argument(
            "--host",
            default=None,
            help="address to listen on (default: every interface, IPv4 and IPv6; 127.0.0.1 for a "
            "swarm inside this computer)",
        )
        parser.add_argument(
            "--port",
            type=int,
            default=None,
            help="port to listen on (default: the manifest's "
            f"{'peer_port' if name == 'peer' else 'aux_port'}, else "
            f"{PEER_PORT if name == 'peer' else BACKBONE_PORT}; another free one if taken; 0: any)",
        )
        parser.add_argument(
            "--data-base", default=None, help="URL or folder the manifest's relative data paths use"
        )
        parser.add_argument(
            "--work-dir", type=Path, default=None, help="tokenizer copy, metrics, checkpoints"
        )
        parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
        parser.add_argument(
            "--target-batch-size", type=int, default=None, help="override the manifest's"
        )
        parser.add_argument(
            "--mode",
            choices=active_modes().names,
            default=None,
            help="override the manifest's training.mode (every peer of a project must agree); "
            + active_modes().described(),
        )
        parser.add_argument(
            "--round-seconds",
            type=float,
            default=None,
            help="override the manifest's training.round_seconds (diloco)",
        )
        parser.add_argument(
            "--verify-reducers",
            action="store_true",
            help="check each other's reducers even if the manifest does not say so (every member "
            "must: a round refuses members that differ)",
        )
        parser.add_argument("--until-epoch", type=int, default=None, help=argparse.SUPPRESS)
        add_login_arguments(
            parser,
            "your account at the project's coordinator: a moderated project needs one; an "
            "open project's backbone with a moderator's account reports its epochs there",
        )
        if name == "peer":
            parser.add_argument(
                "--client", action="store_true", help="no incoming connections (behind NAT)"
            )
            parser.add_argument(
                "--data-seed", type=int, default=None, help="this peer's data order"
            )
            parser.add_argument(
                "--device", default="cpu", help="cpu, cuda, cuda:1, mps, auto (the best here)"
            )
            parser.add_argument("--from-checkpoint", type=Path, default=None)
            # the demo swarm's Byzantine peers (``barnraise swarm --byzantine K``): never for real use
            parser.add_argument("--attack", default=None, help=argparse.SUPPRESS)
        else:
            parser.add_argument("--checkpoint-every", type=int, default=10, help="0: none")
            parser.add_argument("--keep-checkpoints", type=int, default=3)
            parser.add_argument(
                "--publish-checkpoints",
                type=Path,
                default=None,
                metavar="FOLDER",
                help="also copy each checkpoint into FOLDER with an index.json signed by the "
                "project key, for a web server to serve at the manifest's network.checkpoint_url",
            )
            parser.add_argument(
                "--identity",
                type=Path,
                default=None,
                metavar="PATH",
                help="the backbone's key file (created if missing): name its PeerID in the "
                "manifest's access.backbone_keys and its word confirms the collaboration's epoch "
                "and state (default: a new key each start, which confirms nothing)",
            )
            parser.add_argument(
                "--project-key",
                type=Path,
                default=None,
                metavar="PATH",
                help="the project key file that signs published checkpoints (the coordinator's "
                "<project>-key.pem); required with --publish-checkpoints",
            )
        parser.set_defaults(run=run, role=name)


def _settings(args: argparse.Namespace) -> PeerSettings:
    from core.training.peer.project_peer import PeerSettings  # noqa: PLC0415 - torch only for this command

    manifest = load_manifest(args.manifest)
    if args.target_batch_size is not None:
        manifest = manifest.with_training(target_batch_size=args.target_batch_size)
    if args.verify_reducers:
        manifest = manifest.with_averaging(verify_reducers=True)
    if args.mode is not None:
        manifest = manifest.with_training(mode=args.mode)
    if args.round_seconds is not None:
        manifest = manifest.with_training(round_seconds=args.round_seconds)
    backbone = args.role == BACKBONE
    default_port = manifest.network.aux_port if backbone else manifest.network.peer_port
    port = default_port if args.port is None else args.port
    work_dir = args.work_dir or UserDirs.default().cache / "projects" / manifest.project.name
    settings = PeerSettings(
        manifest,
        work_dir=work_dir,
        role=BACKBONE if backbone else (CLIENT if args.client else TRAINER),
        initial_peers=tuple(args.initial_peers or ()),
        listen=tuple(listen_on(args.host, port)),
        # a default port may be taken by another peer on this computer; a chosen one is an error
        port_fallback=args.port is None,
        offer_relay=backbone,  # the backbone relays for volunteers behind routers
        data_base=args.data_base,
        # without a seed of its own each peer picks one, so that no two walk the data alike
        data_seed=0
        if backbone
        else (args.data_seed if args.data_seed is not None else _random_seed()),
        device="cpu" if backbone else args.device,
        checkpoint_every=args.checkpoint_every if backbone else 0,
        keep_checkpoints=args.keep_checkpoints if backbone else 3,
        start_from=None if backbone else args.from_checkpoint,
        until_epoch=args.until_epoch,
        misbehaviour=_misbehaviour(getattr(args, "attack", None)),
    )
    if backbone:
        settings = dataclasses.replace(settings, identity=backbone_identity(args, manifest))
        return backbone_settings(settings, args)
    return settings


def backbone_identity(args: argparse.Namespace, manifest: Manifest) -> Identity | None:
    """The backbone's key from ``--identity`` (created if missing; None: a new one each start),
    with a warning when the manifest does not name it: then nobody takes its word."""
    path: Path | None = getattr(args, "identity", None)
    if path is None:
        if manifest.access.confirmers:
            log.warning("the manifest names the keys that confirm the collaboration's state, and "
                        "this backbone runs with a new one: start it with --identity KEY_FILE "
                        "(one of access.backbone_keys)")  # fmt: skip
        return None
    identity = Identity.load_or_create(path)
    if str(identity.peer_id) not in manifest.access.confirmers:
        log.warning("the manifest does not name this backbone's key %s in access.backbone_keys: "
                    "the peers will not take its word for the collaboration's state",
                    identity.peer_id)  # fmt: skip
    return identity


def _misbehaviour(attack: str | None) -> Misbehaviour | None:
    """``--attack KIND``: this peer misbehaves on purpose (``core.swarm.byzantine``)."""
    from core.swarm.byzantine import Attack, Misbehaviour  # noqa: PLC0415 - torch

    if attack is None:
        return None
    return Misbehaviour(Attack.parse(attack))


def _random_seed() -> int:
    return secrets.randbelow(2**31)


async def _run(args: argparse.Namespace) -> int:
    manifest = load_any_manifest(args.manifest)
    if isinstance(manifest, Manifest):
        # refused before torch and the model: one that cannot fit would fail only after minutes
        # of allocation, with the computer's memory taken meanwhile (a backbone holds it on the CPU)
        device = args.device if args.role == "peer" else "cpu"
        # here, not at the top: the engine's join package loads the coordinator client
        from core.engine.join.memory_fit import check_fit  # noqa: PLC0415 - see above
        from core.worker.accelerator import detect_accelerator  # noqa: PLC0415 - see above
        from core.worker.memory import memory_here  # noqa: PLC0415 - see above

        check_fit(manifest, memory_here(detect_accelerator(), device))
    import torch  # noqa: PLC0415 - torch loads slowly; only training commands need it

    if isinstance(manifest, DmoeManifest):
        from core.cli.peer.dmoe_trainer import run_trainer  # noqa: PLC0415

        return await run_trainer(args, manifest)
    settings = _settings(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    stop = asyncio.Event()
    stop_on_signals(stop)
    if not settings.manifest.access.moderated:
        if args.role == BACKBONE and args.username:
            return await _serve_reporting(settings, args, stop)
        if args.username:
            log.warning(
                "--username is not used: project %s is open", settings.manifest.project.name
            )
        return await _serve(settings, stop)
    identity = settings.identity or Identity.generate()
    password = read_password(args.password_stdin)
    async with moderated_access(
        settings.manifest, identity, args.username, password, report=args.role == BACKBONE
    ) as access:
        del password
        reporter = access.reporter
        settings = dataclasses.replace(
            settings,
            identity=identity,
            access=access.gate,
            initial_peers=settings.initial_peers or tuple(access.bootstrap),
            on_evidence=None if reporter is None else reporter.submit_evidence,
        )
        if reporter is not None:
            settings = reporting_to(settings, reporter)
        return await _serve(settings, stop)


async def _serve_reporting(
    settings: PeerSettings, args: argparse.Namespace, stop: asyncio.Event
) -> int:
    """An open project's backbone that reports its epochs to the coordinator."""
    password = read_password(args.password_stdin)
    async with reporting_access(settings.manifest, args.username, password) as reporter:
        del password
        return await _serve(reporting_to(settings, reporter), stop)


async def _serve(settings: PeerSettings, stop: asyncio.Event) -> int:
    from core.training.peer.project_peer import ProjectPeer  # noqa: PLC0415

    ready_at: float | None = None

    def emit(event: PeerEvent) -> None:
        nonlocal ready_at
        if isinstance(event, PeerReady) and ready_at is None:
            ready_at = time.monotonic()
        print(json.dumps(to_json(event), default=str), flush=True)

    peer = ProjectPeer(settings, emit)
    try:
        runner = asyncio.create_task(peer.run(stop), name="peer/run")
        waiter = asyncio.create_task(stop.wait(), name="peer/stop")
        done, _ = await asyncio.wait({runner, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if runner in done:
            waiter.cancel()
            runner.result()
        else:
            # the trainer notices ``stop`` between microbatches; give it a moment, then cancel
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(runner, timeout=10)
        # taken before closing: the time closing takes (an exchange in flight) is no training
        seconds = 0.0 if ready_at is None else time.monotonic() - ready_at
        done_so_far = peer.progress()
    finally:
        await peer.close()
    emit(
        PeerStopped(
            samples=done_so_far["samples"],
            compute_seconds=round(done_so_far["compute_seconds"], 3),
            seconds=round(seconds, 3),
            bytes_sent=done_so_far["bytes_sent"],
            bytes_received=done_so_far["bytes_received"],
        )
    )
    return 0


def run(args: argparse.Namespace) -> int:
    return run_command(lambda: _run(args))
