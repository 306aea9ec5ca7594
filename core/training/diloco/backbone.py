"""The backbone of a diloco project: the outer state kept, served and checkpointed, the rounds'
metrics logged.

It runs a ``DilocoOptimizer`` that computes nothing (``mode="aux"``): it joins every round with
weight 0, reduces a share of it, receives the average and takes the trainers' outer step, so the
model outlives its trainers and newcomers download the anchor and the outer momentum from it. On
start it resumes from its newest checkpoint, whose model holds the anchor and whose optimizer
part holds the outer momentum. The per-round metrics come from the progress records, as the
dedloc backbone's do, and so do its accusations: it collects the members' signed evidence at each
new epoch (and every ``EVIDENCE_INTERVAL`` s), names each accused peer in its log and passes the
evidence on to the coordinator.

Credit follows the members' contribution scores (``core.training.work.contribution``): the part of
each round the backbone reduces shows how far each member's update went along the others' per
sample it claimed, and a claim its updates do not show is cut to what they do, accused, and logged
as a check (``checks.jsonl``: the audit's checked share).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from core.averaging import Contribution
from core.training.checkpoints import Checkpoint, CheckpointStore
from core.training.diloco.optimizer import DilocoOptimizer
from core.training.diloco.state import SCHEDULE_KEY, DilocoState
from core.training.errors import CheckpointError
from core.training.metrics import EpochMetrics, MetricsAggregator
from core.training.moderation.evidence import EvidenceCollector, Reported, pass_on
from core.training.moderation.rollback import METADATA_KEY
from core.training.samples import SAMPLES_TOTAL, SamplesTally
from core.training.work.checker import CheckRecord
from core.training.work.contribution import ContributionScores, credited
from core.trust.evidence import Evidence
from core.trust.peer_id import PeerID
from core.util.errors import BarnraiseError
from core.worker.bridge import TrainingBridge

log = logging.getLogger(__name__)

POLL_SECONDS = 0.5
EVIDENCE_INTERVAL = 30.0
"""Seconds between collections of the members' evidence while the epoch does not change."""
ACCUSATIONS_KEPT = 256


class DilocoBackbone:
    def __init__(
        self,
        optimizer: DilocoOptimizer,
        *,
        checkpoints: CheckpointStore | None,
        checkpoint_every: int,
        on_metrics: Callable[[EpochMetrics], None] | None = None,
        publish: Callable[[Path, int, float | None], object] | None = None,
        on_evidence: Callable[[list[Evidence]], None] | None = None,
        evidence_interval: float = EVIDENCE_INTERVAL,
        on_check: Callable[[CheckRecord], None] | None = None,
    ) -> None:
        if optimizer.config.mode != "aux":
            raise ValueError("the backbone's optimizer runs in aux mode")
        self.optimizer = optimizer
        self.checkpoints = checkpoints
        self.checkpoint_every = checkpoint_every
        self.on_metrics = on_metrics
        self.publish = publish
        self._aggregator = MetricsAggregator()
        self.samples = SamplesTally()
        """The samples behind the outer state's epochs, for its checkpoints."""
        self._saved = -1
        self.on_evidence = on_evidence
        self.accusations: deque[Reported] = deque(maxlen=ACCUSATIONS_KEPT)
        """The newest accusations collected (each once), for diagnostics and tests."""
        self._collector = EvidenceCollector(optimizer.evidence)
        self._evidence_every = evidence_interval
        self._collected = (-1, -math.inf)
        """(epoch, monotonic time) of the last collection of evidence."""
        seconds = optimizer.config.round_seconds
        self.scores = ContributionScores(
            hold=max(10.0, seconds), newcomer_hold=max(30.0, 4 * seconds)
        )
        self._aggregator.credit.judge = self.scores.supported
        self.on_check = on_check

    async def run(self, stop: asyncio.Event) -> None:
        opt = self.optimizer
        resumed = await resume_from_checkpoint(opt.diloco, opt.bridge, self.checkpoints)
        if resumed is not None:
            self.samples.resume(resumed.metadata, resumed.epoch, opt.diloco.state.rollback)
        self._saved = opt.epoch
        await opt.start()
        try:
            while not stop.is_set():
                now = time.time()
                while opt.witnessed:
                    self._aggregator.witness(*opt.witnessed.popleft(), now)
                while opt.scored:
                    await self._score(*opt.scored.popleft())
                for metrics in self._aggregator.observe(opt.view().reports, now):
                    self.samples.add(metrics)
                    if self.on_metrics is not None:
                        self.on_metrics(metrics)
                    await self._maybe_checkpoint(metrics)
                for metrics in self._aggregator.late_credit(now):
                    self.samples.add(metrics)
                    if self.on_metrics is not None:
                        self.on_metrics(metrics)
                await self._collect_evidence()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), POLL_SECONDS)
        finally:
            opt.interrupt()
            await opt.close()

    async def _score(self, epoch: int, contributions: dict[str, Contribution]) -> None:
        """Score the round's senders; log each as a check, accuse those whose work is not there."""
        ratios = self.scores.observe(epoch, contributions)
        users = {r.peer: r.username for r in self.optimizer.view().reports if r.username}
        for peer, ratio in ratios.items():
            standing = self.scores.standing(peer, epoch) or 0.0
            claimed = int(contributions[peer].weight)
            backed = credited(claimed, standing)
            record = CheckRecord(
                time.time(), epoch, peer, users.get(peer), "passed" if backed == claimed else "caught",
                claimed, backed, 0, 0.0,
                reason=f"contribution score {ratio:.2f} of the round's median, standing {standing:.2f}",
            )  # fmt: skip
            if self.on_check is not None:
                self.on_check(record)
        for peer, standing in self.scores.accusations().items():
            reason = (
                f"its updates show {standing:.2f} of the work per sample the others' show, over "
                f"its last rounds: it claims samples it did not compute"
            )
            log.warning("evidence: peer %s %s", peer, reason)
            evidence = self.optimizer.evidence.accuse(
                PeerID.from_string(peer), round_key=f"work.{epoch}", group=b"", chunk=-1,
                statistic="work_score", value=standing, reason=reason,
            )  # fmt: skip
            if evidence is not None:
                await self.optimizer.evidence.publish_signed([evidence], f"scores of epoch {epoch}")

    async def _collect_evidence(self) -> None:
        """The members' accusations, at each new epoch and every ``evidence_interval`` seconds:
        each accused peer named in the log, the evidence passed on (``pass_on``)."""
        epoch, at = self._collected
        now = time.monotonic()
        if epoch == self.optimizer.epoch and now - at < self._evidence_every:
            return
        self._collected = (self.optimizer.epoch, now)
        users = {r.peer: r.username for r in self.optimizer.view().reports if r.username}
        self.accusations.extend(await pass_on(self._collector, users, self.on_evidence))

    async def _maybe_checkpoint(self, metrics: EpochMetrics) -> None:
        opt, store = self.optimizer, self.checkpoints
        every = self.checkpoint_every
        if store is None or not every or opt.epoch <= self._saved or opt.epoch % every:
            return
        diloco = opt.diloco
        epoch = opt.epoch

        def save() -> Path | None:
            rollback = diloco.state.rollback
            metadata = {"epoch": epoch, "mode": "diloco", "samples": metrics.samples,
                        SAMPLES_TOTAL: self.samples.before(epoch, rollback),
                        METADATA_KEY: rollback}  # fmt: skip
            loss = float("nan") if metrics.loss is None else metrics.loss
            return store.save(epoch, diloco.model_state(), diloco.outer_state(), metadata, loss)

        try:
            path = await opt.bridge.run(save)
        except (CheckpointError, OSError) as exc:
            log.warning("the checkpoint of epoch %d was not written: %s", epoch, exc)
            return
        if path is None:
            return
        self._saved = epoch
        if self.publish is not None:
            try:
                await asyncio.to_thread(self.publish, path, epoch, metrics.loss)
            except (BarnraiseError, OSError) as exc:
                log.warning("publishing the checkpoint of epoch %d failed: %s", epoch, exc)


async def resume_from_checkpoint(
    diloco: DilocoState, bridge: TrainingBridge, store: CheckpointStore | None
) -> Checkpoint | None:
    """The newest diloco checkpoint that loads becomes the outer state (none: the initial one);
    returns it."""
    if store is None:
        return None
    for path in reversed(store.list()):
        try:
            checkpoint = await bridge.run(CheckpointStore.load, path)
            if checkpoint.metadata.get("mode") != "diloco":
                raise CheckpointError("not a diloco checkpoint")
            momentum = checkpoint.optimizer.get("outer_momentum")
            if not isinstance(momentum, list):
                raise CheckpointError("it holds no outer momentum")
            buffers = [_flat(m) for m in momentum]
            kept = checkpoint.optimizer.get(SCHEDULE_KEY, 0.0)
            schedule = float(kept) if isinstance(kept, int | float) else 0.0
            await bridge.run(diloco.state.model.load_state_dict, checkpoint.model)
            await bridge.run(diloco.restart, checkpoint.epoch, buffers, schedule)
        except (CheckpointError, ValueError, RuntimeError, KeyError) as exc:
            log.warning("checkpoint %s cannot be used: %s", path, exc)
            continue
        log.info("the backbone resumes from %s (epoch %d)", path.name, checkpoint.epoch)
        return checkpoint
    return None


def _flat(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to("cpu", torch.float32).contiguous().numpy().reshape(-1)
