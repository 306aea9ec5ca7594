"""``barnraise swarm``: a whole collaboration on this machine, the main job.

    barnraise swarm --peers 3 --minutes 3

Writes the demo corpus and trains its tokenizer (once, in the cache), serves the shards over a local
HTTP server, starts an auxiliary/backbone peer and N trainer peers on loopback, each its own OS
process as if on its own machine, and prints one line per epoch (epoch, loss, samples/s, peers) from
the auxiliary peer's metrics. Ctrl-C, or the end of ``--minutes``, stops every process cleanly.
With ``--moderated`` it runs as a moderated project with a coordinator, accounts and access passes,
and prints the leaderboard at the end (see ``core.cli.moderated``).

Once its peers run, the swarm announces itself to the engine on this computer with a record in the
user's runtime folder (``core.project.local_swarm``): the desktop app offers it on first run, and an
engine attached with ``--local-swarm`` joins it wherever it listens this time. The record goes when
the swarm stops.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from core.cli.access import PASSWORD_VARIABLE
from core.cli.moderated import ORGANIZER, ModeratedSwarm, print_leaderboard, start_coordinator
from core.cli.signals import run_command, stop_on_signals
from core.config.paths import UserDirs
from core.project import (
    LocalSwarm,
    LocalSwarmError,
    Manifest,
    load_manifest,
    remove_swarm,
    write_swarm,
)
from core.project.local_swarm import new_record
from core.training.events import PeerEvent, PeerMetrics, PeerReady, from_json
from core.util.errors import WireFormatError

REPOSITORY = Path(__file__).resolve().parents[2]
DEMO_MANIFEST = REPOSITORY / "resources" / "demo" / "project.toml"
# Windows has no SIGTERM for children: they get CTRL_BREAK in their own process group
_STOP_SIGNAL = getattr(signal, "CTRL_BREAK_EVENT", signal.SIGTERM)


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
    parser.add_argument("--manifest", type=Path, default=DEMO_MANIFEST, help="default: the demo")
    parser.add_argument("--work-dir", type=Path, default=None, help="corpus, logs, checkpoints")
    parser.add_argument("--target-batch-size", type=int, default=None)
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
    parser.set_defaults(run=run)


def prepare_demo_data(manifest: Manifest, root: Path) -> None:
    """The shards and tokenizer the demo manifest names, written once under ``root``."""
    # imported here: torch and datasets load slowly, and other commands never need them
    from core.data import (  # noqa: PLC0415
        DataSource,
        load_tokenizer,
        stream_texts,
        train_tokenizer,
        write_demo_corpus,
    )

    write_demo_corpus(root / "shards", shards=8, megabytes=4.0, seed=0)
    tokenizer = root / manifest.data.tokenizer
    if tokenizer.exists():
        with contextlib.suppress(Exception):
            load_tokenizer(tokenizer)
            return
    sources = [
        DataSource(tuple(str(root / u) for u in s.urls), format=s.format, text_field=s.text_field)
        for s in manifest.data.sources
    ]
    texts = stream_texts(sources, seed=0, shuffle_buffer=0)
    sample = (next(texts) for _ in range(20_000))
    train_tokenizer(sample, manifest.data.tokenizer_vocab_size, tokenizer)


class ChildProcess:
    def __init__(self, name: str, proc: asyncio.subprocess.Process) -> None:
        self.name = name
        self.proc = proc

    async def event(self) -> PeerEvent | None:
        """The next peer event on its stdout (None at its end); other lines are skipped."""
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            with contextlib.suppress(ValueError, WireFormatError):
                return from_json(json.loads(line))
        return None

    async def stop(self, grace: float = 15.0) -> None:
        if self.proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(_STOP_SIGNAL)
        try:
            await asyncio.wait_for(self.proc.wait(), grace)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()


async def spawn_command(
    name: str, args: list[str], log_path: Path, *, password: str | None = None
) -> ChildProcess:
    """``barnraise ARGS`` as a child process, its stdout piped, its stderr appended to ``log_path``
    (``password``: handed over in the environment, for moderated projects)."""
    os.makedirs(log_path.parent, exist_ok=True)
    env = None
    if password is not None:
        env = {**os.environ, PASSWORD_VARIABLE: password}
    with log_path.open("ab") as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "core.cli.main",
            "--log-level",
            os.environ.get("BARNRAISE_SWARM_LOG_LEVEL", "info"),  # for debugging a swarm
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            cwd=REPOSITORY,
            # a process group of its own: Ctrl-C in the terminal reaches only the swarm, which then
            # stops each child in order
            start_new_session=os.name != "nt",
            creationflags=getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0),
            limit=1 << 20,
            env=env,
        )
    return ChildProcess(name, proc)


async def _run(args: argparse.Namespace) -> int:
    if problem := _usage_problem(args):
        print(f"barnraise swarm: {problem}", file=sys.stderr)
        return 2
    manifest = load_manifest(args.manifest)
    work = args.work_dir or UserDirs.default().cache / "swarm" / manifest.project.name
    data_root = work / "data"
    started = time.monotonic()
    print(f"preparing the demo data in {data_root} …", flush=True)
    await asyncio.to_thread(prepare_demo_data, manifest, data_root)
    (work / "logs").mkdir(parents=True, exist_ok=True)
    from core.data import ShardServer  # noqa: PLC0415 - see prepare_demo_data

    server = ShardServer(data_root)
    base = await server.start()
    stop = asyncio.Event()
    stop_on_signals(stop)
    moderated = (
        await _start_coordinator(args.manifest, work, args.keep_accounts)
        if args.moderated
        else None
    )
    manifest_path: Path = moderated.manifest_path if moderated is not None else args.manifest
    threads = max(1, ((os.cpu_count() or 2) - 1) // max(1, args.peers))  # a core for loops, data
    common = ["--manifest", str(manifest_path), "--data-base", base, "--threads", str(threads)]
    if args.target_batch_size:
        common += ["--target-batch-size", str(args.target_batch_size)]
    children: list[ChildProcess] = []
    dirs = UserDirs.default()
    announced: LocalSwarm | None = None
    try:
        aux = await spawn_command(
            "aux",
            [
                "aux",
                *common,
                "--work-dir",
                str(work / "aux"),
                "--checkpoint-every",
                str(args.checkpoint_every),
                *_login(moderated, ORGANIZER),
            ],
            work / "logs" / "aux.log",
            password=_password(moderated, ORGANIZER),
        )
        children.append(aux)
        ready = await asyncio.wait_for(aux.event(), 120)
        if not isinstance(ready, PeerReady):
            print("barnraise swarm: the auxiliary peer did not start; see its log", file=sys.stderr)
            return 1
        address = ready.address
        await _spawn_trainers(children, args.peers, common, address, work=work, moderated=moderated)
        announced = _announce(
            dirs,
            manifest,
            manifest_path=manifest_path,
            address=address,
            base=base,
            children=children,
            moderated=moderated is not None,
        )
        _print_joining(len(children) - 1, work, manifest_path, address, base)
        await _follow(aux, stop, args.minutes * 60 if args.minutes else None, started)
    finally:
        if announced is not None:  # first: nobody should try to join a swarm that is stopping
            remove_swarm(dirs, announced)
        await asyncio.gather(*(child.stop() for child in reversed(children)))
        await server.close()
        if moderated is not None:
            try:
                await print_leaderboard(moderated)
            finally:
                await moderated.service.close()
    print("stopped", flush=True)
    return 0


def _usage_problem(args: argparse.Namespace) -> str | None:
    if args.peers < 0:
        return "--peers must be 0 or more"
    if args.keep_accounts and not args.moderated:
        return "--keep-accounts goes with --moderated (an open swarm has no accounts)"
    return None


async def _start_coordinator(manifest: Path, work: Path, keep_accounts: bool) -> ModeratedSwarm:
    moderated = await start_coordinator(manifest, work, keep_accounts=keep_accounts)
    print(f"coordinator at {moderated.service.url}; manifest {moderated.manifest_path}", flush=True)
    return moderated


def _announce(
    dirs: UserDirs,
    manifest: Manifest,
    *,
    manifest_path: Path,
    address: str,
    base: str,
    children: list[ChildProcess],
    moderated: bool,
) -> LocalSwarm | None:
    """Tell engines on this computer where this swarm runs (see ``core.project.local_swarm``).

    Without the record the swarm still works (``join with`` says how): a failure is a warning."""
    record = new_record(
        project=manifest.project.name,
        description=manifest.project.description,
        manifest=manifest_path,
        initial_peers=[address],
        data_base=base,
        children=[child.proc.pid for child in children],
        moderated=moderated,
        trainers=len(children) - 1,  # all but the auxiliary peer
    )
    try:
        write_swarm(dirs, record)
    except LocalSwarmError as exc:
        print(f"barnraise swarm: warning: {exc}; engines here will not find it", file=sys.stderr)
        return None
    return record


def _print_joining(trainers: int, work: Path, manifest_path: Path, address: str, base: str) -> None:
    print(
        f"{trainers} trainer(s) and an auxiliary peer on loopback; data at {base}; "
        f"logs in {work / 'logs'}",
        flush=True,
    )
    # how an engine (``barnraise engine``) joins this swarm as one more trainer
    print(
        f"join with: barnraise ctl attach {manifest_path} --initial-peers {address} "
        f"--data-base {base}",
        flush=True,
    )
    print("or from an engine on this computer: barnraise ctl attach --local-swarm", flush=True)


async def _spawn_trainers(
    children: list[ChildProcess],
    count: int,
    common: list[str],
    address: str,
    *,
    work: Path,
    moderated: ModeratedSwarm | None,
) -> None:
    """Start the trainers, each added to ``children`` at once (so a failure stops the others)."""
    for i in range(count):
        peer_args = ["peer", *common, "--initial-peers", address, "--data-seed", str(i + 1)]
        peer_args += ["--work-dir", str(work / f"peer-{i}")]
        user = moderated.user_for_peer(i) if moderated is not None else None
        peer_args += _login(moderated, user)
        children.append(
            await spawn_command(
                f"peer-{i}",
                peer_args,
                work / "logs" / f"peer-{i}.log",
                password=_password(moderated, user),
            )
        )


def _login(moderated: ModeratedSwarm | None, user: str | None) -> list[str]:
    return [] if moderated is None or user is None else ["--username", user]


def _password(moderated: ModeratedSwarm | None, user: str | None) -> str | None:
    return None if moderated is None or user is None else moderated.passwords[user]


async def _follow(
    aux: ChildProcess, stop: asyncio.Event, seconds: float | None, started: float
) -> None:
    """Print the auxiliary peer's metrics, one line per epoch, until told to stop."""
    stopping = asyncio.create_task(stop.wait())
    try:
        while not stop.is_set():
            left = None if seconds is None else seconds - (time.monotonic() - started)
            if left is not None and left <= 0:
                return
            reading = asyncio.create_task(aux.event())
            done, _ = await asyncio.wait(
                {reading, stopping}, timeout=left, return_when="FIRST_COMPLETED"
            )
            if reading not in done:
                reading.cancel()
                continue
            event = reading.result()
            if event is None:
                print("barnraise swarm: the auxiliary peer exited", file=sys.stderr)
                return
            if isinstance(event, PeerMetrics):
                loss = event.loss
                shown = f"{loss:.4f}" if loss is not None else "   -  "
                print(
                    f"epoch {event.epoch:>4}  loss {shown}  "
                    f"samples/s {event.samples_per_second:>8.1f}  peers {event.alive_peers}",
                    flush=True,
                )
    finally:
        stopping.cancel()


def run(args: argparse.Namespace) -> int:
    return run_command(lambda: _run(args), interrupted=130)
