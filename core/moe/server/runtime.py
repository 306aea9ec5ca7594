"""ExpertHost: a volunteer's expert server, built from a ``dmoe`` manifest (what ``barnraise
experts`` runs, and what the engine runs for an attached dmoe project).

It puts together a Host and a DHT node, the training bridge, one ``HostedExpert`` per uid (built
from the manifest's ``[expert]``, seeded by its uid, then loaded from its newest checkpoint if the
folder has one: a takeover), the ``ExpertServer`` that batches calls, the ``Announcer`` that keeps
the experts findable, and the ``CheckpointSaver``. Which uids: those given (uids or globs), else
``count`` (the manifest's ``experts_per_server``) free slots looked up in the DHT.

The engine steers it as it steers a trainer (``pause`` / ``resume``):

- **pause** stops computing at once and gives the device back: the bridge is interrupted, so the
  batch in flight and every later one fail inside the expert's first layer, and their callers get
  "busy: paused" (``ExpertServer`` maps the interrupt to ``ResourceExhaustedError``), which the
  trainers' DMoE layer treats as a failed expert; parameters and optimizer state leave an
  accelerator. Announcing stops too: the entries stored already live out their ``announce_ttl``
  and then trainers stop choosing these experts. A pause may last hours (the user came back), and
  announcing experts that can only answer "busy" would keep drawing calls that fail, while a short
  pause costs trainers nothing more than those "busy" answers within the TTL.
- **resume** moves the experts back, lets batches run again and announces at once.

Throttling (a duty below 1) does not apply: a server's load is what the trainers send, and resting
between batches would only make their calls time out; the server computes or is paused.

The server keeps the receipts its trainers sign for the work it answered them (``receipts``) and,
given ``on_receipts`` (a server logged in to the project's coordinator), hands the new ones over
every ``receipt_interval`` seconds and once more at close, for the coordinator's leaderboard.

On ``close`` the server stops announcing (the DHT has no delete: the entries expire within
``announce_ttl``, and until then calls fail at once with a refused connection), stops answering,
and saves a last checkpoint of every expert that learned (``close(save=False)``: as if killed); its
``ExpertsStopped`` names those and the experts that never learned, which have no checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from core.dht import DHTConfig, DHTNode, HostTransport
from core.moe.announce import Announcer, expert_schema
from core.moe.grid import ExpertGrid
from core.moe.server.backend import ExpertBackend
from core.moe.server.checkpoints import CheckpointSaver, ExpertCheckpoints
from core.moe.server.events import ExpertsEvent, ExpertsReady, ExpertsServed, ExpertsStopped
from core.moe.server.experts import ExpertSpec
from core.moe.server.hosted import HostedExpert, Served
from core.moe.server.receipts import ReceiptBook
from core.moe.server.selection import expand_uids, free_uids
from core.moe.server.server import ExpertServer, Refusal, RefusalSink
from core.net import Host, Identity, NetConfig
from core.net.connection_kinds import KINDS, peer_kinds
from core.net.host.gate import AccessGate
from core.net.presence import Presence, PresenceOptions
from core.net.reach.monitor import ReachabilityMonitor
from core.net.reach.reachability import Reachability
from core.project import DmoeManifest
from core.trust.receipts import Receipt
from core.util.errors import BarnraiseError
from core.util.tasks import BackgroundTasks
from core.worker.bridge import TrainingBridge
from core.worker.control import TrainingControl
from core.worker.device import training_device
from core.worker.events import PeerNetwork

log = logging.getLogger(__name__)

SPEED_WINDOW = 10
"""Seconds of totals the served-samples speed is measured over."""
RECEIPT_INTERVAL = 30.0
"""Seconds between hand-overs of new receipts to ``on_receipts``."""


@dataclass(frozen=True)
class ExpertHostSettings:
    manifest: DmoeManifest
    uids: tuple[str, ...] = ()
    """Uids or globs over the grid (``ffn.0.*``); empty: ``count`` free slots."""
    count: int | None = None
    """How many free slots to host when no uids are given; None: the manifest's
    ``server.experts_per_server``."""
    listen: tuple[str, ...] = ("/ip4/127.0.0.1/tcp/0",)
    port_fallback: bool = False
    initial_peers: tuple[str, ...] = ()
    """Empty: the manifest's ``network.initial_peers``."""
    checkpoints: Path | None = None
    """The checkpoint folder (shared with, or copied from, servers that hosted these uids);
    None: no checkpoints."""
    device: str = "cpu"
    """cpu, cuda, cuda:N, mps, or auto (``core.worker.device``)."""
    identity: Identity | None = None
    access: AccessGate | None = None
    """The gate holding this server's pass (moderated projects)."""
    start_paused: bool = False
    """Build everything, answer calls with "busy", announce nothing until ``resume``."""
    stats_interval: float = 0.0
    """Seconds between ``ExpertsServed`` events; 0: none."""
    offer_relay: bool = False
    """Relay for peers behind routers while this server is public (an organizer's backbone)."""
    evidence: Callable[[DHTNode, Host], RefusalSink] | None = None
    """Builds, once the host and DHT node exist, what turns calls refused for poisoned tensors
    into evidence against their callers (``core.training.moderation.call_evidence``); None: only logged."""
    on_receipts: Callable[[list[Receipt]], None] | None = None
    """Takes the trainers' new receipts for this server's work (the coordinator's reporter);
    None: they are checked and kept, not reported."""
    receipt_interval: float = RECEIPT_INTERVAL


class ExpertHost:
    def __init__(
        self, settings: ExpertHostSettings, on_event: Callable[[ExpertsEvent], None]
    ) -> None:
        manifest = settings.manifest
        if manifest.access.moderated:
            if settings.access is None:
                raise BarnraiseError(
                    f"project {manifest.project.name} is moderated: log in to its coordinator "
                    "to get a pass"
                )
        elif settings.access is not None:
            raise BarnraiseError(
                f"project {manifest.project.name} is open: it takes no access gate"
            )
        if not settings.receipt_interval > 0:
            raise BarnraiseError("the receipts' interval must be a positive number of seconds")
        self.settings = settings
        self.on_event = on_event
        self.grid = ExpertGrid(manifest.grid.prefix, manifest.grid.shape)
        # uids named are checked now, before anything listens: a typo fails at once
        self._named = expand_uids(self.grid, settings.uids) if settings.uids else None
        e = manifest.expert
        self.spec = ExpertSpec(e.kind, e.hidden, e.optimizer, e.lr, e.max_batch, e.max_grad_norm)
        self.host = Host(
            settings.identity or Identity.generate(), NetConfig(), access=settings.access
        )
        self.dht = DHTNode(HostTransport(self.host), DHTConfig())
        self.dht.rules.add_schema(expert_schema(self.grid, manifest.server.announce_ttl))
        self.bridge = TrainingBridge("experts")
        self.control = TrainingControl(self.bridge, running=not settings.start_paused)
        self.served = Served()
        self.experts: list[HostedExpert] = []
        self.server: ExpertServer | None = None
        self.presence: Presence | None = None
        self.saver: CheckpointSaver | None = None
        self.address: str | None = None
        self._device = torch.device("cpu")
        self._offloaded = False
        self._announcer: Announcer | None = None
        self._announcing: asyncio.Task[None] | None = None
        self._speed: deque[tuple[float, int]] = deque(maxlen=SPEED_WINDOW + 1)
        self.on_refusal: Callable[[Refusal], None] | None = None
        """Told of every call refused for poisoned tensors."""
        self.evidence = settings.evidence(self.dht, self.host) if settings.evidence else None
        self.receipts = ReceiptBook(manifest.project.name, self.host.peer_id)
        self._tasks = BackgroundTasks(f"experts/{manifest.project.name}")

    # ---- running ---------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Start, then serve until ``stop`` is set (``close`` is the caller's, as for a peer)."""
        await self.start()
        await stop.wait()

    async def start(self) -> None:
        s, manifest = self.settings, self.settings.manifest
        await self.host.start(list(s.listen), port_fallback=s.port_fallback)
        # reachability checks, relay reservations behind a router, hole punching, port mapping:
        # trainers elsewhere must reach the experts, whatever router this volunteer sits behind
        self.presence = Presence(self.host, PresenceOptions(offer_relay=s.offer_relay))
        await self.presence.start()
        await self.dht.start(list(s.initial_peers or manifest.network.initial_peers))
        store = (
            ExpertCheckpoints(s.checkpoints, keep=manifest.server.keep_checkpoints)
            if s.checkpoints is not None
            else None
        )
        uids = await self._choose_uids(store)
        device, why = await self.bridge.run(training_device, s.device)
        log.info("hosting %d experts on %s: %s", len(uids), device, why)
        self._device = device
        self.experts = await self.bridge.run(self._build, uids, device)
        restored: dict[str, int] = {}
        for expert in self.experts:
            expert.recover = lambda backend: _recover(store, backend)
        if store is not None:
            for expert in self.experts:
                if await self.bridge.run(store.restore, expert) is not None:
                    restored[expert.uid] = expert.updates
            server = manifest.server
            self.saver = CheckpointSaver(
                store,
                self.bridge,
                self.experts,
                interval=server.checkpoint_interval,
                updates=server.checkpoint_updates,
            )
            self.saver.start()
        if not self.control.running:  # started paused: nothing on an accelerator until resumed
            await self.bridge.run(self._release)
        self.server = ExpertServer(
            self.host,
            self.bridge,
            self.experts,
            max_queue=manifest.server.max_queue,
            max_wait=manifest.server.max_wait,
            on_refusal=self._refused,
            receipts=self.receipts,
        )
        await self.server.start()
        if self.evidence is not None:
            self.evidence.start()
        self.address = self.best_address()
        if self.control.running:
            self._start_announcing()
        self.on_event(ExpertsReady(self.address, uids, restored))
        self._tasks.spawn("speed", self._measure())
        if s.stats_interval > 0:
            self._tasks.spawn("stats", self._report(s.stats_interval))
        if s.on_receipts is not None:
            self._tasks.spawn("receipts", self._hand_receipts(s.receipt_interval))

    async def _choose_uids(self, store: ExpertCheckpoints | None) -> list[str]:
        s = self.settings
        if self._named is not None:
            return self._named
        count = s.count if s.count is not None else s.manifest.server.experts_per_server
        prefer = await asyncio.to_thread(store.uids) if store is not None else []
        return await free_uids(self.dht, self.grid, count, prefer=prefer)

    def _build(self, uids: list[str], device: torch.device) -> list[HostedExpert]:
        """On the training thread: the experts, watched so that a pause interrupts them."""
        experts = [HostedExpert.build(self.spec, uid, self.served, device) for uid in uids]
        for expert in experts:
            self.bridge.watch(expert.module)
        return experts

    def _refused(self, refusal: Refusal) -> None:
        if self.evidence is not None:
            self.evidence.refused(refusal)
        if self.on_refusal is not None:
            self.on_refusal(refusal)

    # ---- announcing ------------------------------------------------------------------------------

    def best_address(self) -> str:
        """The one address the DHT tells trainers, where most of them can reach us now.

        Behind a router that nobody outside can dial through (PRIVATE), a relay address: our LAN
        address would reach only trainers on the same LAN, and a relayed connection is moved to a
        direct path by hole punching where the routers allow it. Otherwise ``Host.addresses``'
        best (a confirmed public address, else an interface address; never loopback unless we
        listen on loopback alone)."""
        host, presence = self.host, self.presence
        private = presence is not None and presence.reachability is Reachability.PRIVATE
        if private and host.relay_addresses:
            return str(host.relay_addresses[0])
        addresses = host.addresses
        return str(addresses[0]) if addresses else str(host.peer_id)

    def _start_announcing(self) -> None:
        if self._announcing is not None or self.address is None:
            return
        announcer = Announcer(
            self.dht,
            self.grid,
            [expert.uid for expert in self.experts],
            self.best_address,  # asked again at every round: it changes behind a router
            self.settings.manifest.server.announce_ttl,
        )
        self._announcer = announcer
        self._announcing = self._tasks.spawn("announce", self._announce(announcer))

    async def _announce(self, announcer: Announcer) -> None:
        """The first announcement, retried until it is stored; the announcer refreshes it then."""
        while True:
            try:
                await announcer.start()
                return
            except (BarnraiseError, OSError) as exc:
                log.warning("announcing experts failed (trying again): %s", exc)
                await asyncio.sleep(min(5.0, announcer.ttl / 3))

    async def _stop_announcing(self) -> None:
        task, announcer = self._announcing, self._announcer
        self._announcing = self._announcer = None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})
        if announcer is not None:
            await announcer.close()

    @property
    def announcing(self) -> bool:
        """Whether the experts are being announced (not while paused, nor after close)."""
        return self._announcing is not None

    @property
    def announcer(self) -> Announcer | None:
        """The announcer at work now (its ``rounds`` count the announcements stored)."""
        return self._announcer

    # ---- steering by the engine ------------------------------------------------------------------

    async def pause(self) -> None:
        """Answer "busy" from now on, stop announcing, give the device's memory back."""
        self.control.pause()
        await self._stop_announcing()
        await self.bridge.run(self._release)

    async def resume(self, duty: float = 1.0) -> None:
        """Compute and announce again (``duty`` does not apply to a server: see the docstring)."""
        if self.control.running:
            return
        if self._offloaded:
            await self.bridge.run(self._move, self._device)
            self._offloaded = False
        self.control.resume()
        self._start_announcing()

    async def set_threads(self, threads: int) -> None:
        await self.bridge.run(torch.set_num_threads, max(1, threads))

    def _release(self) -> None:
        """On the training thread: experts off an accelerator, its cache emptied."""
        if self._device.type == "cpu" or self._offloaded:
            return
        self._move(torch.device("cpu"))
        self._offloaded = True
        if self._device.type == "cuda":
            torch.cuda.empty_cache()
        elif self._device.type == "mps":
            torch.mps.empty_cache()

    def _move(self, device: torch.device) -> None:
        for expert in self.experts:
            expert.move_to(device)

    # ---- what the engine and the CLI read --------------------------------------------------------

    waiting_for: str | None = None
    """A server never waits for a collaboration (a trainer's ``waiting_for``)."""

    @property
    def reachability(self) -> ReachabilityMonitor | None:
        """The reachability checks of this server's Presence (None before it starts)."""
        return self.presence.monitor if self.presence is not None else None

    def served_event(self) -> ExpertsServed:
        served = self.served
        return ExpertsServed(
            forward_samples=served.forward_samples,
            backward_samples=served.backward_samples,
            forward_batches=served.forward_batches,
            backward_batches=served.backward_batches,
            compute_seconds=round(served.compute_seconds, 3),
            updates=sum(expert.updates for expert in self.experts),
            checkpoints=self.saver.saves if self.saver is not None else 0,
            paused=not self.control.running,
        )

    def progress(self) -> dict[str, Any]:
        """Running totals for the engine's ledger: ``samples`` are expert samples served, forward
        and backward together (``Served``), plus the Host's traffic."""
        served = self.served
        return {
            "samples": served.samples,
            "compute_seconds": served.compute_seconds,
            "bytes_sent": self.host.traffic.sent,
            "bytes_received": self.host.traffic.received,
            "samples_per_second": self.speed() if self.control.running else 0.0,
            "experts": len(self.experts),
            "forward_samples": served.forward_samples,
            "backward_samples": served.backward_samples,
        }

    def speed(self) -> float:
        """Samples served per second over the last ``SPEED_WINDOW`` seconds."""
        if len(self._speed) < 2:
            return 0.0
        (t0, s0), (t1, s1) = self._speed[0], self._speed[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else 0.0

    def network(self) -> PeerNetwork:
        connections = peer_kinds(self.host)
        kinds = {kind: list(connections.values()).count(kind) for kind in KINDS}
        presence = self.presence
        return PeerNetwork(
            reachability=presence.reachability.value if presence is not None else "unknown",
            peers=len(connections),
            direct=kinds["direct"],
            punched=kinds["punched"],
            relayed=kinds["relayed"],
            addresses=[str(a) for a in self.host.addresses],
            connections=connections,
        )

    async def _measure(self) -> None:
        """Totals once a second while computing; a paused server stays quiet (no wake-ups)."""
        while True:
            if not self.control.running:
                await self.control.wait_running()
                self._speed.clear()  # the pause is not a slow second
            self._speed.append((time.monotonic(), self.served.samples))
            await asyncio.sleep(1.0)

    async def _report(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            self.on_event(self.served_event())

    async def _hand_receipts(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            self.hand_receipts()

    def hand_receipts(self) -> int:
        """Give ``on_receipts`` the receipts kept since the last time; how many."""
        on_receipts = self.settings.on_receipts
        if on_receipts is None:
            return 0
        fresh = self.receipts.take()
        if fresh:
            on_receipts(fresh)
        return len(fresh)

    # ---- stopping --------------------------------------------------------------------------------

    async def close(self, *, save: bool = True) -> None:
        """Stop announcing and answering, save what learned since its last checkpoint (unless
        ``save`` is False: as if the process were killed), free everything."""
        await self._stop_announcing()
        await self._tasks.close()
        if self.server is not None:
            await self.server.close()
            self.hand_receipts()  # the last ones: the reporter sends them before it logs out
        if self.evidence is not None:  # its last window goes out while the DHT node still runs
            await self.evidence.close()
        saved: list[str] = []
        if self.saver is not None:
            with contextlib.suppress(RuntimeError):  # the bridge closed under us: nothing to save
                saved = await self.saver.close(save=save)
        await self.bridge.aclose()
        await self.dht.close()
        if self.presence is not None:
            await self.presence.close()
        await self.host.close()
        if self.address is not None:
            untrained = [expert.uid for expert in self.experts if expert.updates == 0]
            self.on_event(ExpertsStopped(saved, untrained))
            self.address = None


def _recover(store: ExpertCheckpoints | None, backend: ExpertBackend) -> None:
    """On the training thread: finite weights again, from the newest checkpoint (only finite ones
    are ever written) or, without one, the weights the expert started from."""
    if store is not None and store.restore(backend) is not None:
        log.warning("expert %s had non-finite weights: restored its newest checkpoint", backend.uid)
        return
    backend.reset()
    log.warning("expert %s had non-finite weights and no checkpoint: started over", backend.uid)
