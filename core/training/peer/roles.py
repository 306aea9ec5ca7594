"""What a project peer does once it is on the network, by its role: train, or be the backbone.

A trainer (or a client, which others cannot dial) places the state on its training device with
the manifest's precision, fetches the tokenizer, streams its data, and trains through the
``CollaborativeOptimizer`` until stopped (``TrainerRole``); it follows the collaboration's curve
(``curve``) from the progress records its optimizer fetches anyway, and when no peer can give it
the state, the organizers' published checkpoint (``published``). An auxiliary peer, the backbone
(``run_backbone``), keeps and serves a replica of the state, writes checkpoints, and logs and
reports each completed epoch. In a moderated project both follow the moderators' rollback orders
(``rollback_replica``); each applied order is a ``rollback`` event. The backbone also measures
its replica on the project's held-out text (``core.training.evaluation``).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from core.project import Manifest
from core.training.auxiliary import AuxiliaryConfig, AuxiliaryPeer
from core.training.checkpoints import CheckpointStore
from core.training.collaborative import CollaborativeConfig, CollaborativeOptimizer
from core.training.curve import follow_metrics, metrics_event
from core.training.diloco.backbone import DilocoBackbone
from core.training.diloco.optimizer import DilocoConfig, DilocoOptimizer
from core.training.diloco.state import DilocoState
from core.training.evaluation import HeldOutEvaluator
from core.training.links import PeerLinks
from core.training.metrics import EpochMetrics, MetricsAggregator, MetricsLog
from core.training.peer.recipe import data_stream, fetch_tokenizer, matchmaking_time, mlm_loss
from core.training.peer.residency import Residency
from core.training.peer.settings import PeerSettings
from core.training.progress import HeldOut
from core.training.published import published_fallback
from core.training.rollback_replica import ReplicaRollback, RolledBack
from core.training.state import TrainingState
from core.training.trainer import Trainer
from core.util.errors import ConfigError
from core.util.tasks import BackgroundTasks
from core.worker.control import TrainingControl
from core.worker.device import training_device
from core.worker.events import PeerEvaluation, PeerEvent, PeerWaiting
from core.worker.precision import Precision, choose_precision

log = logging.getLogger(__name__)

MILESTONE_EVERY = 10
"""The backbone keeps every 10th checkpoint longer (``CheckpointStore`` milestones): what a
rollback to an older epoch than the last few needs."""
EVALUATION_LOG = "evaluation.jsonl"
"""In the backbone's work folder: one line per held-out evaluation (``PeerEvaluation``'s fields)."""
UNSENT_FILE = "diloco-unsent.npz"
"""In a trainer's work folder: its unsent diloco work across a restart (``UnsentWork``)."""


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
        self.optimizer: CollaborativeOptimizer | DilocoOptimizer | None = None
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
        if t.mode == "diloco":
            await self._run_diloco(stop, batches, precision)
            return
        self.optimizer = optimizer = CollaborativeOptimizer(
            self.state,
            self.links,
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
        optimizer.on_waiting = lambda reason: self.on_event(PeerWaiting(reason))
        optimizer.fallback = published_fallback(manifest, s.work_dir)
        if s.misbehaviour is not None:
            log.warning("this peer misbehaves on purpose: %s", s.misbehaviour.describe())
            s.misbehaviour.install(optimizer, self.links.averager)
        optimizer.rollback = ReplicaRollback.following(
            s.access,
            optimizer.local,
            self.links,
            published=optimizer.fallback,
            on_applied=self._rolled_back,
        )
        await self._train(optimizer, stop, batches, precision)

    async def _run_diloco(
        self, stop: asyncio.Event, batches: Iterator[Any], precision: Precision
    ) -> None:
        s, manifest = self.settings, self.settings.manifest
        if s.misbehaviour is not None:
            raise ConfigError("the demo's misbehaving peers run in dedloc mode only")
        self.optimizer = optimizer = diloco_optimizer(
            manifest,
            self.state,
            self.links,
            "client" if s.role == "client" else "trainer",
            unsent_file=s.work_dir / UNSENT_FILE,
        )
        optimizer.on_waiting = lambda reason: self.on_event(PeerWaiting(reason))
        await self._train(optimizer, stop, batches, precision)

    async def _train(
        self,
        optimizer: CollaborativeOptimizer | DilocoOptimizer,
        stop: asyncio.Event,
        batches: Iterator[Any],
        precision: Precision,
    ) -> None:
        """Start ``optimizer`` (paused if the engine is), follow the curve, and train until stopped."""
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
        )
        try:
            await trainer.run(
                until_epoch=self.settings.until_epoch, stop=stop, on_epoch=self.on_event
            )
        finally:
            trainer.close()

    def _rolled_back(self, done: RolledBack) -> None:
        self.on_event(done.event())


async def run_backbone(
    settings: PeerSettings,
    state: TrainingState,
    links: PeerLinks,
    *,
    on_event: Callable[[PeerEvent], None],
    stop: asyncio.Event,
) -> None:
    """Be the auxiliary peer until ``stop``: a replica of the state kept and served, checkpoints
    written (and published), each completed epoch logged to ``metrics.jsonl``, told as an event
    with the samples per user, and handed to ``settings.on_metrics``; with ``[evaluation]``, the
    replica measured on the held-out text every ``every`` epochs (``evaluation.jsonl``, a
    ``PeerEvaluation`` event)."""
    s, manifest = settings, settings.manifest
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

    evaluator: HeldOutEvaluator | None = None

    def report(metrics: EpochMetrics) -> None:
        metrics_log.write(metrics)
        if s.on_metrics is not None:
            s.on_metrics(metrics)
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
    try:
        await _run_replica(
            settings, state, links, store=store, report=report, on_event=on_event, stop=stop
        )
    finally:
        if evaluator is not None:
            await evaluator.aclose()


async def _run_replica(
    settings: PeerSettings,
    state: TrainingState,
    links: PeerLinks,
    *,
    store: CheckpointStore | None,
    report: Callable[[EpochMetrics], None],
    on_event: Callable[[PeerEvent], None],
    stop: asyncio.Event,
) -> None:
    s, manifest = settings, settings.manifest
    if manifest.training.mode == "diloco":
        backbone = DilocoBackbone(
            diloco_optimizer(manifest, state, links, "aux"),
            checkpoints=store,
            checkpoint_every=s.checkpoint_every,
            on_metrics=report,
            publish=s.publishing.publish if s.publishing is not None else None,
        )
        await backbone.run(stop)
        return
    aux = AuxiliaryPeer(
        state,
        links,
        config=AuxiliaryConfig(
            target_batch_size=manifest.training.target_batch_size,
            matchmaking_time=manifest.averaging.matchmaking_time,
            checkpoint_every=s.checkpoint_every,
            average_state_every=manifest.training.average_state_every,
            clip_norm=manifest.training.clip_norm or None,
            delay_parameter_updates=manifest.training.delay_parameter_updates,
        ),
        checkpoints=store,
        on_metrics=report,
        # it says where it published; a failure is the auxiliary peer's to report
        publish=s.publishing.publish if s.publishing is not None else None,
        on_evidence=s.on_evidence,
    )
    aux.rollback = ReplicaRollback.following(
        s.access,
        aux.local,
        links,
        checkpoints=store,
        on_applied=lambda done: on_event(done.event()),
    )
    await aux.run(stop)


def diloco_optimizer(
    manifest: Manifest,
    state: TrainingState,
    links: PeerLinks,
    mode: str,
    unsent_file: Path | None = None,
) -> DilocoOptimizer:
    """The manifest's DiLoCo rounds around ``state`` (already on its training device);
    ``unsent_file``: where a trainer keeps its unsent work across a restart."""
    t, codec = manifest.training, links.averager.config.codec
    diloco = DilocoState(
        state,
        outer_lr=t.outer_lr,
        outer_momentum=t.outer_momentum,
        overlap=t.overlap,
        sparse=codec.sparse,
        clip_norm=t.clip_norm or None,
    )
    config = DilocoConfig(
        round_seconds=t.round_seconds,
        mode=mode,
        matchmaking_time=matchmaking_time(manifest),
        unsent_file=unsent_file,
    )
    return DilocoOptimizer(diloco, links, config)


async def _interrupt_on(
    stop: asyncio.Event, optimizer: CollaborativeOptimizer | DilocoOptimizer
) -> None:
    """A stop ends a wait for the state at once, not after the backoff."""
    await stop.wait()
    optimizer.interrupt()
