"""What a project peer does once it is on the network, by its role: train, or be the backbone.

What either builds depends on the project's training mode, and is the mode's to build
(``core.training.mode``: ``mode_of`` the manifest); what is here is what every mode shares.

A trainer (or a client, which others cannot dial) places the state on its training device with
the manifest's precision, fetches the tokenizer, streams its data, and trains through its mode's
optimizer until stopped (``TrainerRole``); it follows the collaboration's curve (``curve``) from
the progress records its optimizer fetches anyway. A backbone, the backbone
(``run_backbone``), runs its mode's backbone: a replica of the state kept and served, checkpoints
written (and published); each completed epoch is logged and reported here, and the replica is
measured on the project's held-out text (``core.training.evaluation``).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
from collections.abc import Callable

from core.training.checkpoints import CheckpointStore
from core.training.credit.checks.fingerprint import precision_name
from core.training.credit.metrics import EpochMetrics, MetricsAggregator, MetricsLog
from core.training.curve import follow_metrics, metrics_event
from core.training.evaluation import HeldOutEvaluator
from core.training.links import PeerLinks
from core.training.mode import BackboneParts, ModeOptimizer, PeerParts, mode_of
from core.training.peer.recipe import (
    build_model,
    data_stream,
    fetch_tokenizer,
    mlm_loss,
    training_state,
)
from core.training.peer.residency import Residency
from core.training.progress import HeldOut
from core.training.settings import PeerSettings
from core.training.state import TrainingState
from core.training.trainer import Trainer
from core.util.tasks import BackgroundTasks
from core.worker.control import TrainingControl
from core.worker.device import training_device
from core.worker.events import PeerEvaluation, PeerEvent, PeerWaiting
from core.worker.precision import choose_precision

log = logging.getLogger(__name__)

MILESTONE_EVERY = 10
"""The backbone keeps every 10th checkpoint longer (``CheckpointStore`` milestones): what a
rollback to an older epoch than the last few needs."""
METRICS_LOG = "metrics.jsonl"
"""In the backbone's work folder: one line per completed epoch (``EpochMetrics.summary``)."""
CHECKS_LOG = "checks.jsonl"
"""In the backbone's work folder: one line per work check (``CheckRecord``), for the audit."""
EVALUATION_LOG = "evaluation.jsonl"
"""In the backbone's work folder: one line per held-out evaluation (``PeerEvaluation``'s fields)."""


class TrainerRole:
    def __init__(
        self,
        settings: PeerSettings,
        state: TrainingState,
        links: PeerLinks,
        *,
        control: TrainingControl,
        residency: Residency,
        tasks: BackgroundTasks,
        on_event: Callable[[PeerEvent], None],
    ) -> None:
        """``tasks``: the peer's, where the role's background tasks run (closed by the peer)."""
        self.settings = settings
        self.state = state
        self.links = links
        self.control = control
        self.residency = residency
        self.on_event = on_event
        self._tasks = tasks
        self.optimizer: ModeOptimizer | None = None
        """Once the state is on its device and the data flows."""
        self.trainer: Trainer | None = None
        """Once the optimizer has caught up with the collaboration."""

    async def run(self, stop: asyncio.Event) -> None:
        s, manifest, bridge = self.settings, self.settings.manifest, self.links.bridge
        t = manifest.training
        device, why = await bridge.run(training_device, s.device)
        log.info("training on %s: %s", device, why)
        precision = choose_precision(device, t.precision)
        self.residency.device = precision.device
        await bridge.run(self.state.model.to, precision.device)
        tokenizer = await bridge.run(fetch_tokenizer, manifest, s.data_base, s.work_dir)
        batches = data_stream(manifest, tokenizer, data_base=s.data_base, seed=s.data_seed)
        parts = PeerParts(
            s, self.state, self.links, self.on_event, loss=mlm_loss,
            replica=lambda: training_state(build_model(manifest), manifest),
        )  # fmt: skip
        self.optimizer = optimizer = mode_of(manifest).trainer(parts)
        optimizer.on_waiting = lambda reason: self.on_event(PeerWaiting(reason))
        self._tasks.spawn("interrupt-on-stop", _interrupt_on(stop, optimizer))
        await optimizer.start()
        if not self.control.running:
            await optimizer.pause()
        # epochs that ended before we joined (we caught up by now) are not ours to report, except
        # the last one, so that a curve starts at once
        aggregator = MetricsAggregator(after_epoch=optimizer.view().epoch - 2)
        self._tasks.spawn("metrics", follow_metrics(optimizer.view, aggregator, self.on_event))
        self.trainer = trainer = Trainer(
            self.state.model,
            optimizer,
            self.links.bridge,
            batches,
            mlm_loss,
            precision=precision,
            control=self.control,
            witness=optimizer.keep_receipts(precision_name(precision.dtype)),
            fresh=optimizer.fresh,
        )
        try:
            await trainer.run(
                until_epoch=self.settings.until_epoch, stop=stop, on_epoch=self.on_event
            )
        finally:
            trainer.close()


async def run_backbone(
    settings: PeerSettings,
    state: TrainingState,
    links: PeerLinks,
    *,
    on_event: Callable[[PeerEvent], None],
    stop: asyncio.Event,
) -> None:
    """Be the backbone until ``stop``: a replica of the state kept and served, checkpoints
    written (and published), each completed epoch logged to ``metrics.jsonl``, told as an event
    with the samples per user, and handed to ``settings.on_metrics``; with ``[evaluation]``, the
    replica measured on the held-out text every ``every`` epochs (``evaluation.jsonl``, a
    ``PeerEvaluation`` event)."""
    s, manifest = settings, settings.manifest
    metrics_log = MetricsLog(s.work_dir / METRICS_LOG)
    store = (
        CheckpointStore(
            s.work_dir / "checkpoints",
            keep=s.keep_checkpoints,
            milestone_every=MILESTONE_EVERY * s.checkpoint_every,
        )
        if s.checkpoint_every
        else None
    )

    evaluator: HeldOutEvaluator | None = None

    def report(metrics: EpochMetrics) -> None:
        metrics_log.write(metrics)
        if s.on_metrics is not None:
            s.on_metrics(metrics)
        if metrics.withdrawn:
            why = "; ".join(sorted({p.note for p in metrics.contributions if p.note}))
            log.warning("epoch %d: %d samples of credit withdrawn from %s (%s)", metrics.epoch,
                        metrics.samples, ", ".join(sorted(metrics.by_user())),
                        why or "taken back")  # fmt: skip
            return
        if metrics.late:
            log.info("epoch %d: %d more samples credited (%s), read after the epoch was reported",
                     metrics.epoch, metrics.samples, ", ".join(sorted(metrics.by_user())))  # fmt: skip
            return
        on_event(metrics_event(metrics, by_user=True))
        if evaluator is not None:
            evaluator.epoch_done(metrics.epoch)

    if manifest.evaluation.enabled:
        evaluation_log = MetricsLog(s.work_dir / EVALUATION_LOG)

        def evaluated(result: PeerEvaluation) -> None:
            evaluation_log.write_record(dataclasses.asdict(result))
            links.board.evaluated(HeldOut.of(result))  # our record tells the trainers
            on_event(result)
            if s.on_evaluation is not None:
                s.on_evaluation(result)

        evaluator = HeldOutEvaluator(
            manifest,
            tokenizer=lambda: fetch_tokenizer(manifest, s.data_base, s.work_dir),
            data_base=s.data_base,
            replica=links.bridge,
            # both modes keep the replica in ``state`` (diloco: the anchor, which the backbone's
            # parameters follow) and number its epochs there
            snapshot=lambda: (state.epoch, copy.deepcopy(state.model)),
            on_result=evaluated,
        )
    checks_log = MetricsLog(s.work_dir / CHECKS_LOG)
    parts = BackboneParts(
        settings,
        state,
        links,
        on_event,
        checkpoints=store,
        report=report,
        loss=mlm_loss,
        on_check=lambda record: checks_log.write_record(record.to_json()),
        replica=lambda: training_state(build_model(manifest), manifest),
    )
    try:
        await mode_of(manifest).backbone(parts).run(stop)
    finally:
        if evaluator is not None:
            await evaluator.aclose()


async def _interrupt_on(stop: asyncio.Event, optimizer: ModeOptimizer) -> None:
    """A stop ends a wait for the state at once, not after the backoff."""
    await stop.wait()
    optimizer.interrupt()
