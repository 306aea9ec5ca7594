"""AuxiliaryPeer: a peer without gradients that helps the collaboration (DeDLOC's auxiliary peers).

It follows the progress records; when the trainers reach the target batch it joins their gradient
round with weight 0, so that its (usually fast, dialable) link reduces a share of the vector, and
likewise their state rounds every ``average_state_every`` epochs (volunteers behind home routers
average as clients, which reduce nothing: without a dialable peer they could not average state). It
aggregates everyone's progress into per-epoch metrics, and every ``checkpoint_every`` epochs it
downloads the current state from the trainers and writes a checkpoint (never one whose loss is NaN).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from core.averaging import AveragingResult, Codec, MatchmakingError
from core.averaging.state import StateDownloadError
from core.training.checkpoints import CheckpointStore
from core.training.links import PeerLinks
from core.training.metrics import EpochMetrics, MetricsAggregator
from core.training.progress import PeerProgress
from core.training.state import TrainingState
from core.util.errors import BarnraiseError
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AuxiliaryConfig:
    target_batch_size: int
    matchmaking_time: float = 5.0
    poll_interval: float = 0.1
    checkpoint_every: int = 0
    """Epochs between checkpoints; 0 writes none."""
    state_timeout: float = 120.0
    average_state_every: int = 0
    """The trainers' state-averaging period (the manifest's); 0 joins no state rounds."""


class AuxiliaryPeer:
    def __init__(
        self,
        state: TrainingState,
        links: PeerLinks,
        config: AuxiliaryConfig,
        *,
        checkpoints: CheckpointStore | None = None,
        on_metrics: Callable[[EpochMetrics], None] | None = None,
    ) -> None:
        averager = links.averager
        if not averager.config.auxiliary:
            raise ValueError("an auxiliary peer needs an averager configured with auxiliary=True")
        self.state = state
        self.averager = averager
        self.sharing = links.sharing
        self.board = links.board
        self.bridge = links.bridge
        self.config = config
        self.checkpoints = checkpoints
        self.on_metrics = on_metrics
        self.epoch = 0
        self.rounds_joined = 0
        self.state_rounds_joined = 0
        """State rounds averaged completely with every trainer that was expected."""
        self.metrics: list[EpochMetrics] = []
        self._aggregator = MetricsAggregator()
        self._joined = -1
        self._published_at = 0.0
        self._tasks = BackgroundTasks(f"auxiliary/{averager.host.peer_id.short()}")
        self._checkpointing: asyncio.Task[None] | None = None

    async def run(self, stop: asyncio.Event | None = None) -> None:
        zeros = [torch.zeros(p.shape, dtype=torch.float32) for p in self.state.parameters]
        try:
            while stop is None or not stop.is_set():
                try:
                    await self._tick(zeros)
                except BarnraiseError as exc:
                    log.warning("auxiliary peer: %s", exc)
                await asyncio.sleep(self.config.poll_interval)
            if self._checkpointing is not None:
                await asyncio.gather(self._checkpointing, return_exceptions=True)
        finally:
            await self._tasks.close()

    async def _tick(self, zeros: list[torch.Tensor]) -> None:
        records = await self.board.fetch()
        mine = PeerProgress(str(self.averager.host.peer_id), self.epoch, 0, 0.0, time.time(), "aux")
        view = self.board.view(records, mine, self.config.target_batch_size)
        if view.epoch > self.epoch:
            self.epoch = view.epoch
            await self._publish()
        elif time.monotonic() - self._published_at > 5.0:
            await self._publish()
        for metrics in self._aggregator.observe(view.peers, time.time()):
            await self._report(metrics)
        if view.ready and self._joined < view.epoch and view.trainers_at_epoch:
            self._joined = view.epoch
            expected = len(view.trainers_at_epoch) + 1
            if await self._join(f"grads.{view.epoch}", zeros, expected, None) is not None:
                self.rounds_joined += 1
            self.epoch = view.epoch + 1
            await self._publish()
            every = self.config.average_state_every
            if every and self.epoch % every == 0 and len(view.trainers_at_epoch) >= 2:
                # the trainers' state: parameters and optimizer statistics, averaged exactly
                shapes = [t.shape for t in self.state.averaged_tensors()]
                state = [torch.zeros(shape, dtype=torch.float32) for shape in shapes]
                result = await self._join(f"state.{self.epoch}", state, expected, Codec.NONE)
                if result is not None and result.complete and len(result.members) == expected:
                    self.state_rounds_joined += 1

    async def _join(
        self, round_key: str, zeros: list[torch.Tensor], expected: int, codec: Codec | None
    ) -> AveragingResult | None:
        """Reduce a share of the trainers' round ``round_key``, contributing nothing (weight 0)."""
        try:
            result = await self.averager.average(
                zeros,
                weight=0.0,
                round_key=round_key,
                timeout=self.config.matchmaking_time,
                target_size=expected,
                codec=codec,
            )
        except MatchmakingError as exc:
            log.info("auxiliary peer missed round %s: %s", round_key, exc)
            return None
        log.debug("auxiliary round %s: %s", round_key, result.summary())
        return result

    async def _publish(self) -> None:
        mine = PeerProgress(str(self.averager.host.peer_id), self.epoch, 0, 0.0, time.time(), "aux")
        self._published_at = time.monotonic()
        await self.board.publish(mine)

    async def _report(self, metrics: EpochMetrics) -> None:
        self.metrics.append(metrics)
        if self.on_metrics is not None:
            self.on_metrics(metrics)
        every = self.config.checkpoint_every
        if self.checkpoints is not None and every and (metrics.epoch + 1) % every == 0:
            if self._checkpointing is not None and not self._checkpointing.done():
                log.warning("checkpoint after epoch %d skipped: the last one is still being written",
                            metrics.epoch)  # fmt: skip
                return
            # in the background: metrics and averaging rounds must not wait for a download
            self._checkpointing = self._tasks.spawn(
                f"checkpoint-{metrics.epoch + 1}", self._checkpoint(metrics)
            )

    async def _checkpoint(self, metrics: EpochMetrics) -> None:
        """Download the trainers' current state and save it (the store refuses a NaN loss)."""
        assert self.checkpoints is not None
        try:
            downloaded = await self.sharing.download(timeout=self.config.state_timeout)
        except StateDownloadError as exc:
            log.warning("no checkpoint at epoch %d: %s", metrics.epoch + 1, exc)
            return
        await self.bridge.run(self.state.load, downloaded.version, downloaded.tensors)
        store = self.checkpoints
        loss = float("nan") if metrics.loss is None else metrics.loss
        metadata = {"epoch": downloaded.version, "samples": metrics.samples}

        def save() -> None:
            store.save(
                downloaded.version,
                self.state.model.state_dict(),
                self.state.optimizer.state_dict(),
                metadata,
                loss,
            )

        await self.bridge.run(save)
