"""LocalDmoeRun: a decentralized mixture-of-experts collaboration on this computer
(``barnraise swarm --project dmoe``).

Learning@home's two roles, each its own OS process as if on its own machine, on loopback:

1. ``servers`` expert servers (``barnraise experts``): the first starts the DHT, the others join
   through it; the grid's experts are dealt out among them (server ``i`` hosts every
   ``servers``-th uid from ``i``), with one shared checkpoint folder, so a server started later with
   the same uids takes its experts over;
2. ``trainers`` asynchronous trainers (``barnraise peer`` with the dmoe manifest), each with its own
   data order, finding the experts through the DHT.

It then passes on what the trainers report: every ``report_every`` seconds one line with the mean
of the trainers' latest losses, the accuracy on held-out digits they measured last, their samples/s
together, the share of expert calls answered, and the experts' samples served. The swarm leaves a
record for engines on this computer (``record``), so an engine attached with ``--local-swarm``
hosts experts beside the servers. With ``moderated`` it first starts a coordinator of its own
(``moderated``), and every process logs in and shows its access pass on every connection. Stopping
goes in reverse: the record, the trainers, the servers (each saves its experts' last checkpoints),
the coordinator. It then says how the servers stopped (``DmoeStop``, from their ``stopped`` lines):
how many saved their experts, which experts no trainer ever chose (those have no checkpoint), and,
as problems, a server that had to be killed or ended without saving.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeGuard

from core.config.paths import UserDirs
from core.moe.client.trainer_events import MoEAccuracy, MoEProgress, report_from_json
from core.moe.grid import ExpertGrid
from core.project import DmoeManifest, load_dmoe_manifest
from core.swarm.children import STOP_GRACE, ChildProcess, spawn_command
from core.swarm.moderated import ORGANIZER, ModeratedSwarm, start_coordinator
from core.swarm.record import LocalSwarm, LocalSwarmError, new_record, remove_swarm, write_swarm
from core.util.errors import WireFormatError
from core.util.tasks import BackgroundTasks

LOOPBACK = ("--host", "127.0.0.1", "--port", "0")
READY_TIMEOUT = 120.0
"""Seconds a process has to say it is ready (it loads torch first)."""
EVIDENCE_WINDOW = 10.0
"""Seconds of poisoned calls a server gathers into one accusation per caller (the shortest)."""
LAST_LINES_TIMEOUT = 5.0
"""Seconds to finish reading a stopped server's last lines (its output ends when it exits)."""


@dataclass(frozen=True)
class DmoeSwarmOptions:
    manifest: Path
    servers: int = 3
    trainers: int = 4
    seconds: float | None = None
    """Stop this long after the start (None: only when told)."""
    work_dir: Path | None = None
    """Logs and checkpoints (default: ``<cache>/swarm/<project>``)."""
    report_every: float = 5.0
    moderated: bool = False
    """Run it as a moderated project: its own coordinator, every process logged in with a pass."""

    def __post_init__(self) -> None:
        if self.servers < 1:
            raise ValueError(
                f"a mixture of experts needs 1 or more expert servers, not {self.servers}"
            )
        if self.trainers < 0:
            raise ValueError(f"a swarm has 0 or more trainers, not {self.trainers}")
        if not self.report_every > 0:
            raise ValueError("report_every must be positive seconds")


@dataclass
class DmoeStanding:
    """What the run has heard so far; one line of output is made from it."""

    losses: dict[str, MoEProgress] = field(default_factory=dict)
    accuracy: dict[str, MoEAccuracy] = field(default_factory=dict)
    served: dict[str, int] = field(default_factory=dict)
    """Expert samples (forward + backward) each server reported last."""
    stopped: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)
    """Per server that said it stopped: the experts it saved then, and those that never learned."""

    def line(self, elapsed: float) -> DmoeLine | None:
        if not self.losses:
            return None
        latest = list(self.losses.values())
        accuracies = [a.accuracy for a in self.accuracy.values()]
        return DmoeLine(
            seconds=elapsed,
            steps=sum(p.steps for p in latest),
            loss=statistics.fmean(p.loss for p in latest),
            accuracy=statistics.fmean(accuracies) if accuracies else None,
            samples_per_second=sum(p.samples_per_second for p in latest),
            answered=min(p.experts_answered for p in latest),
            failed=sum(p.failed for p in latest),
            trainers=len(latest),
            expert_samples=sum(self.served.values()),
        )


@dataclass(frozen=True)
class ReceiptCredit:
    """At a moderated run's end: what the coordinator credited by trainers' receipts, beside what
    the servers said they computed (their last ``served`` counts)."""

    credited: int
    served: int
    accounts: int
    """Accounts credited with expert samples."""

    @property
    def share(self) -> float:
        return self.credited / self.served if self.served else 1.0


@dataclass(frozen=True)
class DmoeLine:
    seconds: float
    steps: int
    """Steps of all trainers together."""
    loss: float
    """Mean of the trainers' latest losses (each the mean over its last report's steps)."""
    accuracy: float | None
    samples_per_second: float
    answered: float
    """The lowest share of expert calls answered, over the trainers."""
    failed: int
    trainers: int
    expert_samples: int


@dataclass(frozen=True)
class DmoeStop:
    """How the expert servers stopped."""

    servers: int
    saved_by: int
    """Servers that stopped by themselves after their last save (they said so)."""
    saved: int
    """Experts checkpointed at the stop (the others learned nothing since their last checkpoint)."""
    untrained: list[str]
    """Experts no trainer ever chose: nothing to save (a server that takes one over builds it
    alike from its uid), so they have no checkpoint."""
    checkpoints: Path


class DmoeOutput(Protocol):
    def running(self, servers: int, trainers: int, address: str, logs: Path) -> None:
        """Every process has started; ``address`` is the first server's (the DHT's entry)."""

    def progress(self, line: DmoeLine) -> None:
        """The collaboration now."""

    def stopped(self, stop: DmoeStop) -> None:
        """The expert servers stopped (problems on the way came first)."""

    def problem(self, message: str) -> None:
        """Something went wrong (the run may go on)."""

    def receipts(self, credited: ReceiptCredit) -> None:
        """A moderated run's end: the expert samples the leaderboard credited by receipts."""


class LocalDmoeRun:
    def __init__(
        self, options: DmoeSwarmOptions, output: DmoeOutput, *, dirs: UserDirs | None = None
    ) -> None:
        self.options = options
        self.output = output
        self.dirs = dirs or UserDirs.default()
        self.standing = DmoeStanding()
        self._servers: list[ChildProcess] = []
        self._trainers: list[ChildProcess] = []
        self._server_readers: list[asyncio.Task[None]] = []
        self._checkpoints: Path | None = None
        self._running = False
        """Every process started (a run that failed to start has said why already)."""
        self._announced: LocalSwarm | None = None
        self._moderated: ModeratedSwarm | None = None
        self._manifest_path = options.manifest
        """The manifest the processes use (a moderated run's own copy)."""
        self._tasks = BackgroundTasks("dmoe-swarm")

    async def run(self, stop: asyncio.Event) -> int:
        """Start, report until ``stop`` is set or the time is up, stop everything; 0, or 1 when a
        server did not start (its log says why)."""
        started = time.monotonic()
        manifest = await asyncio.to_thread(load_dmoe_manifest, self.options.manifest)
        work = self.options.work_dir or self.dirs.cache / "swarm" / manifest.project.name
        (work / "logs").mkdir(parents=True, exist_ok=True)
        try:
            if self.options.moderated:
                self._moderated = await start_coordinator(self.options.manifest, work)
                self._manifest_path = self._moderated.manifest_path
            address = await self._start_servers(manifest, work)
            if address is None:
                return 1
            if stop.is_set():
                return 0
            await self._start_trainers(work, address)
            self._announce(manifest, address)
            self._running = True
            self.output.running(len(self._servers), len(self._trainers), address, work / "logs")
            await self._report(stop, started)
        finally:
            await self._close()
        return 0

    async def _start_servers(self, manifest: DmoeManifest, work: Path) -> str | None:
        grid = ExpertGrid(manifest.grid.prefix, manifest.grid.shape)
        uids = list(grid.all_uids())
        count = min(self.options.servers, len(uids))
        self._checkpoints = work / "experts"
        common = ["experts", "--manifest", str(self._manifest_path), *LOOPBACK]
        common += ["--checkpoints", str(self._checkpoints), "--stats-every", "5"]
        # a demo lasts minutes: say who sent poisoned calls within seconds, not a minute
        common += ["--evidence-window", str(EVIDENCE_WINDOW)]
        address: str | None = None
        for i in range(count):
            args = [*common, "--uids", *uids[i::count]]
            if address is not None:
                args += ["--initial-peers", address]
            else:
                # the first server is the swarm's backbone: it relays, and reports the evidence
                args += ["--offer-relay", "--collect-evidence"]
            # every server runs as the organizer, whose account trains nothing: receipts count
            # between accounts only, so a volunteer's server would not be credited for the work
            # it did for that volunteer's own trainer, and the run's last line could not compare
            # the leaderboard with what the servers computed
            child = await self._spawn(f"experts-{i}", args, work, ORGANIZER)
            self._servers.append(child)
            ready = await self._ready(child)
            if ready is None:
                self.output.problem(f"expert server {i} did not start; see its log")
                return None
            address = address or ready
            self._server_readers.append(self._tasks.spawn(f"read-{child.name}", self._read(child)))
        return address

    async def _start_trainers(self, work: Path, address: str) -> None:
        for i in range(self.options.trainers):
            args = ["peer", "--manifest", str(self._manifest_path), *LOOPBACK]
            args += ["--initial-peers", address, "--data-seed", str(i + 1), "--threads", "1"]
            child = await self._spawn(f"trainer-{i}", args, work, i)
            self._trainers.append(child)
            self._tasks.spawn(f"read-{child.name}", self._read(child))

    async def _spawn(self, name: str, args: list[str], work: Path, user: str | int) -> ChildProcess:
        """Start one process; in a moderated run logged in as ``user`` (a name, or the index of
        a volunteer's account)."""
        password = None
        if self._moderated is not None:
            name_of = user if isinstance(user, str) else self._moderated.user_for_peer(user)
            args = [*args, "--username", name_of]
            password = self._moderated.passwords[name_of]
        return await spawn_command(name, args, work / "logs" / f"{name}.log", password=password)

    async def _ready(self, child: ChildProcess) -> str | None:
        """The address on a child's ready line, or None if it exits or takes too long."""
        try:
            async with asyncio.timeout(READY_TIMEOUT):
                while (line := await child.json_line()) is not None:
                    if line.get("event") == "ready" and isinstance(line.get("address"), str):
                        return str(line["address"])
        except TimeoutError:
            pass
        return None

    async def _read(self, child: ChildProcess) -> None:
        """A child's reports until it exits; a broken line is skipped."""
        while (line := await child.json_line()) is not None:
            if line.get("event") == "served":
                forward, backward = line.get("forward_samples"), line.get("backward_samples")
                if isinstance(forward, int) and isinstance(backward, int):
                    self.standing.served[child.name] = forward + backward
                continue
            if line.get("event") == "stopped" and child in self._servers:
                saved, untrained = line.get("saved"), line.get("untrained")
                if _names(saved) and _names(untrained):
                    self.standing.stopped[child.name] = (list(saved), list(untrained))
                continue
            try:
                report = report_from_json(line)
            except WireFormatError:
                continue
            if isinstance(report, MoEProgress):
                self.standing.losses[child.name] = report
            elif isinstance(report, MoEAccuracy):
                self.standing.accuracy[child.name] = report

    async def _report(self, stop: asyncio.Event, started: float) -> None:
        seconds = self.options.seconds
        while not stop.is_set():
            elapsed = time.monotonic() - started
            left = None if seconds is None else seconds - elapsed
            if left is not None and left <= 0:
                return
            wait = (
                self.options.report_every if left is None else min(left, self.options.report_every)
            )
            try:
                await asyncio.wait_for(stop.wait(), wait)
            except TimeoutError:
                line = self.standing.line(time.monotonic() - started)
                if line is not None:
                    self.output.progress(line)

    def _announce(self, manifest: DmoeManifest, address: str) -> None:
        """The record that lets an engine here attach with ``--local-swarm`` (and host experts)."""
        record = new_record(
            project=manifest.project.name,
            description=manifest.project.description,
            manifest=self._manifest_path,
            initial_peers=[address],
            data_base="",
            children=[child.proc.pid for child in (*self._servers, *self._trainers)],
            moderated=self._moderated is not None,
            trainers=len(self._trainers),
        )
        try:
            write_swarm(self.dirs, record)
        except LocalSwarmError as exc:
            self.output.problem(f"warning: {exc}; engines here will not find it")
            return
        self._announced = record

    async def _close(self) -> None:
        if self._announced is not None:
            remove_swarm(self.dirs, self._announced)
            self._announced = None
        try:
            await asyncio.gather(*(child.stop() for child in self._trainers))
            stopped = await asyncio.gather(*(child.stop(STOP_GRACE) for child in self._servers))
            if self._server_readers:  # a server's last line, ``stopped``, may still be unread
                await asyncio.wait(self._server_readers, timeout=LAST_LINES_TIMEOUT)
            self._tell_stop(stopped)
            if self._moderated is not None and self._running:
                await self._tell_receipts(self._moderated)
        finally:
            await self._tasks.close()
            if self._moderated is not None:
                await self._moderated.service.close()

    async def _tell_receipts(self, swarm: ModeratedSwarm) -> None:
        """The servers posted their last receipts as they stopped: compare the leaderboard's
        expert samples with what the servers computed."""
        rows = swarm.service.store.receipts.credited_by_user()
        credited = sum(int(row["expert_samples"]) for row in rows)
        served = sum(self.standing.served.values())
        self.output.receipts(ReceiptCredit(credited, served, len(rows)))

    def _tell_stop(self, stopped_in_time: list[bool]) -> None:
        if not self._running or self._checkpoints is None:
            return
        said = self.standing.stopped
        for child, in_time in zip(self._servers, stopped_in_time, strict=True):
            if not in_time:
                self.output.problem(
                    f"expert server {child.name} did not stop within {STOP_GRACE:g} s and was "
                    "killed: what its experts learned since their last checkpoint is lost"
                )
            elif child.name not in said:
                self.output.problem(
                    f"expert server {child.name} ended without saving its experts; see its log"
                )
        self.output.stopped(
            DmoeStop(
                servers=len(self._servers),
                saved_by=len(said),
                saved=sum(len(saved) for saved, _ in said.values()),
                untrained=sorted(uid for _, untrained in said.values() for uid in untrained),
                checkpoints=self._checkpoints,
            )
        )


def _names(value: object) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)
