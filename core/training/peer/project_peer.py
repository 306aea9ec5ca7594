"""ProjectPeer: one peer of a project, built from its manifest (what ``barnraise peer`` and ``backbone`` run).

It composes its parts and runs them in order: the network stack (``stack``: Host, presence, DHT
node; roles follow reachability), the averager (trainer, client or backbone), the state from the
project's recipe (``recipe``: the model with the project's seed, so every peer starts from the same
weights, the optimizer and schedule, or a checkpoint to start from), then the work of its role
(``roles``: train until stopped, or be the backbone). Events (``core.worker.events``: ready, epoch,
metrics, network, rollback) go to a callback; the CLI prints them as JSON lines. ``close`` stops
the parts in reverse.

The engine steers a trainer with ``pause`` / ``resume`` / ``set_threads``: a pause drops the current
microbatch, tells the collaboration we stepped aside and gives the GPU's memory back (``residency``:
tensors moved to the CPU, the allocator's cache emptied); a resume moves them back and catches up
if needed. ``PeerSettings`` and ``Misbehaving`` (``core.training.settings``) are imported from
here too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import torch

from core.averaging import Averager
from core.config.roles import BACKBONE
from core.net import Identity
from core.net.reach.monitor import ReachabilityMonitor
from core.training.links import PeerLinks
from core.training.local import LocalWork
from core.training.mode import ModeOptimizer
from core.training.peer.recipe import averager_config, build_model, load_checkpoint, training_state
from core.training.peer.residency import Residency
from core.training.peer.roles import TrainerRole, run_backbone
from core.training.peer.stack import NetworkStack, check_gate
from core.training.progress import PAUSED
from core.training.settings import Misbehaving, PeerSettings
from core.training.trainer import Trainer
from core.util.tasks import BackgroundTasks
from core.worker.bridge import TrainingBridge
from core.worker.control import TrainingControl
from core.worker.events import PeerEvent, PeerNetwork, PeerReady

__all__ = ["Misbehaving", "PeerSettings", "ProjectPeer"]

log = logging.getLogger(__name__)


class ProjectPeer:
    def __init__(self, settings: PeerSettings, on_event: Callable[[PeerEvent], None]) -> None:
        self.settings = settings
        self.on_event = on_event
        self.prefix = settings.project
        check_gate(settings.manifest, settings.access)
        self.network_stack = NetworkStack(
            settings.identity or Identity.generate(),
            settings.access,
            role=settings.role,
            listen=settings.listen,
            port_fallback=settings.port_fallback,
            offer_relay=settings.offer_relay,
        )
        self.host = self.network_stack.host
        self.dht = self.network_stack.dht
        self.bridge = TrainingBridge()
        self.control = TrainingControl(self.bridge, running=not settings.start_paused)
        self.averager: Averager | None = None
        self._role: TrainerRole | None = None
        """A trainer's or client's work (None for the backbone, and before ``run`` placed it)."""
        self._residency: Residency | None = None
        self._tasks = BackgroundTasks(f"peer/{self.prefix}")

    @property
    def optimizer(self) -> ModeOptimizer | None:
        return self._role.optimizer if self._role is not None else None

    def _local_work(self) -> LocalWork | None:
        """What the mode's optimizer keeps on the device besides the model, which moves with a
        pause (dedloc: its accumulators; diloco: nothing)."""
        optimizer = self.optimizer
        return optimizer.offloadable if optimizer is not None else None

    @property
    def trainer(self) -> Trainer | None:
        return self._role.trainer if self._role is not None else None

    async def run(self, stop: asyncio.Event) -> None:
        """Join the network, build the state, then train (or be the backbone) until ``stop``."""
        s, manifest = self.settings, self.settings.manifest
        await self.network_stack.start(s.initial_peers or manifest.network.initial_peers)
        self.averager = averager = Averager(
            self.host, self.dht, self.prefix, averager_config(manifest, s.role)
        )
        self.network_stack.carry(averager)
        model = await self.bridge.run(build_model, manifest)
        state = training_state(model, manifest)
        self._residency = Residency(state, self._local_work)
        if s.start_from is not None:
            await self.bridge.run(load_checkpoint, state, s.start_from)
        links = PeerLinks.create(averager, self.bridge, manifest.access.confirmers)
        self.on_event(PeerReady(self.network_stack.address(), s.role))
        # after ``ready``, which owners read first (it carries the address to join)
        self._tasks.spawn("network-events", self.network_stack.report(self.on_event))
        if s.role == BACKBONE:
            await run_backbone(s, state, links, on_event=self.on_event, stop=stop)
            return
        self._role = TrainerRole(
            s,
            state,
            links,
            control=self.control,
            residency=self._residency,
            tasks=self._tasks,
            on_event=self.on_event,
        )
        await self._role.run(stop)

    # ---- network -----------------------------------------------------------------------------------

    @property
    def reachability(self) -> ReachabilityMonitor | None:
        """The reachability checks (None before ``run`` started the peer's presence)."""
        return self.network_stack.monitor

    def network(self) -> PeerNetwork:
        """How others reach this peer, and how it reaches the peers it is connected to now."""
        return self.network_stack.network()

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
        if self._residency is not None and self._residency.offloaded:
            await self.bridge.run(self._residency.restore)
        if self.optimizer is not None:
            await self.optimizer.resume()
        self.control.resume(duty)

    def _release(self) -> None:
        """On the training thread, once the microbatch in flight is dropped (or the state is
        built: until then there is nothing to release)."""
        if self._residency is not None:
            self._residency.release()

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
                peers=len([p for p in view.peers if p.training or p.role == PAUSED]),
                collaboration_samples_per_second=view.samples_per_second,
                samples_per_second=0.0 if optimizer.paused else optimizer.speed,
            )
        return out

    async def close(self) -> None:
        await self._tasks.close()
        if self.optimizer is not None:
            await self.optimizer.close()
        if self.averager is not None:
            await self.averager.close()
        await self.bridge.aclose()
        await self.network_stack.close()
