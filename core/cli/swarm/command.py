"""``barnraise swarm``: a whole collaboration on this machine, the main job.

    barnraise swarm --peers 3 --minutes 3

Writes the demo corpus and trains its tokenizer (once, in the cache), serves the shards over a local
HTTP server, starts a backbone and N trainer peers on loopback, each its own OS
process as if on its own machine, and prints one line per epoch (epoch, loss, samples/s, peers) from
the backbone's metrics. Ctrl-C, or the end of ``--minutes``, stops every process cleanly.
With ``--moderated`` it runs as a moderated project with a coordinator, accounts and access passes,
and prints the leaderboard at the end.

With ``--byzantine K`` the last K trainers misbehave on purpose (``--attack``: their gradients
x1000 by default, or sign-flipped x10, noise, NaN; or, as reducers, a shifted aggregate, which
turns reducer verification on for every peer), to show the defences: with the manifest's
``[averaging] aggregation = "centered_clip"`` the loss still falls, and the backbone's
accusations, printed as they come, name the misbehaving peers.

With ``--project dmoe`` (or a manifest of kind ``dmoe``) it runs a decentralized mixture of
experts instead (Learning@home): ``--servers`` expert servers hosting the grid's experts, and
``--peers`` asynchronous trainers that find them through the DHT, each a process of its own; it
prints the trainers' loss, accuracy and speed every few seconds.

Once its peers run, the swarm announces itself to the engine on this computer with a record in the
user's runtime folder: the desktop app offers it on first run, and an engine attached with
``--local-swarm`` joins it wherever it listens this time. The record goes when the swarm stops.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from core.cli.signals import run_command, stop_on_signals
from core.cli.swarm.text import DmoePrinter, SwarmPrinter
from core.modes import active_modes
from core.project import DmoeManifest, load_any_manifest
from core.swarm.demo_data import DEMO_MANIFEST
from core.swarm.dmoe_run import DmoeSwarmOptions, LocalDmoeRun
from core.swarm.run import ATTACKS, LocalSwarmRun, SwarmOptions
from core.util.process.resources import resource_path

PROJECTS = {"demo": "demo/project.toml", "dmoe": "dmoe-demo/project.toml"}
"""``--project NAME``: the manifests that ship with Barnraise."""

# the swarm itself is core.swarm (LocalSwarmRun); this module reads the arguments, and what the
# swarm has to say is printed by core.cli.swarm.text


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "swarm", help="run a whole collaboration on this machine (the demo)", description=__doc__
    )
    parser.add_argument(
        "--peers", type=int, default=3, help="trainer peers (default 3; 0: only the backbone)"
    )
    parser.add_argument(
        "--minutes", type=float, default=0.0, help="stop after this long (0: never)"
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--manifest", type=Path, default=None, help="default: the demo")
    which.add_argument(
        "--project",
        choices=sorted(PROJECTS),
        default=None,
        help="a project that ships with Barnraise: demo (collaborative ALBERT training, the "
        "default) or dmoe (a mixture of experts hosted by expert servers)",
    )
    parser.add_argument(
        "--servers",
        type=int,
        default=3,
        help="with a dmoe project: expert servers (default 3)",
    )
    parser.add_argument("--work-dir", type=Path, default=None, help="corpus, logs, checkpoints")
    parser.add_argument("--target-batch-size", type=int, default=None)
    parser.add_argument(
        "--mode",
        choices=active_modes().names,
        default=None,
        help=f"how the peers train (default: the manifest's): {active_modes().described()}",
    )
    parser.add_argument(
        "--round-seconds", type=float, default=None, help="diloco: a round's length"
    )
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument(
        "--moderated",
        action="store_true",
        help="run it as a moderated project: a coordinator, accounts, passes, a leaderboard",
    )
    parser.add_argument(
        "--keep-accounts",
        action="store_true",
        help="with --moderated: keep the accounts made in earlier runs (the leaderboard restarts)",
    )
    parser.add_argument(
        "--byzantine",
        type=int,
        default=0,
        metavar="K",
        help="K of the trainers misbehave on purpose, to show the defences (default 0)",
    )
    parser.add_argument(
        "--attack",
        choices=ATTACKS,
        default="scale",
        help="what the --byzantine trainers do: gradients x1000 (scale, the default), "
        "sign-flipped x10, noise, NaN, or a reducer returning a shifted aggregate (lying-reducer: "
        "every peer then verifies reducers)",
    )
    parser.set_defaults(run=run)


def _manifest(args: argparse.Namespace) -> Path:
    # absolute: the peers run in their log folder, not in this one
    if args.project is not None:
        return resource_path(PROJECTS[args.project]).absolute()
    return (args.manifest or DEMO_MANIFEST).absolute()


def _options(args: argparse.Namespace) -> SwarmOptions:
    return SwarmOptions(
        manifest=_manifest(args),
        peers=args.peers,
        seconds=args.minutes * 60 if args.minutes else None,
        work_dir=args.work_dir.absolute() if args.work_dir else None,
        target_batch_size=args.target_batch_size,
        mode=args.mode,
        round_seconds=args.round_seconds,
        checkpoint_every=args.checkpoint_every,
        moderated=args.moderated,
        keep_accounts=args.keep_accounts,
        byzantine=args.byzantine,
        attack=args.attack,
    )


async def _run(args: argparse.Namespace) -> int:
    if problem := _usage_problem(args):
        print(f"barnraise swarm: {problem}", file=sys.stderr)
        return 2
    stop = asyncio.Event()
    stop_on_signals(stop)
    manifest = await asyncio.to_thread(load_any_manifest, _manifest(args))
    if isinstance(manifest, DmoeManifest):
        if problem := _dmoe_problem(args):
            print(f"barnraise swarm: {problem}", file=sys.stderr)
            return 2
        options = DmoeSwarmOptions(
            manifest=_manifest(args),
            servers=args.servers,
            trainers=args.peers,
            seconds=args.minutes * 60 if args.minutes else None,
            work_dir=args.work_dir.absolute() if args.work_dir else None,
            moderated=args.moderated,
        )
        code = await LocalDmoeRun(options, DmoePrinter()).run(stop)
    else:
        code = await LocalSwarmRun(_options(args), SwarmPrinter()).run(stop)
    if code == 0:
        print("stopped", flush=True)
    return code


def _usage_problem(args: argparse.Namespace) -> str | None:
    if args.peers < 0:
        return "--peers must be 0 or more"
    if args.keep_accounts and not args.moderated:
        return "--keep-accounts goes with --moderated (an open swarm has no accounts)"
    if not 0 <= args.byzantine <= args.peers:
        return f"--byzantine must be 0 to --peers ({args.peers}), not {args.byzantine}"
    if args.byzantine and args.mode is not None:
        modes = active_modes()
        if not modes.parse(args.mode).misbehaving_demo:
            hosts = " or ".join(m.name for m in modes if m.misbehaving_demo)
            return f"--byzantine shows the defences of {hosts} rounds; leave out --mode {args.mode}"
    if args.round_seconds is not None and args.round_seconds < 1:
        return f"--round-seconds must be 1 or more, not {args.round_seconds:g}"
    return None


def _dmoe_problem(args: argparse.Namespace) -> str | None:
    """Options a mixture-of-experts swarm cannot honour (it has no epochs nor averaging)."""
    if args.servers < 1:
        return "--servers must be 1 or more"
    for flag, given in (
        ("--keep-accounts", args.keep_accounts),
        ("--byzantine", args.byzantine),
        ("--target-batch-size", args.target_batch_size is not None),
        ("--mode", args.mode is not None),
        ("--round-seconds", args.round_seconds is not None),
    ):
        if given:
            return f"{flag} is for collaborative projects, not a mixture of experts"
    return None


def run(args: argparse.Namespace) -> int:
    return run_command(lambda: _run(args), interrupted=130)
