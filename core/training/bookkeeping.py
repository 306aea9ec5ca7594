"""Bookkeeping: what every mode's backbone does besides its rounds.

The trainers of every mode take part through one ``Participation``; the backbones keep their books
through this. From the progress records the backbone reads, it makes each epoch's metrics and each
volunteer's credit (``credit.metrics``, whose book credits each landed epoch once, with what the
work checks support), reports them (``on_metrics``: logged, told, sent to the coordinator) with the
credit found late and the credit withdrawn, and counts the samples behind its checkpoints
(``credit.samples``). It collects the members' signed evidence at each new epoch and every
``evidence_interval`` seconds, names each accused peer in its log and passes the evidence on. It
writes the replica as a checkpoint with the same metadata in every mode (its epoch, the samples
behind it, the last rollback order), in the background and one at a time, so that metrics and
rounds never wait for the disk, and publishes it from a thread.

What differs between modes, which rounds the backbone joins and how its replica moves, stays with
the mode's backbone, which reads the records and hands them here (``observe``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.training.checkpoints import Checkpoint, CheckpointStore
from core.training.credit.book import Support
from core.training.credit.metrics import EpochMetrics, MetricsAggregator
from core.training.credit.samples import SAMPLES_TOTAL, SamplesTally
from core.training.errors import CheckpointError
from core.training.moderation.evidence import EvidenceBoard, EvidenceCollector, Reported, pass_on
from core.training.moderation.rollback import METADATA_KEY
from core.training.progress import PeerProgress
from core.trust.evidence import Evidence
from core.util.errors import BarnraiseError
from core.util.tasks import BackgroundTasks
from core.worker.bridge import TrainingBridge

log = logging.getLogger(__name__)

METRICS_KEPT = 1000
"""Completed epochs' metrics kept in memory (the metrics log on disk has them all)."""
ACCUSATIONS_KEPT = 1000
"""Accusations kept in memory (the coordinator keeps them all)."""
USERS_KEPT = 10_000
"""PeerID-to-username pairs remembered from progress records, to name accused peers."""
EVIDENCE_INTERVAL = 30.0
"""Seconds between collections of the members' evidence while the epoch does not change."""
FINAL_COLLECTION = 5.0
"""Seconds a stopping backbone spends on a last collection of evidence."""

Publisher = Callable[[Path, int, float | None], object]
"""Called with a checkpoint's path, epoch and loss once it is written (on a worker thread)."""


@dataclass(frozen=True)
class Saving:
    """What a mode saves of its replica: read on the training thread in one job, so that an
    epoch's number is never paired with the next epoch's weights."""

    epoch: int
    model: dict[str, Any]
    optimizer: dict[str, Any]
    rollback: int
    """The replica's last rollback order."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """What the mode adds to the checkpoint's metadata."""


class Bookkeeping:
    def __init__(
        self,
        *,
        evidence: EvidenceBoard,
        bridge: TrainingBridge,
        tasks: BackgroundTasks,
        checkpoints: CheckpointStore | None = None,
        checkpoint_every: int = 0,
        on_metrics: Callable[[EpochMetrics], None] | None = None,
        publish: Publisher | None = None,
        on_evidence: Callable[[list[Evidence]], None] | None = None,
        evidence_interval: float = EVIDENCE_INTERVAL,
        support: Support | None = None,
    ) -> None:
        """``tasks``: the backbone's, where checkpoints and collections run; ``support``: what
        the mode's work checks support of each claim (None: every claim as made)."""
        self.bridge = bridge
        self.checkpoints = checkpoints
        self.checkpoint_every = checkpoint_every
        self.on_metrics = on_metrics
        self.publish = publish
        self.on_evidence = on_evidence
        self.evidence_interval = evidence_interval
        self.aggregator = MetricsAggregator(support=support)
        """The records' epochs, and who is credited what for them (``credit.metrics``)."""
        self.samples = SamplesTally()
        """The samples behind the replica's epochs, for its checkpoints."""
        self.metrics: deque[EpochMetrics] = deque(maxlen=METRICS_KEPT)
        """The newest epochs reported (not late credit, not withdrawals)."""
        self.accusations: deque[Reported] = deque(maxlen=ACCUSATIONS_KEPT)
        """The newest accusations collected (each once), for diagnostics and tests."""
        self.saved = -1
        """The epoch of the newest checkpoint written (or resumed from)."""
        self._tasks = tasks
        self._collector = EvidenceCollector(evidence)
        self._collecting: asyncio.Task[None] | None = None
        self._collected: tuple[int, float] = (-1, 0.0)
        """(epoch, monotonic time) of the last collection of evidence."""
        self._checkpointing: asyncio.Task[None] | None = None
        self._users: dict[str, str] = {}

    # ---- metrics and credit ----------------------------------------------------------------------

    async def resume(
        self, restore: Callable[[Checkpoint], None], replica: Callable[[], tuple[int, int]]
    ) -> Checkpoint | None:
        """Put the replica on the newest checkpoint that loads (``restore``, on the training
        thread, raises ``CheckpointError``, ``ValueError``, ``RuntimeError`` or ``KeyError`` for
        one that does not fit; none loads: the replica stays as it is), and count on from it;
        returns it. ``replica``: the replica's epoch and last rollback order, once restored."""
        found = None
        for path in reversed(self.checkpoints.list() if self.checkpoints is not None else []):
            try:
                checkpoint = await self.bridge.run(CheckpointStore.load, path)
                await self.bridge.run(restore, checkpoint)
            except (CheckpointError, ValueError, RuntimeError, KeyError) as exc:
                log.warning("checkpoint %s cannot be used: %s", path, exc)
                continue
            log.info("the backbone resumes from %s (epoch %d)", path.name, checkpoint.epoch)
            found = checkpoint
            break
        epoch, rollback = replica()
        self.saved = epoch
        if found is not None:
            self.samples.resume(found.metadata, found.epoch, rollback)
        return found

    def witness(self, epoch: int, weights: Mapping[str, float], now: float) -> None:
        """A round of ``epoch`` averaged these senders' weights: evidence of work for a sender
        that is gone before its record says what landed (``CreditBook.witness``)."""
        self.aggregator.witness(epoch, weights, now)

    def observe(self, records: list[PeerProgress], now: float) -> list[EpochMetrics]:
        """Everyone's fresh records (the departed's too): the epochs they complete and the credit
        found for epochs already reported, each reported; returns the completed epochs."""
        self._remember(records)
        done = self.aggregator.observe(records, now)
        for metrics in done:
            self.report(metrics)
        for metrics in self.aggregator.late_credit(now):
            self.report(metrics)
        return done

    def withdraw(self, peer: str, after: int, now: float) -> None:
        """Take back and report ``peer``'s credit for the epochs after ``after`` (it was caught
        faking work)."""
        for metrics in self.aggregator.withdraw(peer, after, now):
            self.report(metrics)

    def report(self, metrics: EpochMetrics) -> None:
        self.samples.add(metrics)
        if self.on_metrics is not None:
            self.on_metrics(metrics)
        if not (metrics.late or metrics.withdrawn):
            self.metrics.append(metrics)

    def user_of(self, peer: str) -> str | None:
        """The username ``peer``'s records carry (moderated projects), if any was read."""
        return self._users.get(peer)

    def _remember(self, records: Iterable[PeerProgress]) -> None:
        if len(self._users) > USERS_KEPT:
            self._users.clear()
        self._users.update((r.peer, r.username) for r in records if r.username)

    # ---- evidence --------------------------------------------------------------------------------

    def collect_soon(self, epoch: int) -> None:
        """Collect the members' evidence in the background at a new ``epoch``, or when the last
        collection is ``evidence_interval`` old."""
        if self._collecting is not None and not self._collecting.done():
            return
        last, at = self._collected
        now = time.monotonic()
        if epoch == last and now - at < self.evidence_interval:
            return
        self._collected = (epoch, now)
        self._collecting = self._tasks.spawn(f"evidence-{epoch}", self.collect())

    async def collect(self) -> None:
        """Read the accusations published since the last collection; log them and pass them on."""
        self.accusations.extend(await pass_on(self._collector, self._users, self.on_evidence))

    # ---- checkpoints -----------------------------------------------------------------------------

    def due(self, epoch: int) -> bool:
        """Whether the replica at ``epoch`` is one to checkpoint."""
        every = self.checkpoint_every
        return (
            self.checkpoints is not None and every > 0 and epoch > self.saved and epoch % every == 0
        )

    def checkpoint_soon(self, metrics: EpochMetrics, read: Callable[[], Saving]) -> None:
        """Write the replica (``read`` on the training thread) as a checkpoint in the background,
        with ``metrics``' loss and samples, and publish it if asked; skipped while the last one is
        still being written."""
        if self._checkpointing is not None and not self._checkpointing.done():
            log.warning("the checkpoint after epoch %d is skipped: the last one is still being "
                        "written", metrics.epoch)  # fmt: skip
            return
        self._checkpointing = self._tasks.spawn(
            f"checkpoint-{metrics.epoch + 1}", self.checkpoint(metrics, read)
        )

    async def checkpoint(self, metrics: EpochMetrics, read: Callable[[], Saving]) -> None:
        """Write the replica as a checkpoint now (``checkpoint_soon``, awaited)."""
        store = self.checkpoints
        assert store is not None
        loss = float("nan") if metrics.loss is None else metrics.loss  # the store refuses NaN

        def save() -> tuple[int, Path | None]:
            saving = read()
            if saving.epoch <= self.saved:
                return saving.epoch, None  # the replica did not move since the last one
            metadata = {
                "epoch": saving.epoch,
                "samples": metrics.samples,
                SAMPLES_TOTAL: self.samples.before(saving.epoch, saving.rollback),
                METADATA_KEY: saving.rollback,
                **saving.metadata,
            }
            path = store.save(saving.epoch, saving.model, saving.optimizer, metadata, loss)
            return saving.epoch, path

        try:
            epoch, path = await self.bridge.run(save)
        except (CheckpointError, OSError) as exc:
            log.warning("the checkpoint after epoch %d was not written: %s", metrics.epoch, exc)
            return
        if path is None:
            return
        self.saved = epoch
        if self.publish is not None:
            try:
                await asyncio.to_thread(self.publish, path, epoch, metrics.loss)
            except (BarnraiseError, OSError) as exc:
                log.warning("publishing the checkpoint of epoch %d failed: %s", epoch, exc)

    # ---- stopping --------------------------------------------------------------------------------

    async def close(self) -> None:
        """Let the checkpoint being written finish, and collect the last epochs' accusations,
        which no later epoch would collect."""
        if self._checkpointing is not None:
            await asyncio.gather(self._checkpointing, return_exceptions=True)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FINAL_COLLECTION):
                await self.collect()
