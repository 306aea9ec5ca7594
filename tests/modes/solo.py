"""``solo``: a training mode that exists only for the tests, to show that a mode added to the table
(and nowhere else) is found everywhere a mode is named, checked, costed, shown or built.

Each trainer takes a step of its own optimizer at every microbatch and exchanges nothing; its
records still say what landed, and the backbone makes the collaboration's metrics from them. Small,
but a real mode: it takes part through ``Participation`` as the shipped ones do.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

from core.averaging.robust.aggregation import AggregationConfig
from core.modes import ModeSpec, Traffic, TrafficInputs
from core.modes.spec import AveragingKnobs, Problem, TrainingKnobs
from core.project import Manifest
from core.training.credit.metrics import EpochMetrics, MetricsAggregator
from core.training.links import PeerLinks
from core.training.mode import BackboneParts, Matchmaking, PeerParts
from core.training.participation import Participation, TakingPart
from core.training.progress import CollaborationView, PeerProgress
from core.training.state import TrainingState
from core.util.tasks import BackgroundTasks
from core.worker.events import PeerEpoch

SOLO_WAIT = 0.75
"""The matchmaking this mode asks for, unlike either shipped mode's."""
LONGEST_ROUND = 600.0
"""What ``solo`` refuses: a longer ``training.round_seconds`` (a rule of its own)."""


def _check(training: TrainingKnobs, averaging: AveragingKnobs) -> Iterator[Problem]:
    if training.round_seconds > LONGEST_ROUND:
        yield "training.round_seconds", f"solo rounds last at most {LONGEST_ROUND:g} s"


def _traffic(inputs: TrafficInputs) -> Traffic:
    # one record a second, whatever the model: a figure no shipped mode gives
    per_hour = 3600.0 * 100
    return Traffic(per_hour, "network: solo peers exchange nothing but their records")


def _describe(training: TrainingKnobs) -> str:
    return ", each volunteer alone (the solo mode)"


def _epoch(training: TrainingKnobs) -> str:
    return "one microbatch's step, taken by each volunteer alone"


SOLO = ModeSpec(
    "solo",
    summary="each peer trains alone and exchanges nothing",
    for_people="This project trains alone on every computer",
    implementation="tests.modes.solo",
    check=_check,
    traffic=_traffic,
    describe=_describe,
    epoch=_epoch,
    clock_rounds=True,
)


class SoloOptimizer(TakingPart):
    """A step of the peer's own optimizer at every microbatch: one epoch each."""

    def __init__(self, state: TrainingState, links: PeerLinks, role: str) -> None:
        self.state = state
        self.links = links
        self._tasks = BackgroundTasks("solo")
        self.part = Participation(
            links, role, snapshot=state.snapshot(), retry_cap=1.0, tasks=self._tasks
        )

    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def offloadable(self) -> None:
        return None

    def keep_receipts(self, precision: str) -> None:
        return None  # nobody checks a solo trainer's work

    def fresh(self, batch: Any) -> bool:
        return True  # no receipts: every batch is computed

    def tryout_weights(self) -> None:
        return None  # each step lands in the model itself

    async def start(self) -> None:
        await self.part.offer(lambda: self.epoch)
        await self.part.publish(self._record())

    async def step(self, batch_size: int, loss: float | None = None) -> PeerEpoch:
        await self.links.bridge.run(self._apply)
        self.part.tally.count(batch_size, loss)
        epoch = self.epoch
        samples, loss_sum, steps = self.part.tally.take()
        self.part.last = (epoch, loss_sum, steps, samples)
        self.part.landed.add(epoch, samples)
        self.state.epoch = epoch + 1
        await self.part.publish(self._record())
        return PeerEpoch(epoch, samples, 1, False, "alone", 0.0, float(samples))

    def _apply(self) -> None:
        self.state.optimizer.step()
        self.state.optimizer.zero_grad(set_to_none=True)

    def view(self) -> CollaborationView:
        return self.links.board.view(self.part.records, self._record(), 1)

    async def pause(self) -> None:
        if self.part.step_aside():
            await self.part.publish(self._record())

    async def resume(self) -> None:
        if self.part.come_back():
            await self.part.publish(self._record())

    def interrupt(self) -> None:
        pass  # it never waits for anyone

    async def close(self) -> None:
        await self._tasks.close()
        await self.part.leave(self._record())

    def _record(self) -> PeerProgress:
        return self.part.record(self.epoch, self.part.tally.samples)


class SoloBackbone:
    """Serves the initial state and reports each epoch the trainers' records say landed."""

    def __init__(self, parts: BackboneParts) -> None:
        self.parts = parts
        self._tasks = BackgroundTasks("solo-backbone")
        self.part = Participation(
            parts.links,
            "aux",
            snapshot=parts.state.snapshot(),
            retry_cap=1.0,
            tasks=self._tasks,
        )
        self.reported: list[EpochMetrics] = []

    async def run(self, stop: asyncio.Event) -> None:
        aggregator = MetricsAggregator()
        await self.part.offer(lambda: self.parts.state.epoch)
        try:
            while not stop.is_set():
                records = await self.part.read()
                now = time.time()
                for metrics in aggregator.observe(records or [], now):
                    self.reported.append(metrics)
                    self.parts.report(metrics)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.2)
        finally:
            await self._tasks.close()
            await self.part.leave(self.part.record(self.parts.state.epoch, 0))


class Solo:
    def matchmaking(self, manifest: Manifest) -> Matchmaking:
        return Matchmaking(SOLO_WAIT, SOLO_WAIT)

    def aggregation(self, base: AggregationConfig) -> AggregationConfig:
        return base

    def trainer(self, parts: PeerParts) -> SoloOptimizer:
        role = "client" if parts.settings.role == "client" else "trainer"
        return SoloOptimizer(parts.state, parts.links, role)

    def backbone(self, parts: BackboneParts) -> SoloBackbone:
        return SoloBackbone(parts)


MODE = Solo()
