"""ProjectPeer: one peer of a project, built from its manifest (what ``barnraise peer`` and ``aux`` run).

Builds the Host and DHT node, the averager (trainer, client or auxiliary), the model with the
project's seed (so every peer starts from the same weights), the optimizer and schedule, the data
stream (each peer walks the shards in its own order) and the tokenizer, then trains or helps until
stopped. Events (``core.worker.events``: ready, epoch, metrics) go to a callback; the CLI prints
them as JSON lines.

Both trainers and auxiliary peers report the collaboration's completed epochs (``metrics``: the
loss over all peers' mini-steps, samples, speed, alive peers); a trainer follows them with
``curve``, from the records its optimizer fetched anyway. In a moderated project both follow the
moderators' rollback orders, which the pass keeper leaves on the access gate (``rollback_replica``);
each applied order is a ``rollback`` event.

The engine steers a trainer with ``pause`` / ``resume`` / ``set_threads``: a pause drops the current
microbatch, tells the collaboration we stepped aside and gives the GPU's memory back (tensors moved
to the CPU, the allocator's cache emptied); a resume moves them back and catches up if needed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from core.averaging import Averager
from core.dht import DHTConfig, DHTNode, HostTransport
from core.net import Host, Identity, NetConfig
from core.net.connection_kinds import KINDS, peer_kinds
from core.net.host.address import PeerAddress
from core.net.host.advertise import parse_ip
from core.net.presence import Presence, PresenceOptions
from core.net.reach.monitor import ReachabilityMonitor
from core.net.reach.reachability import Reachability
from core.optim.moments import MomentOptimizer
from core.training.auxiliary import AuxiliaryConfig, AuxiliaryPeer
from core.training.checkpoints import CheckpointStore
from core.training.collaborative import CollaborativeConfig, CollaborativeOptimizer
from core.training.curve import follow_metrics, metrics_event
from core.training.links import PeerLinks
from core.training.local import LocalWork
from core.training.metrics import EpochMetrics, MetricsAggregator, MetricsLog
from core.training.published import fetch_published_checkpoint
from core.training.recipe import (
    averager_config,
    build_model,
    data_stream,
    fetch_tokenizer,
    load_checkpoint,
    mlm_loss,
    training_state,
)
from core.training.rollback import OrderReader
from core.training.rollback_replica import ReplicaRollback, RolledBack
from core.training.settings import Misbehaving, PeerSettings
from core.training.state import TrainingState
from core.training.trainer import Trainer
from core.util.tasks import BackgroundTasks
from core.worker.bridge import TrainingBridge
from core.worker.control import TrainingControl
from core.worker.device import training_device
from core.worker.errors import TrainingError
from core.worker.events import PeerEvent, PeerNetwork, PeerReady, PeerRolledBack, PeerWaiting
from core.worker.precision import choose_precision

__all__ = ["Misbehaving", "PeerSettings", "ProjectPeer"]

log = logging.getLogger(__name__)

MILESTONE_EVERY = 10
"""The backbone keeps every 10th checkpoint longer (``CheckpointStore`` milestones): what a
rollback to an older epoch than the last few needs."""


class ProjectPeer:
    def __init__(self, settings: PeerSettings, on_event: Callable[[PeerEvent], None]) -> None:
        self.settings = settings
        self.on_event = on_event
        manifest = settings.manifest
        self.prefix = manifest.project.name
        access = settings.access
        if manifest.access.moderated:
            if access is None:
                raise TrainingError(
                    f"project {self.prefix} is moderated: log in to its coordinator to get a pass"
                )
            if access.project != self.prefix or access.project_key != manifest.access.key:
                raise TrainingError(f"the access gate is not for project {self.prefix}")
        elif access is not None:
            raise TrainingError(f"project {self.prefix} is open: it takes no access gate")
        identity = settings.identity or Identity.generate()
        self.host = Host(identity, NetConfig(), access=access)
        self.dht = DHTNode(HostTransport(self.host), DHTConfig(client_mode=_dht_client(settings)))
        self.bridge = TrainingBridge()
        self.averager: Averager | None = None
        self.optimizer: CollaborativeOptimizer | None = None
        self.trainer: Trainer | None = None
        self.control = TrainingControl(self.bridge, running=not settings.start_paused)
        self._tasks = BackgroundTasks(f"peer/{self.prefix}")
        self._device = torch.device("cpu")
        self._state: TrainingState | None = None
        self._offloaded = False
        self.presence: Presence | None = None
        self._network: PeerNetwork | None = None

    async def run(self, stop: asyncio.Event) -> None:
        s, manifest = self.settings, self.settings.manifest
        await self.host.start(
            [] if s.role == "client" else list(s.listen), port_fallback=s.port_fallback
        )
        self.presence = Presence(
            self.host,
            PresenceOptions(
                offer_relay=s.offer_relay,
                assume=Reachability.PRIVATE if s.role == "client" else None,
            ),
            on_change=self._reachability_changed,
        )
        await self.presence.start()
        await self.dht.start(list(s.initial_peers or manifest.network.initial_peers))
        self.averager = Averager(
            self.host, self.dht, self.prefix, averager_config(manifest, s.role)
        )
        self._reachability_changed(self.presence.reachability)
        model = await self.bridge.run(build_model, manifest)
        state = training_state(model, manifest)
        self._state = state
        if s.start_from is not None:
            await self.bridge.run(load_checkpoint, state, s.start_from)
        links = PeerLinks.create(self.averager, self.bridge)
        address = str(self.host.addresses[0]) if self.host.addresses else str(self.host.peer_id)
        self.on_event(PeerReady(address, s.role))
        # after ``ready``, which owners read first (it carries the address to join)
        self._tasks.spawn("network-events", self._report_network())
        if s.role == "aux":
            await self._run_aux(state, links, stop)
        else:
            await self._run_trainer(state, links, stop)

    async def _run_trainer(
        self, state: TrainingState, links: PeerLinks, stop: asyncio.Event
    ) -> None:
        s, manifest = self.settings, self.settings.manifest
        t = manifest.training
        assert self.averager is not None
        device, why = await self.bridge.run(training_device, s.device)
        log.info("training on %s: %s", device, why)
        precision = choose_precision(device, t.precision)
        self._device = precision.device
        await self.bridge.run(state.model.to, precision.device)
        tokenizer = await self.bridge.run(fetch_tokenizer, manifest, s.data_base, s.work_dir)
        batches = data_stream(manifest, tokenizer, data_base=s.data_base, seed=s.data_seed)
        self.optimizer = CollaborativeOptimizer(
            state,
            links,
            config=CollaborativeConfig(
                target_batch_size=t.target_batch_size,
                mode="client" if s.role == "client" else "trainer",
                average_state_every=t.average_state_every,
                delay_parameter_updates=t.delay_parameter_updates,
                clip_norm=t.clip_norm or None,
                matchmaking_time=manifest.averaging.matchmaking_time,
                averaging_timeout=manifest.averaging.allreduce_timeout,
            ),
        )
        self.optimizer.on_waiting = lambda reason: self.on_event(PeerWaiting(reason))
        self.optimizer.fallback = self._published_fallback()
        if s.misbehaviour is not None:
            log.warning("this peer misbehaves on purpose: %s", s.misbehaviour.describe())
            s.misbehaviour.install(self.optimizer, self.averager)
        self.optimizer.rollback = self._rollbacks(
            self.optimizer.local, links, published=self.optimizer.fallback
        )
        self._tasks.spawn("interrupt-on-stop", _interrupt_on(stop, self.optimizer))
        await self.optimizer.start()
        if not self.control.running:
            await self.optimizer.pause()
        # epochs that ended before we joined (we caught up by now) are not ours to report, except
        # the last one, so that a curve starts at once
        aggregator = MetricsAggregator(after_epoch=self.optimizer.view().epoch - 2)
        self._tasks.spawn("metrics", follow_metrics(self.optimizer.view, aggregator, self.on_event))
        self.trainer = trainer = Trainer(
            state.model,
            self.optimizer,
            self.bridge,
            batches,
            mlm_loss,
            precision=precision,
            control=self.control,
        )

        try:
            await trainer.run(until_epoch=s.until_epoch, stop=stop, on_epoch=self.on_event)
        finally:
            trainer.close()

    def _published_fallback(self) -> Callable[[int], Awaitable[Path | None]] | None:
        """The organizers' published checkpoint, for when no peer can give the state (None when
        the manifest names none, or no project key to verify it with)."""
        s, manifest = self.settings, self.settings.manifest
        url, key = manifest.network.checkpoint_url, manifest.access.key
        if not url:
            return None
        if key is None:
            log.warning(
                "the manifest's network.checkpoint_url cannot be used: without access.project_key "
                "its checkpoints cannot be verified"
            )
            return None
        project, folder = manifest.project.name, s.work_dir / "published"

        def fetch(newer_than: int) -> Awaitable[Path | None]:
            return fetch_published_checkpoint(url, key, project, folder, newer_than=newer_than)

        return fetch

    def _rollbacks(
        self,
        local: LocalWork,
        links: PeerLinks,
        *,
        checkpoints: CheckpointStore | None = None,
        published: Callable[[int], Awaitable[Path | None]] | None = None,
    ) -> ReplicaRollback | None:
        """Follows the moderators' rollback orders, which the pass keeper leaves on the gate,
        verified with the manifest's project key (None in an open project: no key signs any)."""
        gate = self.settings.access
        if gate is None:
            return None
        orders = OrderReader(lambda: gate.rollback_order, self.prefix, gate.project_key)
        return ReplicaRollback(
            orders,
            local,
            links,
            checkpoints=checkpoints,
            published=published,
            on_applied=self._rolled_back,
        )

    def _rolled_back(self, done: RolledBack) -> None:
        order = done.order
        self.on_event(
            PeerRolledBack(order.to_epoch, done.epoch, order.sequence, order.reason, done.source)
        )

    # ---- network -----------------------------------------------------------------------------------

    def _reachability_changed(self, state: Reachability) -> None:
        """Roles follow reachability: a trainer others cannot dial averages as a client."""
        averager, presence = self.averager, self.presence
        if averager is None or presence is None:
            return
        if self.settings.role == "trainer":
            averager.set_client_mode(not presence.dialable)
        elif self.settings.role == "aux" and state is Reachability.PRIVATE:
            log.warning(
                "this auxiliary peer cannot be dialed from the internet (%s): peers behind routers "
                "will fail to send it their parts; open its port (%s) in the firewall",
                state.value,
                self.host.listening_port,
            )

    @property
    def reachability(self) -> ReachabilityMonitor | None:
        """The reachability checks (None before ``run`` started the peer's presence)."""
        return self.presence.monitor if self.presence is not None else None

    def network(self) -> PeerNetwork:
        """How others reach this peer, and how it reaches the peers it is connected to now."""
        presence, averager = self.presence, self.averager
        if presence is None:
            return PeerNetwork(Reachability.UNKNOWN.value)
        connections = peer_kinds(self.host)
        kinds = {kind: list(connections.values()).count(kind) for kind in KINDS}
        monitor = presence.monitor
        relays = presence.relay_client.relays if presence.relay_client is not None else []
        return PeerNetwork(
            reachability=presence.reachability.value,
            public_address=str(monitor.public_address) if monitor.public_address else None,
            checked_at=monitor.checked_at,
            peers=len(connections),
            direct=kinds["direct"],
            punched=kinds["punched"],
            relayed=kinds["relayed"],
            client=averager.config.client_mode if averager is not None else False,
            addresses=[str(a) for a in self.host.addresses],
            connections=connections,
            relays=[str(r) for r in relays],
        )

    async def _report_network(self) -> None:
        """A ``network`` event whenever reachability, role, addresses or connections change."""
        while True:
            event = self.network()
            # when it was checked alone changes nothing worth telling
            if self._network is None or replace(event, checked_at=None) != replace(
                self._network, checked_at=None
            ):
                self.on_event(event)
            self._network = event
            await asyncio.sleep(1.0)

    # ---- steering by the engine ------------------------------------------------------------------

    async def pause(self) -> None:
        """Stop computing within one layer's time and give the device's memory back."""
        self.control.pause()
        await self.bridge.run(self._release)
        if self.optimizer is not None:
            await self.optimizer.pause()

    async def resume(self, duty: float = 1.0) -> None:
        """Go on from where the pause left off (at most the dropped microbatch is lost)."""
        if self.control.running:
            self.control.set_duty(duty)
            return
        if self._offloaded:
            await self.bridge.run(self._move_state, self._device)
            self._offloaded = False
        if self.optimizer is not None:
            await self.optimizer.resume()
        self.control.resume(duty)

    async def set_threads(self, threads: int) -> None:
        """How many CPU threads torch may use (the scheduler leaves some cores to the user)."""
        await self.bridge.run(torch.set_num_threads, max(1, threads))

    @property
    def waiting_for(self) -> str | None:
        """Why this peer cannot contribute now (it cannot load the state), or None."""
        return self.optimizer.waiting_for if self.optimizer is not None else None

    def progress(self) -> dict[str, Any]:
        """Where this peer and its collaboration stand, for the engine's statistics."""
        trainer, optimizer = self.trainer, self.optimizer
        out: dict[str, Any] = {
            "samples": trainer.samples if trainer else 0,
            "compute_seconds": trainer.compute_seconds if trainer else 0.0,
            "bytes_sent": self.host.traffic.sent,
            "bytes_received": self.host.traffic.received,
        }
        if optimizer is not None:
            view = optimizer.view()
            out.update(
                epoch=optimizer.epoch,
                collaboration_epoch=view.epoch,
                peers=len([p for p in view.peers if p.training or p.mode == "paused"]),
                collaboration_samples_per_second=view.samples_per_second,
                samples_per_second=0.0 if optimizer.paused else optimizer.speed,
            )
        return out

    def _release(self) -> None:
        """On the training thread: drop gradients and move tensors off an accelerator."""
        if self._state is None:
            return
        self._state.model.zero_grad(set_to_none=True)
        if self._device.type != "cpu" and not self._offloaded:
            self._move_state(torch.device("cpu"))
            self._offloaded = True
        if self._device.type == "cuda":
            torch.cuda.empty_cache()
        elif self._device.type == "mps":
            torch.mps.empty_cache()

    def _move_state(self, device: torch.device) -> None:
        """Model, optimizer statistics and gradient accumulators to ``device`` (training thread)."""
        assert self._state is not None
        self._state.model.to(device)
        optimizer = self._state.optimizer
        if isinstance(optimizer, MomentOptimizer):  # offloaded statistics stay on the host
            optimizer.move_states(device)
        else:
            for entry in optimizer.state.values():
                for key, value in entry.items():
                    if isinstance(value, torch.Tensor):
                        entry[key] = value.to(device)
        if self.optimizer is not None:
            self.optimizer.local.move_to(device)

    async def _run_aux(self, state: TrainingState, links: PeerLinks, stop: asyncio.Event) -> None:
        s, manifest = self.settings, self.settings.manifest
        assert self.averager is not None
        metrics_log = MetricsLog(s.work_dir / "metrics.jsonl")
        store = (
            CheckpointStore(
                s.work_dir / "checkpoints",
                keep=s.keep_checkpoints,
                milestone_every=MILESTONE_EVERY * s.checkpoint_every,
            )
            if s.checkpoint_every
            else None
        )

        def report(metrics: EpochMetrics) -> None:
            metrics_log.write(metrics)
            self.on_event(metrics_event(metrics, by_user=True))
            if s.on_metrics is not None:
                s.on_metrics(metrics)

        aux = AuxiliaryPeer(
            state,
            links,
            config=AuxiliaryConfig(
                target_batch_size=manifest.training.target_batch_size,
                matchmaking_time=manifest.averaging.matchmaking_time,
                checkpoint_every=s.checkpoint_every,
                average_state_every=manifest.training.average_state_every,
                clip_norm=manifest.training.clip_norm or None,
            ),
            checkpoints=store,
            on_metrics=report,
            # it says where it published; a failure is the auxiliary peer's to report
            publish=s.publishing.publish if s.publishing is not None else None,
            on_evidence=s.on_evidence,
        )
        aux.rollback = self._rollbacks(aux.local, links, checkpoints=store)
        await aux.run(stop)

    async def close(self) -> None:
        await self._tasks.close()
        if self.optimizer is not None:
            await self.optimizer.close()
        if self.averager is not None:
            await self.averager.close()
        await self.bridge.aclose()
        await self.dht.close()
        if self.presence is not None:
            await self.presence.close()
        await self.host.close()


async def _interrupt_on(stop: asyncio.Event, optimizer: CollaborativeOptimizer) -> None:
    """A stop ends a wait for the state at once, not after the backoff."""
    await stop.wait()
    optimizer.interrupt()


def _dht_client(settings: PeerSettings) -> bool:
    """Whether our DHT node only asks (serves nothing, stays out of others' routing tables).

    A volunteer's trainer on the internet asks only: most sit behind routers, and a node others
    must reach through a relay would slow every lookup that passes it; the backbone serves the DHT.
    Inside one computer (loopback) every peer can serve.
    """
    if settings.role == "client":
        return True
    if settings.role == "aux":
        return False
    hosts = [PeerAddress.parse(text).host or "" for text in settings.listen]
    return not all((ip := parse_ip(host)) is not None and ip.is_loopback for host in hosts)
