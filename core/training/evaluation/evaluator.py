"""HeldOutEvaluator: the backbone measures its replica on the held-out set every ``every`` epochs.

The replica is copied on the thread that owns it (a moment's work), and measured on a worker
thread of the evaluator's own, so that an averaging round never waits for an evaluation: with the
demo's 256 sequences that is under a second on a laptop; with a 1 B model, minutes of a CPU and
a second copy of the weights in memory. An evaluation still running when the next falls due makes
that one skip. Whatever fails (held-out shards that do not answer, a tokenizer that cannot be
read, a model that raises) is logged once per distinct cause and tried again at the next due
epoch: training never stops for an evaluation.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable

import torch

from core.data import TextTokenizer
from core.project import Manifest
from core.training.evaluation.floor import project_floor
from core.training.evaluation.held_out import HeldOutSet, load_held_out
from core.training.evaluation.measure import measure
from core.util.amounts import below_floor
from core.util.errors import BarnraiseError
from core.util.tasks import BackgroundTasks
from core.worker.bridge import TrainingBridge
from core.worker.events import PeerEvaluation

log = logging.getLogger(__name__)

RESULTS_KEPT = 1000
"""Evaluations kept in memory (``evaluation.jsonl`` keeps every one)."""
Snapshot = Callable[[], tuple[int, torch.nn.Module]]
"""Run on the replica's thread: its epoch and a model of its own holding the replica's weights."""


class HeldOutEvaluator:
    def __init__(
        self,
        manifest: Manifest,
        *,
        tokenizer: Callable[[], TextTokenizer],
        data_base: str | None,
        replica: TrainingBridge,
        snapshot: Snapshot,
        on_result: Callable[[PeerEvaluation], None],
    ) -> None:
        """``tokenizer`` is called on a worker thread (it may download); ``replica``: the bridge
        whose thread owns the replica, where ``snapshot`` runs."""
        self.manifest = manifest
        self.every = manifest.evaluation.every
        self._tokenizer = tokenizer
        self._data_base = data_base
        self._replica = replica
        self._snapshot = snapshot
        self._on_result = on_result
        self._bridge = TrainingBridge("evaluation")
        self._tasks = BackgroundTasks("evaluation")
        self._running: asyncio.Task[None] | None = None
        self._held_out: HeldOutSet | None = None
        self.floor: float | None = None
        """The unigram floor on the held-out set, once computed (``floor``)."""
        self._last_problem = ""
        self.results: deque[PeerEvaluation] = deque(maxlen=RESULTS_KEPT)
        """The newest evaluations of this run, oldest first (for diagnostics; the log has all)."""

    def epoch_done(self, epoch: int) -> None:
        """The collaboration finished ``epoch``: evaluate if one is due and none is running."""
        if (epoch + 1) % self.every:
            return
        if self._running is not None and not self._running.done():
            log.info("held-out evaluation after epoch %d skipped: the last one still runs", epoch)
            return
        self._running = self._tasks.spawn(f"after-epoch-{epoch}", self._evaluate())

    async def aclose(self) -> None:
        await self._tasks.close()
        await self._bridge.aclose()

    async def _evaluate(self) -> None:
        started = time.monotonic()
        try:
            if self._held_out is None:
                self._held_out = await self._bridge.run(self._load)
                self.floor = await self._bridge.run(self._floor, self._held_out)
            held_out = self._held_out
            epoch, model = await self._replica.run(self._snapshot)
            measured = await self._bridge.run(
                measure, model, held_out.batches, causal=held_out.causal
            )
        except (BarnraiseError, OSError, RuntimeError, ValueError) as exc:
            self._problem(f"the held-out evaluation failed: {exc}")
            return
        self._last_problem = ""
        result = PeerEvaluation(
            epoch=epoch,
            loss=measured.loss,
            accuracy=measured.accuracy,
            samples=measured.samples,
            tokens=measured.tokens,
            seconds=round(time.monotonic() - started, 3),
            time=time.time(),
            floor=self.floor,
        )
        self.results.append(result)
        log.info("held-out evaluation at epoch %d: %s, accuracy %.1f %% (%d sequences)",
                 epoch, below_floor(result.loss, self.floor), 100 * result.accuracy,
                 result.samples)  # fmt: skip
        self._on_result(result)

    def _load(self) -> HeldOutSet:
        return load_held_out(self.manifest, self._tokenizer(), data_base=self._data_base)

    def _floor(self, held_out: HeldOutSet) -> float | None:
        """Computed once; training shards that cannot be read leave the figures without it."""
        try:
            floor = project_floor(
                self.manifest, self._tokenizer(), held_out, data_base=self._data_base
            )
        except (BarnraiseError, OSError, ValueError) as exc:
            log.warning("the unigram floor could not be computed: %s (figures go on without)", exc)
            return None
        log.info("unigram floor on the held-out text: %.4f nats", floor)
        return floor

    def _problem(self, message: str) -> None:
        if message != self._last_problem:
            log.warning("%s (training goes on; tried again at the next evaluation)", message)
        self._last_problem = message
