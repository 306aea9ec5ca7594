"""DedlocBackbone: the backbone of a dedloc project, a peer without gradients that keeps the
collaboration alive (DeDLOC's auxiliary peers, hivemind's backbone peers).

It follows the progress records; when the trainers reach the target batch it joins their gradient
round with weight 0 (a member that sends nothing and receives the averages, not the averaging
layer's reduce-only member, which receives nothing), so that its (usually fast, dialable) link
reduces a share of the vector, and likewise their state rounds every ``average_state_every``
epochs (volunteers behind home routers average as clients, which reduce nothing: without a
dialable peer they could not average state).

It keeps a replica of the collaboration's state and serves it to newcomers, so that the model
survives when every trainer has left: the averaged gradient a round gives it back is applied with
the trainers' optimizer (the same step they take), a complete state round replaces it with the
trainers' average, and when it missed a round it downloads the state from a trainer (with backoff).
On start it loads its newest checkpoint. It announces its replica as a state donor with its epoch;
a downloader takes the newest state that answers, so an older replica never rolls anyone back. When
no trainer is left, its own progress record carries its replica's epoch, so that newcomers continue
from there (the epoch number and the loss go on where they stopped).

Its books are the ``Bookkeeping`` every backbone shares: each epoch's metrics and credit from
everyone's records, a checkpoint every ``checkpoint_every`` epochs (never one whose loss is NaN)
with the samples behind it, published if asked, and the members' evidence collected and passed on.
With work checks (``core.training.credit.checks``) it spot-checks the trainers' microbatches, and
credit waits for what the checks support. A rollback order of the moderators puts the replica on
one of its checkpoints, one epoch past the newest it knows of, for the trainers to download
(``rollback_replica``). Its own findings as a reducer are published like a trainer's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from core.averaging import AveragingResult
from core.averaging.sharing.state import DownloadedState, StateDownloadError
from core.codecs import NONE, Codec
from core.config.roles import BACKBONE
from core.training.bookkeeping import Bookkeeping, Publisher, Saving
from core.training.checkpoints import CheckpointStore
from core.training.credit.checks import CheckRecord, Standings, WorkChecker
from core.training.credit.metrics import EpochMetrics
from core.training.credit.samples import SamplesTally
from core.training.dedloc.optimizer import MAX_SHORT_ROUNDS
from core.training.links import PeerLinks
from core.training.local import LocalWork
from core.training.moderation.evidence import Reported
from core.training.moderation.rollback import applied_of, round_key
from core.training.participation import Participation
from core.training.progress import KEEPALIVE, LEFT, PeerProgress
from core.training.progress.confirmed import by_records
from core.training.rollback_replica import ReplicaRollback
from core.training.state import TrainingState
from core.training.trainer import LossFn
from core.trust.evidence import Evidence
from core.util.errors import BarnraiseError
from core.util.retry import Retry
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkChecks:
    """The backbone's spot checks of the trainers' work (``core.training.credit.checks``)."""

    rate: float
    """The share of epochs checked at random, besides each peer's first."""
    loss: LossFn
    on_check: Callable[[CheckRecord], None] | None = None


@dataclass(frozen=True)
class DedlocBackboneConfig:
    target_batch_size: int
    matchmaking_time: float = 5.0
    poll_interval: float = 0.1
    checkpoint_every: int = 0
    """Epochs between checkpoints; 0 writes none."""
    state_timeout: float = 120.0
    average_state_every: int = 0
    """The trainers' state-averaging period (the manifest's); 0 joins no state rounds."""
    clip_norm: float | None = None
    """The trainers' gradient clipping (the manifest's): the replica steps exactly as they do."""
    retry_cap: float = 30.0
    """The longest wait between attempts to download the trainers' state."""
    evidence_interval: float = 30.0
    """Seconds between collections of evidence while the epoch does not change."""
    delay_parameter_updates: bool = False
    """The trainers' (the manifest's): they step after every round, short or not."""


class DedlocBackbone:
    def __init__(
        self,
        state: TrainingState,
        links: PeerLinks,
        config: DedlocBackboneConfig,
        *,
        checkpoints: CheckpointStore | None = None,
        on_metrics: Callable[[EpochMetrics], None] | None = None,
        publish: Publisher | None = None,
        on_evidence: Callable[[list[Evidence]], None] | None = None,
        work_checks: WorkChecks | None = None,
    ) -> None:
        averager = links.averager
        if averager.config.client_mode or averager.config.reduce_only:
            # it must reduce, and receive the averages (reduce-only members receive nothing)
            raise ValueError("the backbone needs an averager that reduces and receives")
        self.state = state
        """The replica of the collaboration's state (``state.epoch``: the epoch it is at)."""
        self.averager = averager
        self.links = links
        self.board = links.board
        self._tasks = BackgroundTasks(f"backbone/{averager.host.peer_id.short()}")
        self.part = Participation(
            links,
            BACKBONE,
            snapshot=state.snapshot(),
            retry_cap=config.retry_cap,
            tasks=self._tasks,
        )
        """Our offer of the replica and our downloads (the trainers' records are read here and
        handed to it)."""
        self.bridge = links.bridge
        self.config = config
        self.evidence = self.part.evidence
        standings = None if work_checks is None else Standings(work_checks.rate)
        self.books = Bookkeeping(
            evidence=self.evidence,
            bridge=self.bridge,
            tasks=self._tasks,
            checkpoints=checkpoints,
            checkpoint_every=config.checkpoint_every,
            on_metrics=on_metrics,
            publish=publish,
            on_evidence=on_evidence,
            evidence_interval=config.evidence_interval,
            support=standings,
        )
        """Metrics, credit, evidence and checkpoints (``core.training.bookkeeping``)."""
        self.local = LocalWork(state, config.clip_norm)
        self.epoch = 0
        """The collaboration's epoch as this peer sees it (what its progress record says)."""
        self.rounds_joined = 0
        self.steps_followed = 0
        """Gradient rounds whose average the replica applied (it stepped with the trainers)."""
        self.state_rounds_joined = 0
        """State rounds averaged completely with every trainer that was expected."""
        self.downloads = 0  # states downloaded from trainers (after a missed round)
        self._joined = -1
        self._short_rounds = 0
        """Short rounds in a row at the current epoch (the trainers count them alike)."""
        self._published_at = 0.0
        self._downloading: asyncio.Task[DownloadedState] | None = None
        self._joining: asyncio.Task[None] | None = None
        self._resync = Retry("the backbone could not refresh its state", log, cap=config.retry_cap)
        self._resync_after = 0.0
        self.rollback: ReplicaRollback | None = None
        """Applies the moderators' rollback orders to the replica (from our own checkpoints)."""
        self._rollback_after = 0.0
        self._me = str(averager.host.peer_id)
        # with ``work_checks`` the trainers' work is spot-checked and credit waits for the
        # checks (``core.training.credit.checks``); without, every claim is credited as made
        self.checker = (
            None
            if work_checks is None or standings is None
            else WorkChecker(
                state,
                averager.host,
                bridge=self.bridge,
                loss=work_checks.loss,
                standings=standings,
                evidence=self.evidence,
                tasks=self._tasks,
                claimed=self.books.aggregator.credit.claimed,
                user_of=self.books.user_of,
                on_check=work_checks.on_check,
            )
        )

    @property
    def samples(self) -> SamplesTally:
        """The samples behind the replica's epochs, for its checkpoints."""
        return self.books.samples

    @property
    def metrics(self) -> Sequence[EpochMetrics]:
        """The newest epochs reported."""
        return self.books.metrics

    @property
    def accusations(self) -> Sequence[Reported]:
        """The newest accusations collected (each once), for diagnostics and tests."""
        return self.books.accusations

    # ---- lifecycle -------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event | None = None) -> None:
        grads = [torch.zeros(p.shape, dtype=torch.float32) for p in self.state.parameters]
        try:
            await self._resume_from_checkpoint()
            await self.part.offer(lambda: self.state.epoch)
            while stop is None or not stop.is_set():
                try:
                    await self._tick(grads)
                except BarnraiseError as exc:
                    log.warning("backbone: %s", exc)
                await asyncio.sleep(self.config.poll_interval)
            await self.books.close()
        finally:
            await self._tasks.close()
            await self.part.leave(self._record())

    async def _resume_from_checkpoint(self) -> None:
        """The replica starts from the newest checkpoint that loads (none: the initial weights)."""
        state = self.state
        checkpoint = await self.books.resume(state.restore, lambda: (state.epoch, state.rollback))
        if checkpoint is not None:
            self.epoch = max(self.epoch, checkpoint.epoch)
            await self._replica_changed()

    # ---- one look at the collaboration -----------------------------------------------------------

    async def _tick(self, grads: list[torch.Tensor]) -> None:
        records = await self.board.fetch()
        self.part.records = records  # what a download asks of where the swarm is
        view = self.board.view(records, self._record(), self.config.target_batch_size)
        trainers = [p for p in view.peers if p.training]
        # with trainers: their newest epoch; without: our replica's, the newest state there is, so
        # that newcomers continue from it
        newest = max((p.epoch for p in trainers), default=None)
        if self.board.confirmers and trainers:
            # records cost nothing: follow the trainers only as far as the last round's members
            # confirm (or, before any confirmation, as far as half of the records go)
            found = view.confirmed if view.confirmed.by != "nobody" else by_records(trainers)
            newest = found.epoch if found.epoch >= 0 else None
        epoch = max(self.epoch, newest) if newest is not None else self.state.epoch
        if epoch != self.epoch:
            self.epoch = epoch
            await self._publish()
        elif time.monotonic() - self._published_at > KEEPALIVE:
            await self._publish()
        now = time.time()
        for metrics in self.books.observe(view.reports, now):
            if self.books.due(metrics.epoch + 1):
                self.books.checkpoint_soon(metrics, self.saving)
        if self.checker is not None:
            for peer, vouched in self.checker.standings.withdrawals().items():
                self.books.withdraw(peer, vouched, now)
        self.books.collect_soon(self.epoch)
        joining = self._joining is not None and not self._joining.done()
        if view.ready and self._joined < view.epoch and view.trainers_at_epoch and not joining:
            # in the background: the records keep being read meanwhile, so that no epoch's totals
            # pass unseen while a round runs (they make the metrics and the leaderboard)
            self._joined = view.epoch
            self._joining = self._tasks.spawn(
                f"round-{view.epoch}",
                self._join_step(view.epoch, len(view.trainers_at_epoch), grads),
            )
        elif not joining and not await self._follow_rollback():
            await self._keep_replica_current(newest)  # never while a round changes the replica

    async def _join_step(self, epoch: int, trainers: int, grads: list[torch.Tensor]) -> None:
        """Reduce in the trainers' round of ``epoch``; apply its average to the replica."""
        try:
            await self._step_with(epoch, trainers, grads)
        except BarnraiseError as exc:
            log.warning("backbone, round %d: %s", epoch, exc)

    async def _step_with(self, epoch: int, trainers: int, grads: list[torch.Tensor]) -> None:
        expected = trainers + 1
        for g in grads:
            g.zero_()  # weight 0 makes them irrelevant, but never let a NaN in
        key = round_key("grads", epoch, self.state.rollback)
        if self.checker is not None and self.state.epoch == epoch:
            self.checker.snapshot_soon(epoch)  # what the trainers computed this epoch's batches at
        result = await self._join(key, grads, expected, None, enough=self.config.target_batch_size)
        if result is None:
            log.info(
                "backbone, round %d: no group formed with it; its members are not checked "
                "at this epoch",
                epoch,
            )
            # no group: whether the trainers stepped without us, only their records can tell
            # (``_tick`` follows their epoch); a record of ours at the next epoch would make every
            # trainer wait for a state that nobody has when they did not step
            self._joined = epoch - 1
            return
        self.rounds_joined += 1
        if self._short(result):
            # the trainers keep this average and go on with the epoch (``DedlocOptimizer.
            # _average_and_apply``): no step, and we join the epoch's next round with them
            self._short_rounds += 1
            self._joined = epoch - 1
            return
        self._short_rounds = 0
        weights = {str(peer): weight for peer, weight in result.weights.items()}
        self.books.witness(epoch, weights, time.time())
        counted = {str(p): result.capped.get(p, w) for p, w in result.weights.items()}
        # who confirms while the backbone is away, or a round other groups landed without it
        present = {r.peer for r in self.part.records if r.role != LEFT}
        self.board.landed_with(epoch, counted, present)
        if self.checker is not None:
            self.checker.landed(epoch, [peer for peer, weight in weights.items() if weight > 0])
        self.epoch = epoch + 1
        await self._publish()
        if self.state.epoch == epoch and _whole(result):
            # every value averaged: what each trainer applies now; step exactly as they do
            await self.bridge.run(self._follow_step, grads, epoch + 1)
            self.steps_followed += 1
            await self._replica_changed()
        every = self.config.average_state_every
        if every and self.epoch % every == 0 and trainers >= 2:
            # the trainers' state: parameters and optimizer statistics, averaged exactly
            state = await self.bridge.run(self.local.state_copies)
            key = round_key("state", self.epoch, self.state.rollback)
            result = await self._join(key, state, expected, NONE)
            if result is not None and result.complete and len(result.members) == expected:
                self.state_rounds_joined += 1
                await self.bridge.run(self._take_state, state, self.epoch)
                await self._replica_changed()

    # The replica's weights and its epoch change in one job on the training thread: a checkpoint
    # saved there (``_checkpoint``) runs between jobs, so it never pairs one epoch's number with
    # the next epoch's weights.

    def _follow_step(self, grads: list[torch.Tensor], epoch: int) -> None:
        self.local.apply(grads)
        self.state.epoch = epoch
        self.state.set_learning_rate()

    def _take_state(self, state: list[torch.Tensor], epoch: int) -> None:
        self.local.write_state(state)
        if self.state.epoch != epoch:
            self.state.epoch = epoch
            self.state.set_learning_rate()

    async def _keep_replica_current(self, newest: int | None) -> None:
        """Download the trainers' state when the replica fell behind them (a missed round)."""
        task = self._downloading
        if task is not None:
            if not task.done():
                return
            self._downloading = None
            try:
                downloaded = task.result()
            except (StateDownloadError, TimeoutError) as exc:
                self._resync_after = time.monotonic() + self._resync.failed(str(exc) or "timeout")
                return
            # a state from before a rollback we applied (begun before it) is never loaded
            if downloaded.version > self.state.epoch and self._accepts(downloaded.metadata):
                try:
                    await self.bridge.run(self.state.load, downloaded.version, downloaded.tensors)
                except ValueError as exc:
                    self._resync_after = time.monotonic() + self._resync.failed(str(exc))
                    return
                self.state.rollback = applied_of(downloaded.metadata)
                self.downloads += 1
                self._resync.succeeded()
                log.info("the backbone loaded epoch %d from the trainers", downloaded.version)
                await self._replica_changed()
            return
        if newest is None or newest <= self.state.epoch or time.monotonic() < self._resync_after:
            return
        self._downloading = self._tasks.spawn(
            f"download-{newest}",
            self.part.download(self.state.epoch, self.config.state_timeout, accept=self._accepts),
        )

    def _accepts(self, metadata: dict[str, Any]) -> bool:
        """Never a state from before a rollback our replica went through."""
        return applied_of(metadata) >= self.state.rollback

    async def _follow_rollback(self) -> bool:
        """Apply a new rollback order of the moderators (``rollback_replica``: from a peer that
        already did, else from our checkpoint of its epoch); True when the replica changed.
        While it cannot be applied, it is tried again after a growing wait."""
        rollback = self.rollback
        order = rollback.pending() if rollback is not None else None
        if rollback is None or order is None or time.monotonic() < self._rollback_after:
            return False
        done = await rollback.apply(order, max(self.epoch, self.state.epoch))
        if isinstance(done, str):
            if not rollback.give_up_if_late(order, done):
                self._rollback_after = time.monotonic() + self._resync.failed(done)
            return False
        self._resync.succeeded()
        self.epoch = max(self.epoch, self.state.epoch)  # newcomers and trainers follow it
        await self._replica_changed()
        await self._publish()
        return True

    def _short(self, result: AveragingResult) -> bool:
        """The round held fewer samples than the target: the trainers take no step from it, by the
        rule they all apply alike (``AveragingResult.held_weight``)."""
        return (
            result.held_weight < self.config.target_batch_size
            and not self.config.delay_parameter_updates
            and self._short_rounds < MAX_SHORT_ROUNDS
        )

    async def _replica_changed(self) -> None:
        self.part.snapshot = await self.bridge.run(self.state.snapshot)
        await self.part.announce(self.state.epoch)

    async def _join(
        self, round_key: str, zeros: list[torch.Tensor], expected: int, codec: Codec | None, *,
        enough: float | None = None,
    ) -> AveragingResult | None:  # fmt: skip
        """Reduce a share of the trainers' round ``round_key``, contributing nothing (weight 0);
        ``enough``: the trainers' target batch, in a gradient round (``PeerLinks.round``)."""
        result = await self.links.round(
            zeros,
            weight=0.0,
            round_key=round_key,
            timeout=self.config.matchmaking_time,
            expected=expected,
            enough=enough,
            codec=codec,
        )
        if result is None:
            return None
        log.debug("backbone round %s: %s", round_key, result.summary())
        if result.findings:
            self._tasks.spawn(f"evidence-{round_key}", self.evidence.publish(result, round_key))
        return result

    def _record(self) -> PeerProgress:
        return PeerProgress(self._me, self.epoch, 0, 0.0, time.time(), BACKBONE)

    async def _publish(self) -> None:
        self._published_at = time.monotonic()
        await self.board.publish(self._record())

    def saving(self) -> Saving:
        """On the training thread: the replica as a checkpoint holds it."""
        state = self.state
        return Saving(
            state.epoch, state.model.state_dict(), state.optimizer.state_dict(), state.rollback
        )


def _whole(result: AveragingResult) -> bool:
    """Every value was averaged (over whoever sent it): the trainers all got these values."""
    return not result.missing and result.averaged_elements == result.total_elements
