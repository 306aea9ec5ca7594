"""LocalSwarmRun: one run of the local swarm, a whole collaboration on this computer.

It writes the demo data (once, in the cache; ``demo_data``), serves the shards over a local HTTP
server, starts a coordinator when moderated (``moderated``), then a backbone and N
trainer peers on loopback (``children``), each its own OS process as if on its own machine. Once
they run it announces itself to engines on this computer with its record (``record``), passes on the
backbone's metrics, one per epoch, until told to stop or its time is up, and then stops
everything in reverse: the record first (nobody should join a swarm that is stopping), the peers,
the shard server, and the coordinator after its standings are read.

With ``byzantine`` the last trainers misbehave on purpose (``barnraise peer --attack``;
``core.swarm.byzantine``), to show the defences at work: the swarm names them when they start,
and passes on the backbone's accusations as they come (``accused``), with a tally at the end.
The trainers' own events are read and dropped (a pipe nobody reads would fill and stall them).

What it has to say goes to a ``SwarmOutput``: ``barnraise swarm`` prints it (``core.cli.swarm.text``).
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from core.config.paths import UserDirs
from core.net.errors import AddressError
from core.net.host.address import PeerAddress
from core.project import Manifest, load_manifest
from core.swarm.accused import Accusations, LogTail
from core.swarm.children import ChildProcess, spawn_command
from core.swarm.demo_data import DEMO_MANIFEST, prepare_demo_data
from core.swarm.moderated import (
    ORGANIZER,
    ModeratedSwarm,
    Standings,
    name_backbone,
    standings,
    start_coordinator,
)
from core.swarm.record import LocalSwarm, LocalSwarmError, new_record, remove_swarm, write_swarm
from core.util.tasks import BackgroundTasks
from core.worker.events import PeerEvaluation, PeerMetrics, PeerReady

if TYPE_CHECKING:
    from core.data import ShardServer

LOOPBACK = ("--host", "127.0.0.1", "--port", "0")
"""A demo swarm's peers listen on loopback, on any free port: it never leaves this computer."""
READY_TIMEOUT = 120.0
"""Seconds the backbone has to say it is ready (it loads torch and the model first)."""
EVIDENCE_POLL = 1.0
"""Seconds between reads of the backbone's log for accusations."""
ATTACKS = ("scale", "sign-flip", "noise", "nan", "lying-reducer")
"""What ``byzantine`` trainers can do (``core.swarm.byzantine.Attack``). With a lying reducer
every peer of the swarm verifies reducers (``--verify-reducers``), which is what catches it."""


@dataclass(frozen=True)
class SwarmOptions:
    manifest: Path = DEMO_MANIFEST
    peers: int = 3
    """Trainer peers (0: only the backbone)."""
    seconds: float | None = None
    """Stop this long after the start, data preparation included (None: only when told)."""
    work_dir: Path | None = None
    """Corpus, logs, checkpoints (default: ``<cache>/swarm/<project>``)."""
    target_batch_size: int | None = None
    mode: str | None = None
    """``dedloc`` or ``diloco`` instead of the manifest's training.mode."""
    round_seconds: float | None = None
    """Instead of the manifest's."""
    checkpoint_every: int = 10
    moderated: bool = False
    keep_accounts: bool = False
    """With ``moderated``: keep the accounts made in earlier runs (the leaderboard restarts)."""
    byzantine: int = 0
    """Trainers (the last ones) that misbehave on purpose, to show the defences; 0 normally."""
    attack: str = "scale"
    """What they do: one of ``ATTACKS``."""

    def __post_init__(self) -> None:
        if self.peers < 0:
            raise ValueError(f"a swarm has 0 or more trainer peers, not {self.peers}")
        if not 0 <= self.byzantine <= self.peers:
            raise ValueError(
                f"--byzantine is how many of the {self.peers} trainer(s) misbehave, "
                f"not {self.byzantine}"
            )
        if self.attack not in ATTACKS:
            raise ValueError(f"no attack {self.attack!r} in a swarm; one of {', '.join(ATTACKS)}")
        if self.keep_accounts and not self.moderated:
            raise ValueError("keep_accounts goes with moderated (an open swarm has no accounts)")


@dataclass(frozen=True)
class Joining:
    """Where the swarm runs this time, once its peers have started."""

    trainers: int
    manifest: Path
    """The manifest its peers use (a moderated swarm's own copy)."""
    address: str
    """The backbone's address: the initial peer to join through."""
    data_base: str
    """The shard server's URL."""
    logs: Path


class SwarmOutput(Protocol):
    def preparing(self, data_root: Path) -> None:
        """The demo data is being written (or checked) there."""

    def coordinator(self, url: str, manifest: Path) -> None:
        """A moderated swarm's coordinator listens at ``url``; its peers use ``manifest``."""

    def running(self, joining: Joining) -> None:
        """Every peer has started."""

    def metrics(self, event: PeerMetrics) -> None:
        """The backbone's metrics of one epoch."""

    def evaluation(self, event: PeerEvaluation) -> None:
        """The backbone measured its replica on the held-out text (``event.floor``: the
        unigram floor to show beside the loss, where it has one)."""

    def problem(self, message: str) -> None:
        """Something went wrong (the run may go on: a record that could not be written)."""

    def standings(self, standings: Standings) -> None:
        """A moderated swarm's leaderboard, at its end."""

    def byzantine(self, name: str, peer: str, attack: str) -> None:
        """Trainer ``name`` (PeerID ``peer``) misbehaves on purpose (``--byzantine``): ``attack``."""

    def evidence(self, line: str) -> None:
        """The backbone named an accused peer (its line, with the swarm's name added)."""

    def accused(self, lines: list[str]) -> None:
        """At the end: each accused peer and how often (nothing when nobody was)."""


class LocalSwarmRun:
    def __init__(
        self, options: SwarmOptions, output: SwarmOutput, *, dirs: UserDirs | None = None
    ) -> None:
        self.options = options
        self.output = output
        self.dirs = dirs or UserDirs.default()
        """Where the record goes (and the work folder, by default)."""
        self._server: ShardServer | None = None
        self._moderated: ModeratedSwarm | None = None
        self._children: list[ChildProcess] = []
        self._announced: LocalSwarm | None = None
        self._tasks = BackgroundTasks("swarm")
        self._accusations = Accusations()
        self._backbone_log: LogTail | None = None

    async def run(self, stop: asyncio.Event) -> int:
        """Start, pass on metrics until ``stop`` is set or the time is up, and stop everything.

        Returns 0, or 1 when the backbone did not start (its log says why)."""
        started = time.monotonic()
        try:
            manifest, work, base = await self._serve_data()
            if stop.is_set():  # told to stop while the data was being written: start no peers
                return 0
            backbone = await self._start_peers(manifest, work, base)
            if backbone is None:
                return 1
            await self._follow(backbone, stop, started)
        finally:
            await self._close()
        return 0

    async def _serve_data(self) -> tuple[Manifest, Path, str]:
        """The manifest, the work folder and the shard server's URL, once the data is there."""
        manifest = load_manifest(self.options.manifest)
        work = self.options.work_dir or self.dirs.cache / "swarm" / manifest.project.name
        self.output.preparing(work / "data")
        await asyncio.to_thread(prepare_demo_data, manifest, work / "data")
        (work / "logs").mkdir(parents=True, exist_ok=True)
        from core.data import ShardServer  # noqa: PLC0415 - torch: see prepare_demo_data

        self._server = ShardServer(work / "data")
        return manifest, work, await self._server.start()

    async def _start_peers(self, manifest: Manifest, work: Path, base: str) -> ChildProcess | None:
        """The coordinator (when moderated), the peers and the record; the backbone, or None
        if it did not start."""
        options = self.options
        # the backbone's key named in the swarm's manifest: its word confirms the model's state
        manifest_path, backbone_key = await asyncio.to_thread(name_backbone, options.manifest, work)
        if options.moderated:
            self._moderated = await start_coordinator(
                manifest_path, work, keep_accounts=options.keep_accounts
            )
            manifest_path = self._moderated.manifest_path
            self.output.coordinator(self._moderated.service.url, manifest_path)
        threads = max(1, ((os.cpu_count() or 2) - 1) // max(1, options.peers))  # a core for loops
        common = ["--manifest", str(manifest_path), "--data-base", base, "--threads", str(threads)]
        common += LOOPBACK  # the demo swarm lives inside this computer
        if options.byzantine and options.attack == "lying-reducer":
            common.append("--verify-reducers")
        if options.target_batch_size:
            common += ["--target-batch-size", str(options.target_batch_size)]
        if options.mode is not None:
            common += ["--mode", options.mode]
        if options.round_seconds is not None:
            common += ["--round-seconds", str(options.round_seconds)]
        backbone_args = ["backbone", *common, "--work-dir", str(work / "backbone")]
        backbone_args += ["--identity", str(backbone_key)]
        backbone_args += ["--checkpoint-every", str(options.checkpoint_every)]
        self._backbone_log = LogTail.at_end(work / "logs" / "backbone.log")  # this run's lines only
        backbone = await self._spawn("backbone", backbone_args, work, ORGANIZER)
        try:
            ready = await asyncio.wait_for(backbone.event(), READY_TIMEOUT)
        except TimeoutError:
            ready = None
        if not isinstance(ready, PeerReady):
            self.output.problem("the backbone did not start; see its log")
            return None
        address = ready.address
        self._tasks.spawn("evidence", self._pass_on_evidence())
        for i in range(options.peers):
            peer_args = ["peer", *common, "--initial-peers", address, "--data-seed", str(i + 1)]
            peer_args += ["--work-dir", str(work / f"peer-{i}")]
            byzantine = i >= options.peers - options.byzantine
            if byzantine:
                peer_args += ["--attack", options.attack]
            user = self._moderated.user_for_peer(i) if self._moderated is not None else None
            child = await self._spawn(f"peer-{i}", peer_args, work, user)
            self._tasks.spawn(f"events-{child.name}", self._read_trainer(child, byzantine))
        self._announce(manifest, manifest_path, address, base)
        self.output.running(Joining(options.peers, manifest_path, address, base, work / "logs"))
        return backbone

    async def _spawn(
        self, name: str, args: list[str], work: Path, user: str | None
    ) -> ChildProcess:
        """Start one peer (logged in as ``user`` when moderated), kept at once so that a failure
        of the next stops it too."""
        password = None
        if self._moderated is not None and user is not None:
            args = [*args, "--username", user]
            password = self._moderated.passwords[user]
        child = await spawn_command(name, args, work / "logs" / f"{name}.log", password=password)
        self._children.append(child)
        return child

    def _announce(self, manifest: Manifest, manifest_path: Path, address: str, base: str) -> None:
        """Tell engines on this computer where this swarm runs (the record).

        Without the record the swarm still works (the joining lines say how): a failure is a
        problem reported, not the end of the run."""
        record = new_record(
            project=manifest.project.name,
            description=manifest.project.description,
            manifest=manifest_path,
            initial_peers=[address],
            data_base=base,
            children=[child.proc.pid for child in self._children],
            moderated=self._moderated is not None,
            trainers=len(self._children) - 1,  # all but the backbone
        )
        try:
            write_swarm(self.dirs, record)
        except LocalSwarmError as exc:
            self.output.problem(f"warning: {exc}; engines here will not find it")
            return
        self._announced = record

    async def _follow(self, backbone: ChildProcess, stop: asyncio.Event, started: float) -> None:
        """Pass on the backbone's metrics until told to stop or the time is up."""
        seconds = self.options.seconds
        stopping = asyncio.create_task(stop.wait(), name="swarm/stop")
        try:
            while not stop.is_set():
                left = None if seconds is None else seconds - (time.monotonic() - started)
                if left is not None and left <= 0:
                    return
                reading = asyncio.create_task(backbone.event(), name="swarm/backbone-event")
                done, _ = await asyncio.wait(
                    {reading, stopping}, timeout=left, return_when="FIRST_COMPLETED"
                )
                if reading not in done:
                    reading.cancel()
                    continue
                event = reading.result()
                if event is None:
                    self.output.problem("the backbone exited")
                    return
                if isinstance(event, PeerMetrics):
                    self.output.metrics(event)
                elif isinstance(event, PeerEvaluation):
                    self.output.evaluation(event)
        finally:
            stopping.cancel()

    async def _read_trainer(self, child: ChildProcess, byzantine: bool) -> None:
        """A trainer's events until it exits: its PeerID from ``ready`` (for the accusations), the
        rest dropped."""
        while (event := await child.event()) is not None:
            if not isinstance(event, PeerReady):
                continue
            try:
                peer_id = PeerAddress.parse(event.address).peer_id
            except AddressError:
                peer_id = None
            if peer_id is None:
                continue  # accusations will show its PeerID without the swarm's name
            peer = str(peer_id)
            self._accusations.started(child.name, peer, byzantine=byzantine)
            if byzantine:
                self.output.byzantine(child.name, peer, self.options.attack)

    async def _pass_on_evidence(self) -> None:
        while True:
            self._read_evidence()
            await asyncio.sleep(EVIDENCE_POLL)

    def _read_evidence(self) -> None:
        if self._backbone_log is None:
            return
        for line in self._backbone_log.new_lines():
            if (accusation := self._accusations.read(line)) is not None:
                self.output.evidence(accusation)

    async def _close(self) -> None:
        """Stop what was started, in reverse; safe after a start that failed half-way."""
        if self._announced is not None:  # first: nobody should try to join a swarm that is stopping
            remove_swarm(self.dirs, self._announced)
            self._announced = None
        try:
            await asyncio.gather(*(child.stop() for child in reversed(self._children)))
        finally:
            await self._tasks.close()
            self._read_evidence()  # what the backbone wrote on its way out
            if self._accusations.counts:
                self.output.accused(self._accusations.summary())
            if self._server is not None:
                await self._server.close()
            if self._moderated is not None:
                try:
                    self.output.standings(await standings(self._moderated))
                finally:
                    await self._moderated.service.close()
