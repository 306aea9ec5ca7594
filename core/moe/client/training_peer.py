"""MoETrainerPeer: a trainer of a ``dmoe`` project, built from its manifest (what ``barnraise peer``
runs when the manifest says ``kind = "dmoe"``).

It puts together a Host with its ``Presence`` (to dial experts behind routers, through their relays
or a punched hole) and a DHT node (a client: a trainer serves nothing, so it is never put in
others' routing tables), a ``TrainingBridge`` with one worker per batch in flight, the beam search
over the manifest's grid, the demo's model (``DigitsMoE``: pixels -> local layer -> the remote
mixture -> classes) and the ``AsyncMoETrainer``, and trains on the digits until stopped.

Every trainer has its own local layers (the encoder, the gate, the head), started from the
project's name as seed so that all begin alike; what trainers share is the experts, which every server
updates in each backward call. That is Learning@home's split: the big layers live on volunteers'
servers, a trainer's own part is small.

It signs receipts for the expert work each server answered (``receipts``: the running totals
per server, handed to that server every few seconds and at the stop), which the servers report to
the coordinator's leaderboard.

Every ``report_every`` steps it sends a ``MoEProgress`` (mean loss of those steps, throughput,
staleness, the share of expert calls answered); every ``evaluate_every`` reports it also measures
the accuracy on the held-out digits (a forward through the same experts, no update) and sends it as
a ``MoEAccuracy`` once measured. Training goes
on in rounds of ``ROUND_STEPS`` steps, so a stop is noticed between rounds, and the batches in flight
are interrupted at once through the bridge.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.nn import functional

from core.dht import DHTConfig, DHTNode, HostTransport
from core.moe.announce import expert_schema
from core.moe.client.beam_search import MoEBeamSearch
from core.moe.client.digits import Digits, digit_batches, load_digits
from core.moe.client.layer import RemoteMixtureOfExperts
from core.moe.client.receipts import ReceiptSender
from core.moe.client.trainer import AsyncMoETrainer, DigitsMoE, StepReport
from core.moe.client.trainer_events import (
    MoEAccuracy,
    MoEProgress,
    MoETrainerEvent,
    MoETrainerReady,
    MoETrainerStopped,
)
from core.moe.grid import ExpertGrid, uid_seed
from core.net import Host, Identity, NetConfig
from core.net.host.gate import AccessGate
from core.net.presence import Presence, PresenceOptions
from core.project import DmoeManifest
from core.util.errors import BarnraiseError
from core.util.tasks import BackgroundTasks
from core.worker.bridge import TrainingBridge
from core.worker.errors import TrainingError

log = logging.getLogger(__name__)

ROUND_STEPS = 20
"""Steps per ``AsyncMoETrainer.run``: how often a stop is looked at between batches."""
WAIT_FOR_EXPERTS = 2.0
"""Seconds between tries while no expert is announced yet (servers may start after trainers)."""


@dataclass(frozen=True)
class MoETrainerSettings:
    manifest: DmoeManifest
    listen: tuple[str, ...] = ("/ip4/127.0.0.1/tcp/0",)
    port_fallback: bool = False
    initial_peers: tuple[str, ...] = ()
    """Empty: the manifest's ``network.initial_peers``."""
    data_seed: int = 0
    """This trainer's order of the training digits."""
    identity: Identity | None = None
    access: AccessGate | None = None
    report_every: int = 10
    """Steps per ``MoEProgress``."""
    evaluate_every: int = 5
    """Reports per accuracy measurement (0: never)."""
    max_steps: int | None = None
    """Stop after this many steps (None: when told)."""


class MoETrainerPeer:
    def __init__(
        self, settings: MoETrainerSettings, on_event: Callable[[MoETrainerEvent], None]
    ) -> None:
        manifest = settings.manifest
        if manifest.access.moderated and settings.access is None:
            raise BarnraiseError(
                f"project {manifest.project.name} is moderated: log in to its coordinator first"
            )
        if settings.report_every < 1 or settings.evaluate_every < 0:
            raise BarnraiseError("report_every must be 1 or more and evaluate_every 0 or more")
        self.settings = settings
        self.on_event = on_event
        trainer = manifest.trainer
        self.grid = ExpertGrid(manifest.grid.prefix, manifest.grid.shape)
        self.host = Host(
            settings.identity or Identity.generate(), NetConfig(), access=settings.access
        )
        self.dht = DHTNode(HostTransport(self.host), DHTConfig(client_mode=True))
        # what other servers announce is read by these rules: no entry pointing elsewhere
        self.dht.rules.add_schema(expert_schema(self.grid, manifest.server.announce_ttl))
        self.bridge = TrainingBridge("moe-trainer", workers=trainer.concurrency)
        self.data: Digits = load_digits()
        self.receipts = ReceiptSender(self.host, manifest.project.name)
        torch.manual_seed(uid_seed(manifest.project.name))  # every trainer's local layers alike
        self.layer = RemoteMixtureOfExperts(
            hidden=manifest.expert.hidden,
            grid=self.grid,
            host=self.host,
            bridge=self.bridge,
            search=MoEBeamSearch(self.dht, self.grid),
            k=trainer.k,
            beam_size=trainer.beam_size,
            k_min=trainer.k_min,
            forward_timeout=trainer.forward_timeout,
            backward_timeout=trainer.backward_timeout,
            receipts=self.receipts,
        )
        self.model = DigitsMoE(self.layer)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=trainer.lr)
        batches = digit_batches(
            self.data.train_x, self.data.train_y, trainer.batch_size, seed=settings.data_seed
        )
        self.trainer = AsyncMoETrainer(
            self.model,
            functional.cross_entropy,
            self.optimizer,
            batches,
            bridge=self.bridge,
            concurrency=trainer.concurrency,
            balancing_weight=trainer.balancing,
            on_step=self._on_step,
            max_consecutive_failures=10_000,  # an empty grid is waited out, not given up on
        )
        self.address: str | None = None
        self.presence: Presence | None = None
        self._window: list[StepReport] = []
        self._reports = 0
        self._since = time.monotonic()
        self._tasks = BackgroundTasks("moe-trainer")  # accuracy measurements, off the step path

    async def run(self, stop: asyncio.Event) -> None:
        """Start, then train until ``stop`` is set or ``max_steps`` are done."""
        s = self.settings
        await self.host.start(list(s.listen), port_fallback=s.port_fallback)
        # a trainer serves nothing, so it holds no relay reservation and maps no port; it dials
        # experts through their relays (``relay:`` addresses) and punches to them where it can
        self.presence = Presence(self.host, PresenceOptions(use_relays=False, map_port=False))
        await self.presence.start()
        await self.dht.start(list(s.initial_peers or s.manifest.network.initial_peers))
        self.receipts.start()
        self.address = (
            str(self.host.addresses[0]) if self.host.addresses else str(self.host.peer_id)
        )
        self.on_event(MoETrainerReady(self.address))
        self._since = time.monotonic()
        while not stop.is_set():
            left = None if s.max_steps is None else s.max_steps - self.trainer.stats.steps
            if left is not None and left <= 0:
                return
            round_steps = ROUND_STEPS if left is None else min(ROUND_STEPS, left)
            before = self.trainer.stats.steps
            try:
                await self._train(round_steps, stop)
            except TrainingError as exc:
                log.warning("training stalled: %s", exc)
            if self.trainer.stats.steps == before and not stop.is_set():
                # nothing learned: no expert is announced yet, or all of them failed; wait a bit
                log.info("no step in this round (%s); waiting for experts", self._why_not())
                await _sleep_or_stop(WAIT_FOR_EXPERTS, stop)

    async def _train(self, steps: int, stop: asyncio.Event) -> None:
        """One round; a stop meanwhile interrupts the batches in flight."""
        training = asyncio.create_task(self.trainer.run(steps), name="moe-trainer/round")
        stopping = asyncio.create_task(stop.wait(), name="moe-trainer/stop")
        try:
            await asyncio.wait({training, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not training.done():
                self.bridge.interrupt()
            await training
        finally:
            stopping.cancel()
            self.bridge.clear_interrupt()

    def _why_not(self) -> str:
        failures = self.trainer.stats.failures
        return ", ".join(f"{name} x{n}" for name, n in failures.most_common(3)) or "no batches"

    # ---- reports ---------------------------------------------------------------------------------

    def _on_step(self, report: StepReport) -> None:
        self._window.append(report)
        if len(self._window) >= self.settings.report_every:
            self._report()

    def _report(self) -> None:
        window, self._window = self._window, []
        self._reports += 1
        every = self.settings.evaluate_every
        measure = every > 0 and self._reports % every == 0
        now = time.monotonic()
        elapsed, self._since = now - self._since, now
        samples = sum(r.samples for r in window)
        snapshot = self.layer.stats.snapshot()
        calls = sum(snapshot["calls"].values())
        failed_calls = sum(sum(kinds.values()) for kinds in snapshot["failures"].values())
        progress = MoEProgress(
            steps=self.trainer.stats.steps,
            samples=self.trainer.stats.samples,
            loss=round(sum(r.loss for r in window) / len(window), 5),
            samples_per_second=round(samples / elapsed, 1) if elapsed > 0 else 0.0,
            failed=self.trainer.stats.failed,
            staleness=round(sum(r.staleness for r in window) / len(window), 2),
            experts_answered=round(1 - failed_calls / calls, 4) if calls else 1.0,
        )
        self.on_event(progress)
        if measure:
            # it needs the experts (a forward through the network): measured off the step path
            self._tasks.spawn(f"accuracy-{self._reports}", self._evaluate(progress.steps))

    async def _evaluate(self, steps: int) -> None:
        try:
            accuracy = await self.bridge.run(self._accuracy)
        except (BarnraiseError, OSError) as exc:
            log.info("accuracy not measured this time: %s", exc)
            return
        self.on_event(MoEAccuracy(steps, accuracy))

    def _accuracy(self) -> float:
        """On a worker: the share of held-out digits the model classifies right (no updates)."""
        size = self.settings.manifest.trainer.batch_size
        x, y = self.data.test_x, self.data.test_y
        right = 0
        with torch.no_grad():
            for start in range(0, len(x), size):
                logits: Tensor = self.model(x[start : start + size])
                right += int((logits.argmax(dim=1) == y[start : start + size]).sum())
        return round(right / len(x), 4)

    # ---- stopping --------------------------------------------------------------------------------

    async def close(self) -> None:
        self.bridge.interrupt()
        await self._tasks.close()
        await self.bridge.aclose()
        await self.receipts.close()  # the last totals, while the host can still reach the servers
        await self.dht.close()
        if self.presence is not None:
            await self.presence.close()
        await self.host.close()
        if self.address is not None:
            self.on_event(MoETrainerStopped(self.trainer.stats.steps))
            self.address = None


async def _sleep_or_stop(seconds: float, stop: asyncio.Event) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
