"""DedlocOptimizer: many peers train as if they were one large-batch run (DeDLOC).

Each trainer calls ``await opt.step(batch_size, loss)`` after every backward pass. The optimizer adds
the gradients (times the batch size) to its accumulators and tells the collaboration how far it is. When
the samples reported by all peers at the current epoch reach the target batch size, every ready peer
averages its mean gradient weighted by its samples, and every peer applies the same optimizer step:
the average of per-peer means weighted by samples is the mean gradient over all samples of the epoch.
Every ``average_state_every`` epochs the parameters and optimizer statistics are averaged too (without
a lossy codec), which pulls back together peers that missed a round. A peer that finds the
collaboration at a newer epoch downloads the state from up-to-date peers or the backbone (whichever is
newest and answers; never an older state than its own) and drops its unshared samples; until it has
it, it computes nothing and retries with backoff, and ``waiting_for`` says why. With
``delay_parameter_updates`` the averaging and the step run while the next batch is
computed (gradients one step stale, as in DeDLOC's delayed updates). A rollback order of the
moderators is waited for like the state: nothing is contributed until it is applied
(``rollback_replica``), and no state from before it is ever loaded again.

Torch work runs on the training thread through the bridge; everything else runs on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from core.averaging import AveragingResult
from core.averaging.sharing.state import StateDownloadError
from core.codecs import NONE, Codec
from core.config.roles import BACKBONE, COMPUTING, TRAINER
from core.training.checkpoints import CheckpointStore
from core.training.credit.checks import Entry, Forgery, WorkLedger
from core.training.dedloc.feedback import ErrorFeedback
from core.training.dedloc.readiness import Own, estimate
from core.training.errors import CheckpointError
from core.training.links import PeerLinks
from core.training.local import LocalWork
from core.training.moderation.rollback import applied_of, round_key
from core.training.participation import Participation, TakingPart
from core.training.progress import KEEPALIVE, CollaborationView, PeerProgress
from core.training.rollback_replica import ReplicaRollback
from core.training.state import TrainingState
from core.trust.rollback import RollbackOrder
from core.util.errors import BarnraiseError
from core.util.tasks import BackgroundTasks
from core.worker.events import PeerEpoch

log = logging.getLogger(__name__)

MAX_SHORT_ROUNDS = 3
"""Rounds in a row that may hold fewer samples than the target before the step is taken anyway."""
REPORTS_KEPT = 1000
"""Reports of our own epochs kept in memory (a peer runs for weeks: older ones are in the ledger)."""


@dataclass(frozen=True)
class DedlocConfig:
    target_batch_size: int
    """Samples per collaborative step (one epoch)."""
    role: str = TRAINER
    """trainer, or client (no incoming connections); the backbone is ``DedlocBackbone``."""
    average_state_every: int = 5
    delay_parameter_updates: bool = False
    clip_norm: float | None = None
    matchmaking_time: float = 5.0
    """How long a ready peer waits for the others to join its averaging round."""
    averaging_timeout: float = 60.0
    refresh_interval: float = 0.25
    """How often the others' progress is read while the target is still far."""
    near_fraction: float = 0.75
    """From this share of the target on, progress is published and read at every step."""
    state_timeout: float = 120.0
    retry_cap: float = 15.0
    """The longest wait between attempts to load the state (backoff doubles up to it)."""
    keep_receipts: bool = False
    """Keep a work receipt of every microbatch and serve them to the backbone's checks (the
    manifest's ``work_checks`` above 0)."""

    def __post_init__(self) -> None:
        if self.target_batch_size < 1:
            raise ValueError("target_batch_size must be at least 1")
        if self.role not in COMPUTING:
            raise ValueError("role must be trainer or client")
        if self.average_state_every < 0:
            raise ValueError("average_state_every must be 0 (never) or more")


class DedlocOptimizer(TakingPart):
    def __init__(
        self,
        state: TrainingState,
        links: PeerLinks,
        config: DedlocConfig,
    ) -> None:
        self.state = state
        self.averager = averager = links.averager
        self.links = links
        self.board = links.board
        self.bridge = links.bridge
        self.config = config
        self.reports: deque[PeerEpoch] = deque(maxlen=REPORTS_KEPT)
        self.states_averaged: deque[int] = deque(maxlen=REPORTS_KEPT)
        """Epochs at which the state was averaged with a group (completely or not)."""
        self._tasks = BackgroundTasks(f"collaborative/{averager.host.peer_id.short()}")
        self.part = Participation(
            links,
            config.role,
            snapshot=state.snapshot(),
            retry_cap=config.retry_cap,
            tasks=self._tasks,
        )
        """Our records, our pause, our waits and our state offer (shared with diloco)."""
        self.fallback: Callable[[int], Awaitable[Path | None]] | None = None
        """A checkpoint the organizers published, newer than the given epoch (verified), or None:
        tried when no peer can give the state."""
        self.rollback: ReplicaRollback | None = None
        """Applies the moderators' rollback orders (``core.training.rollback_replica``): checked
        at every microbatch; none in an open project."""
        self.tamper: Callable[[list[torch.Tensor]], None] | None = None
        """Changes our mean gradient in place before it is averaged: only a Byzantine peer on
        purpose has one (``core.swarm.byzantine``: the demo, the tests, the benchmark)."""
        self.claim = 1.0
        """Samples claimed per sample computed: above 1 only in a peer misbehaving on purpose."""
        self.work: WorkLedger | None = None
        """Our work receipts, once the training loop keeps them (``keep_receipts``)."""
        self.forge: Forgery | None = None
        """Wraps how receipts are recorded: only a peer misbehaving on purpose has one (a free
        rider, ``core.swarm.byzantine``)."""
        self._params_epoch = state.epoch
        """The epoch of the parameters the model holds (behind ``epoch`` while a delayed update
        is in flight); set on the training thread, where the receipts read it."""
        self.feedback = ErrorFeedback() if averager.config.codec.sparse else None
        """With a sparse codec: what it left out of our gradients, sent with the next round."""
        self._peer = self.part.peer
        self.local = LocalWork(state, config.clip_norm)
        self.evidence = self.part.evidence
        """Publishes what our rounds found against others, signed (the backbone reports it)."""
        self._tally = self.part.tally
        self._short_rounds = 0
        self._committed = 0
        """Samples handed to the gradient round under way. Our record still counts them for the
        epoch: peers that have not joined the round yet would otherwise see the collaboration fall
        short of the target, compute on, and bring a larger batch than the step needs."""
        self._epoch_started = time.time()
        self._absent: dict[str, float] = {}
        """Peers whose records promised samples that a short round of this epoch never got (killed
        since): their record's time then. Readiness leaves such a record out until it is renewed, or
        every round until it expires would be short again."""
        self._fetched_at = 0.0
        self._refreshing: asyncio.Task[None] | None = None
        self._samples_at_fetch = 0
        self._publish_wanted = asyncio.Event()
        self._pending_update: asyncio.Task[bool] | None = None
        self._stopping = False
        self._wake = asyncio.Event()
        """Ends a wait between attempts early (a pause or a stop)."""

    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def offloadable(self) -> LocalWork:
        """What a pause moves off the device with the model: our accumulators."""
        return self.local

    def keep_receipts(self, precision: str) -> Callable[[Any, float], None] | None:
        """Start keeping work receipts of what is computed in ``precision`` and serving them;
        what the training loop calls after each backward pass (None: this project checks no
        work)."""
        if not self.config.keep_receipts:
            return None
        self.work = ledger = WorkLedger(
            self.state.parameters, precision, lambda: self._params_epoch
        )
        ledger.serve(self.averager.host)
        return ledger.record if self.forge is None else self.forge(ledger)

    def fresh(self, batch: Any) -> bool:
        """False for a batch already among our open receipts at these parameters
        (``WorkLedger.fresh``); True while none are kept."""
        return self.work is None or self.work.fresh(batch)

    def tryout_weights(self) -> None:
        """The model's own: every collaborative step lands in it, so it holds ``epoch``'s."""
        return None

    # ---- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Share our state, start reporting, and catch up if the collaboration is ahead."""
        await self.bridge.run(self.local.zeros)
        await self.part.offer(lambda: self.epoch)
        await self._publish()
        await self._refresh()
        self._tasks.spawn("publish", self._publish_loop())
        self._tasks.spawn("refresh", self._refresh_loop())
        if self.view().epoch > self.epoch:
            await self.wait_for_state()
        elif self.fallback is not None and len(self.view().peers) == 1:
            # nobody else around: the organizers' checkpoint, if newer, beats the initial weights
            await self._from_published()

    async def pause(self) -> None:
        """Step aside: tell the others we are paused (they stop counting on us) and stop polling.

        Our accumulated samples stay; they count again if we resume within the same epoch."""
        if not self.part.step_aside():
            return
        self._wake.set()
        await self._publish()

    async def resume(self) -> None:
        """Rejoin: report again, and load the newest state if the collaboration moved on."""
        if not self.part.come_back():
            return
        self._tally.last_step_at = None  # the pause is not slowness
        await asyncio.gather(self._publish(), self._refresh())
        if self.view().epoch > self.epoch:
            await self.wait_for_state()

    def interrupt(self) -> None:
        """Give up waiting for the state (the peer is stopping): ``step`` returns at once."""
        self._stopping = True
        self._wake.set()

    async def close(self) -> None:
        """Stop, and tell the others at once: our record and our state announcement withdrawn."""
        if self._pending_update is not None:
            await asyncio.gather(self._pending_update, return_exceptions=True)
        await self._tasks.close()
        if self.work is not None:
            await self.work.linger.settle()  # a check of the last epoch may be on its way
            self.work.leave()  # the host answers until it closes: a check then is not refused
        await self.part.leave(self._progress())

    # ---- the training loop's side ----------------------------------------------------------------

    async def step(self, batch_size: int, loss: float | None = None) -> PeerEpoch | None:
        """Account for one microbatch whose gradients are in ``.grad``; steps when the collaboration
        is ready. Returns the report of a finished epoch, or None."""
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        await self.bridge.run(self.local.accumulate, batch_size)
        self._tally.count(batch_size, loss)
        if self._estimate() >= self.config.near_fraction * self.config.target_batch_size:
            # close to the target: tell and ask at every microbatch (both at once)
            await asyncio.gather(self._publish(), self._refresh())
        else:
            self._publish_wanted.set()
            if (
                time.monotonic() - self._fetched_at > self.config.refresh_interval
                or self._tally.samples - self._samples_at_fetch
                >= self.config.target_batch_size / 16
            ):
                # a fast loop outruns the periodic refresh: read now, in the background while the
                # next microbatch computes; if the last read is still running, wait for it, so that
                # microbatches faster than a read cannot run ahead of what we know
                await self._refresh_soon()
        view = self.view()
        if self._behind():
            await self.wait_for_state()
            return None
        if not view.ready:
            return None
        return await self._finish_epoch(view)

    def view(self) -> CollaborationView:
        return self.board.view(self._present(), self._progress(), self.config.target_batch_size)

    async def wait_for_state(self) -> None:
        """Catch up with the collaboration before contributing again: retry with backoff until the
        state is loaded, the collaboration is no longer ahead (the records that said so expired),
        or we are paused. Meanwhile ``waiting_for`` says why, and nothing is computed."""
        while not self.paused and not self._stopping:
            reason = await self.catch_up()
            if reason is None or not self._behind():
                break
            self.part.set_waiting(reason)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.part.failed(reason))
            await self._refresh()
            if not self._behind():
                break
        self.part.set_waiting(None)

    async def catch_up(self) -> str | None:
        """Load the newest state newer than ours from peers (our unshared samples are dropped),
        or first the state a pending rollback order asks for; returns why not, or None once
        loaded."""
        if self._pending_update is not None:
            await self._pending_update
        if self.rollback is not None and (order := self.rollback.pending()) is not None:
            return await self._roll_back(order)
        try:
            downloaded = await self.part.download(
                self.epoch, self.config.state_timeout, accept=self._accepts
            )
        except (StateDownloadError, TimeoutError) as exc:
            if await self._from_published():
                return None
            why = str(exc) or "timed out"
            return f"no peer could give the state of epoch {self.view().epoch}: {why}"
        if downloaded.version <= self.epoch or not self._accepts(downloaded.metadata):
            return None
        try:
            await self.bridge.run(self._load, downloaded.version, downloaded.tensors)
        except ValueError as exc:  # a donor with another model: not ours to train
            return f"the state peers give does not fit this model: {exc}"
        self.state.rollback = applied_of(downloaded.metadata)
        log.info("loaded epoch %d from %d peer(s)", downloaded.version, len(downloaded.donors))
        self._reset_epoch()
        await self._after_epoch_change()
        return None

    async def _from_published(self) -> bool:
        """Load the organizers' published checkpoint if it is newer than our state."""
        if self.fallback is None:
            return False
        try:
            path = await self.fallback(self.epoch)
            if path is None:
                return False
            await self.bridge.run(self._restore, path)
        except (BarnraiseError, ValueError, RuntimeError, KeyError) as exc:
            log.warning("the published checkpoint cannot be used: %s", exc)
            return False
        log.info("loaded epoch %d from the published checkpoint %s", self.epoch, path.name)
        self._reset_epoch()
        await self._after_epoch_change()
        return True

    def _restore(self, path: Path) -> None:
        """On the training thread: the checkpoint's state, our accumulated gradients dropped;
        never one from before a rollback this state went through."""
        checkpoint = CheckpointStore.load(path)
        if not self._accepts(checkpoint.metadata):
            raise CheckpointError(f"{path.name} is from before rollback #{self.state.rollback}")
        self.state.restore(checkpoint)
        self.local.zeros()
        self._params_epoch = self.state.epoch

    def _load(self, version: int, tensors: list[Any]) -> None:
        """On the training thread: a downloaded state, our samples dropped."""
        self.local.load(version, tensors)
        self._params_epoch = version

    def _apply(self, grads: list[torch.Tensor], epoch: int) -> None:
        """On the training thread: the step that makes the parameters ``epoch``'s."""
        self.local.apply(grads)
        self._params_epoch = epoch

    def _accepts(self, metadata: dict[str, Any]) -> bool:
        """A state of peers or organizers may replace ours unless it predates a rollback ours
        went through (a straggler that has not rolled back yet must not undo it)."""
        return applied_of(metadata) >= self.state.rollback

    async def _roll_back(self, order: RollbackOrder) -> str | None:
        """Apply a rollback order of the moderators (``core.training.rollback_replica``); why
        not yet, or None once applied (or given up: we train on)."""
        assert self.rollback is not None
        done = await self.rollback.apply(order, max(self.view().epoch, self.epoch))
        if isinstance(done, str):
            return None if self.rollback.give_up_if_late(order, done) else done
        self._params_epoch = self.epoch
        self._reset_epoch()
        await self._after_epoch_change()
        return None

    def _behind(self) -> bool:
        """The collaboration is ahead of us, or the moderators ordered a rollback: either way,
        no gradient of our state may reach the others until we have the state they train."""
        rollback = self.rollback
        ordered = rollback is not None and rollback.pending() is not None
        return ordered or self.view().epoch > self.epoch

    # ---- accounting ------------------------------------------------------------------------------

    def _progress(self) -> PeerProgress:
        return self.part.record(self.epoch, self._tally.samples + self._committed)

    def _estimate(self) -> float:
        """Samples towards our epoch (``core.training.dedloc.readiness``)."""
        own = Own(
            self._peer, self.epoch, self._tally.samples, self._tally.speed, self._epoch_started
        )
        return estimate(self._present(), own, time.time())

    def _present(self) -> list[PeerProgress]:
        """The records, less those a short round of this epoch proved empty (not renewed since)."""
        return [r for r in self.part.records if r.time > self._absent.get(r.peer, -math.inf)]

    def _reset_epoch(self) -> None:
        """A new epoch's counting starts (what was counted is sent, or dropped with its receipts)."""
        if self.work is not None:
            self.work.drop()
        self._tally.take()
        self._tally.last_step_at = None
        self._epoch_started = time.time()
        self._samples_at_fetch = 0

    # ---- publishing and reading progress ---------------------------------------------------------

    async def _publish(self) -> None:
        self._publish_wanted.clear()
        await self.part.publish(self._progress())

    async def _refresh(self) -> None:
        records = await self.part.read()
        if records is not None:
            self.part.records = records
        self._fetched_at = time.monotonic()
        self._samples_at_fetch = self._tally.samples

    async def _refresh_soon(self) -> None:
        if self._refreshing is not None and not self._refreshing.done():
            await asyncio.shield(self._refreshing)
            return
        self._refreshing = self._tasks.spawn("refresh-now", self._refresh())

    async def _publish_loop(self) -> None:
        while True:
            await self.part.wait_active()  # paused: our record may expire, nobody waits for it
            try:
                async with asyncio.timeout(KEEPALIVE):  # keep the record alive while idle
                    await self._publish_wanted.wait()
            except TimeoutError:
                pass
            await self._publish()
            await asyncio.sleep(self.config.refresh_interval)

    async def _refresh_loop(self) -> None:
        while True:
            await self.part.wait_active()  # paused: no polling, so the engine stays quiet
            await asyncio.sleep(self.config.refresh_interval)
            if time.monotonic() - self._fetched_at >= self.config.refresh_interval:
                await self._refresh()

    # ---- one collaborative step ------------------------------------------------------------------

    async def _finish_epoch(self, view: CollaborationView) -> PeerEpoch | None:
        started = time.monotonic()
        epoch, samples = self.epoch, self._tally.samples
        if self._pending_update is not None:
            await self._pending_update  # at most one delayed update in flight
        grads = await self.bridge.run(self.local.mean_gradients, samples)
        if self.feedback is not None:
            await self.bridge.run(self.feedback.add_to, grads)
        if self.tamper is not None:
            await self.bridge.run(self.tamper, grads)
        expected = len(view.trainers_at_epoch) + sum(
            1 for p in view.peers if p.role == BACKBONE and p.epoch == epoch
        )
        totals, previous = (self._tally.loss_sum, self._tally.mini_steps), self.part.last
        self.part.last = (epoch, *totals, samples)
        receipts = self.work.cut() if self.work is not None else []
        self._reset_epoch()
        update = self._average_and_apply(
            grads, samples, epoch, max(1, expected), started, receipts=receipts
        )
        if self.config.delay_parameter_updates:
            # the next batch is computed while this one is averaged; its gradients go to fresh
            # accumulators and the step lands before the next epoch's own averaging
            self.state.epoch = epoch + 1
            task = self._tasks.spawn(f"update-{epoch}", update, awaited=True)
            self._pending_update = task
            await self._publish()
            return PeerEpoch(epoch, samples, 0, True, "update in the background", 0.0)
        self._pending_update = None
        if not await update:
            # the round held fewer samples than the target: the epoch goes on, with the average
            # so far kept in our accumulators (it weighs as the samples we brought to it)
            t = self._tally
            t.samples, t.loss_sum, t.mini_steps = samples, *totals
            self.part.last = previous
            if self.work is not None:
                self.work.restore(receipts)
            return None
        return self.reports[-1]

    async def _average_and_apply(
        self,
        grads: list[torch.Tensor],
        samples: int,
        epoch: int,
        expected: int,
        started: float,
        *,
        receipts: list[Entry],
    ) -> bool:
        """Average and step; False (no step) when the round held fewer samples than the target.

        The readiness counts every fresh record's samples, but a peer killed since its last report
        brings none to the round: stepping then would make an epoch smaller than the target
        batch. What the round held is ``AveragingResult.held_weight``: every member sees the same
        chunks' weights, so they all decide alike, and an honest member's chunk screened out does
        not make the round short.
        After ``MAX_SHORT_ROUNDS`` such rounds in a row the step is taken anyway (a peer that
        reports samples it never brings must not stall everyone)."""
        key = round_key("grads", epoch, self.state.rollback)
        feedback = None if self.feedback is None else self.feedback.buffers(grads)
        target = self.config.target_batch_size
        if not self.config.delay_parameter_updates:  # else our record is already the next epoch's
            self._committed = samples
        try:
            result = await self._average(
                grads, samples * self.claim, key, expected, feedback=feedback, enough=float(target)
            )
        finally:
            self._committed = 0
        if self.feedback is not None:
            self.feedback.settle(sent=result is not None)
        if result is not None and not result.complete:
            log.warning("epoch %d: %s", epoch, result.summary())
        weight = result.held_weight if result is not None else float(samples)
        if (
            weight < target
            and not self.config.delay_parameter_updates
            and self._short_rounds < MAX_SHORT_ROUNDS
        ):
            self._short_rounds += 1
            log.info("epoch %d: the round held %d of %d samples; the epoch goes on", epoch,
                     weight, target)  # fmt: skip
            # no group at all: nobody the records promised came
            members = {str(m) for m in result.members} if result is not None else set()
            self._absent = {
                r.peer: r.time
                for r in self.part.records
                if r.training and r.epoch == epoch and r.peer not in members | {self._peer}
            }
            await self.bridge.run(self.local.keep, grads, samples)
            return False
        self._short_rounds = 0
        self._absent = {}
        await self.bridge.run(self._apply, grads, epoch + 1)
        self.state.epoch = epoch + 1
        if self.work is not None:  # filed before the record claims the epoch
            self.work.seal(epoch, receipts)
        self.landed.add(epoch, round(samples * self.claim))
        await self.bridge.run(self.state.set_learning_rate)
        group = len(result.members) if result is not None else 1
        summary = result.summary() if result is not None else "no group: local gradients only"
        averaged = result is not None and result.complete
        seconds = time.monotonic() - started
        report = PeerEpoch(epoch, samples, group, averaged, summary, seconds, weight)
        self.reports.append(report)
        every = self.config.average_state_every
        if every and (epoch + 1) % every == 0:
            await self._average_state(epoch + 1)
        await self._after_epoch_change()
        return True

    async def _average(
        self, tensors: list[torch.Tensor], weight: float, round_key: str, expected: int, *,
        codec: Codec | None = None, feedback: list[torch.Tensor] | None = None,
        enough: float | None = None,
    ) -> AveragingResult | None:  # fmt: skip
        result = await self.links.round(
            tensors,
            weight=weight,
            round_key=round_key,
            timeout=self.config.matchmaking_time,
            expected=expected,
            enough=enough,
            codec=codec,
            feedback=feedback,
        )
        if result is not None and result.findings:  # in the background: the step need not wait
            self._tasks.spawn(f"evidence-{round_key}", self.evidence.publish(result, round_key))
        return result

    async def _average_state(self, epoch: int) -> None:
        trainers = len([p for p in self.view().peers if p.training])
        if trainers < 2:
            return  # nobody to average with: waiting for a group would only cost the timeout
        # backbones join state rounds with weight 0 (they reduce for trainers in client mode)
        expected = trainers + sum(1 for p in self.view().peers if p.role == BACKBONE)
        tensors = await self.bridge.run(self.local.state_copies)
        key = round_key("state", epoch, self.state.rollback)
        result = await self._average(tensors, 1.0, key, expected, codec=NONE)
        if result is None:
            return
        if not result.complete:
            log.warning("state averaging at epoch %d: %s", epoch, result.summary())
        await self.bridge.run(self.local.write_state, tensors)
        self.states_averaged.append(epoch)

    async def _after_epoch_change(self) -> None:
        self.part.snapshot = await self.bridge.run(self.state.snapshot)
        await self._publish()
        await self.part.announce(self.epoch)
