"""The backbone of a diloco project: the outer state kept, served and checkpointed, each round's
members scored.

It runs a ``DilocoOptimizer`` that computes nothing (role ``backbone``): it joins every round with
weight 0, reduces a share of it, receives the average and takes the trainers' outer step, so the
model outlives its trainers and newcomers download the anchor and the outer momentum from it. On
start it resumes from its newest checkpoint, whose model holds the anchor and whose optimizer
part holds the outer momentum. Its books, the metrics and credit from the progress records, the
members' evidence and the checkpoints, are the ``Bookkeeping`` every backbone shares; it observes
each round it took part in (``DilocoOptimizer.on_landed``): the weights of a landed one are
evidence of its senders' work, and what its part showed of each sender is their score.

Credit follows the members' scores (``core.training.credit.scores``): the part of each round the
backbone reduces shows how far each member's update went along the others' per sample it claimed,
and a claim its updates do not show is cut to what they do, accused, and logged as a check
(``checks.jsonl``: the audit's checked share).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch

from core.averaging import Alignment
from core.config.roles import BACKBONE
from core.training.bookkeeping import Bookkeeping, Publisher, Saving
from core.training.checkpoints import Checkpoint, CheckpointStore
from core.training.credit.checks.standing import Standings
from core.training.credit.checks.verdict import CheckRecord
from core.training.credit.metrics import EpochMetrics
from core.training.credit.samples import SamplesTally
from core.training.credit.scores import WorkScores, credited
from core.training.diloco.checks import RoundChecker
from core.training.diloco.checks.credit import RoundCredit
from core.training.diloco.checks.replay import LossFn, replica_of
from core.training.diloco.optimizer import DilocoOptimizer, Landing
from core.training.diloco.state import SCHEDULE_KEY, DilocoState
from core.training.errors import CheckpointError
from core.training.moderation.evidence import Reported
from core.training.state import TrainingState
from core.trust.evidence import Evidence
from core.trust.peer_id import PeerID
from core.util.tasks import BackgroundTasks
from core.worker.bridge import TrainingBridge

log = logging.getLogger(__name__)

POLL_SECONDS = 0.5


@dataclass(frozen=True)
class RoundChecks:
    """The backbone's replays of the trainers' rounds (``core.training.diloco.checks``)."""

    rate: float
    """The share of a trusted member's rounds replayed at random, besides a newcomer's first (within
    a share of the backbone's time of its own, ``verdict.NEWCOMER_BUDGET``)."""
    loss: LossFn
    replica: Callable[[], TrainingState]
    """A new training state built like a trainer's (its own model and inner optimizer)."""


class DilocoBackbone:
    def __init__(
        self,
        optimizer: DilocoOptimizer,
        *,
        checkpoints: CheckpointStore | None,
        checkpoint_every: int,
        on_metrics: Callable[[EpochMetrics], None] | None = None,
        publish: Publisher | None = None,
        on_evidence: Callable[[list[Evidence]], None] | None = None,
        on_check: Callable[[CheckRecord], None] | None = None,
        round_checks: RoundChecks | None = None,
    ) -> None:
        """``round_checks``: replay the trainers' rounds, and credit what the replays support
        (None: score their updates)."""
        if optimizer.config.role != BACKBONE:
            raise ValueError("the backbone's optimizer runs in the backbone's role")
        self.optimizer = optimizer
        seconds = optimizer.config.round_seconds
        self.scores = WorkScores(hold=max(10.0, seconds), newcomer_hold=max(30.0, 4 * seconds))
        self._tasks = BackgroundTasks(f"diloco-backbone/{optimizer.part.peer[:8]}")
        # replays get a thread of their own: on the backbone's, a replay (a member's whole round)
        # would hold up the landing of the round after it
        self._replays = None if round_checks is None else TrainingBridge("round-replays")
        self.checker = None if round_checks is None else self._checker(round_checks)
        """Replays of the trainers' rounds (None: their updates are scored instead)."""
        self.round_credit = (
            None
            if self.checker is None
            else RoundCredit(self.scores, self.checker.standings, self.checker.state_at)
        )
        """What the replays support of the claims (None: the scores say)."""
        self.books = Bookkeeping(
            evidence=optimizer.evidence,
            bridge=optimizer.bridge,
            tasks=self._tasks,
            checkpoints=checkpoints,
            checkpoint_every=checkpoint_every,
            on_metrics=on_metrics,
            publish=publish,
            on_evidence=on_evidence,
            support=self.scores if self.round_credit is None else self.round_credit,
        )
        """Metrics, credit, evidence and checkpoints (``core.training.bookkeeping``)."""
        self.on_check = on_check
        optimizer.on_landed = self._landed
        if self.checker is not None and self.round_credit is not None:
            self.checker.verdicts.on_check = on_check
            self.checker.verdicts.user_of = self.books.user_of
            self.checker.on_backed = self.scores.backed
            self.checker.on_unreplayable = self.round_credit.unreplayable
            # a backbone that missed a landing and downloaded the state holds the anchor its
            # members' next round begins at: kept, that round is replayed and paid as one
            optimizer.on_taken = self._anchor_taken

    def _checker(self, checks: RoundChecks) -> RoundChecker:
        opt = self.optimizer
        assert self._replays is not None
        return RoundChecker(
            replica_of(checks.replica(), opt.diloco.clip_norm),
            opt.links.averager.host,
            bridge=self._replays,
            loss=checks.loss,
            # a newcomer whose rounds it cannot replay (a group that met no other lands apart)
            # waits for one it can, and is never paid unchecked (``Standings``)
            standings=Standings(checks.rate),
            evidence=opt.evidence,
            tasks=self._tasks,
            # the backbone's own round first: a replay running at a round's end made it miss its
            # group (the NAT lab, five trainers in three groups); a round at most
            give_way=partial(opt.gate.wait, opt.config.round_seconds),
        )

    @property
    def samples(self) -> SamplesTally:
        """The samples behind the outer state's epochs, for its checkpoints."""
        return self.books.samples

    @property
    def accusations(self) -> Sequence[Reported]:
        return self.books.accusations

    async def run(self, stop: asyncio.Event) -> None:
        opt = self.optimizer
        diloco = opt.diloco
        await self.books.resume(
            partial(restore, diloco), lambda: (diloco.epoch, diloco.state.rollback)
        )
        await opt.start()
        if self.checker is not None:
            await self._keep_anchor()
        try:
            while not stop.is_set():
                self._follow_standings()
                for metrics in self.books.observe(opt.view().reports, time.time()):
                    if self.books.due(opt.epoch):
                        self.books.checkpoint_soon(metrics, self.saving)
                self.accuse_records()
                self.books.collect_soon(opt.epoch)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), POLL_SECONDS)
        finally:
            opt.interrupt()
            await opt.close()
            await self.close()

    async def close(self) -> None:
        """The books closed (``Bookkeeping.close``), the accusations being published awaited."""
        await self.books.close()
        await self._tasks.close()
        if self._replays is not None:
            await self._replays.aclose()

    def saving(self) -> Saving:
        """On the training thread: the outer state as a checkpoint holds it."""
        diloco = self.optimizer.diloco
        return Saving(
            diloco.epoch,
            diloco.model_state(),
            diloco.outer_state(),
            diloco.state.rollback,
            {"mode": "diloco"},
        )

    def _landed(self, landing: Landing) -> None:
        """A round the backbone took part in: its senders' weights witnessed once it landed, and
        what the backbone's part showed of each sender scored, or with round checks, their
        rounds drawn for replay."""
        result = landing.result
        if landing.landed:
            weights = {str(peer): weight for peer, weight in result.weights.items()}
            self.books.witness(landing.epoch, weights, time.time())
        alignments = {str(p): c for p, c in result.alignments.items()}
        if self.checker is None:
            if alignments:
                self.score(landing.epoch, alignments)
            return
        if alignments:  # the weights each round carried: what credit is cut to
            self.scores.observe(
                landing.epoch, alignments, self.optimizer.links.board.confirmed_claim()
            )
        if landing.landed:
            senders = {str(p): w for p, w in result.weights.items() if w > 0}
            me = str(self.optimizer.part.peer)
            others = sorted(landing.members - set(senders) - {me})
            self.checker.landed(landing.epoch, senders, others)
            self._tasks.spawn(f"anchor-{self.optimizer.epoch}", self._keep_anchor())

    def _anchor_taken(self) -> None:
        self._tasks.spawn(f"anchor-taken-{self.optimizer.epoch}", self._keep_anchor())

    async def _keep_anchor(self) -> None:
        """The anchor the next round starts from, copied on the training thread for its
        replays."""
        checker, diloco = self.checker, self.optimizer.diloco
        assert checker is not None
        await self.optimizer.bridge.run(
            lambda: checker.began(diloco.epoch, diloco.digest, diloco.anchor)
        )

    def _follow_standings(self) -> None:
        """The credit of the members the replays caught withdrawn. (Who is still here does not
        matter: a newcomer's claims wait for a passed replay, gone or not.)"""
        if self.checker is None:
            return
        now = time.time()
        for peer, vouched in self.checker.standings.withdrawals().items():
            self.books.withdraw(peer, vouched, now)

    def score(self, epoch: int, alignments: Mapping[str, Alignment]) -> None:
        """Score the round's senders; log each as a check, accuse those whose work is not there
        (the evidence signed now, published in the background)."""
        ratios = self.scores.observe(
            epoch, alignments, self.optimizer.links.board.confirmed_claim()
        )
        for peer, ratio in ratios.items():
            standing = self.scores.standing(peer, epoch) or 0.0
            claimed = int(alignments[peer].weight)
            backed = credited(claimed, standing)
            record = CheckRecord(
                time.time(), epoch, peer, self.books.user_of(peer),
                "passed" if backed == claimed else "caught", claimed, backed, 0, 0.0,
                reason=f"work score {ratio:.2f} of the round's median, standing {standing:.2f}",
            )  # fmt: skip
            if self.on_check is not None:
                self.on_check(record)
        self.accuse(self.scores.accusations(), epoch)

    def accuse_records(self) -> None:
        """Accuse the members whose records claim more than the weight their round saw, or their
        receipt backs (found while crediting their records). Where rounds are replayed, that
        catches the member as a failed replay does: nothing credited from then on, and what it
        was paid on trust since its last passed replay withdrawn (its weight may lie as its
        records do, in the rounds it shares with the backbone). Likewise those whose records
        labelled a round replayable that their receipt said was not (``RoundCredit``)."""
        for peer, (epoch, samples, weight) in self.scores.record_accusations().items():
            if self.checker is not None:
                self.checker.standings.failed(peer)
            if not self.scores.receipted(peer, epoch):
                seen = f"it declared a weight of {weight:.0f} in the round"
            elif weight > 0:
                seen = f"its receipt of that round backs {weight:.0f}"
            else:
                seen = "it kept no receipt of that round when the backbone asked"
            reason = f"its record claims {samples} samples for epoch {epoch}, where {seen}"
            self._sign(peer, epoch, "record_overclaim", samples / max(weight, 1e-9), reason)
        if self.round_credit is None or self.checker is None:
            return
        for peer, epoch in self.round_credit.mislabeled().items():
            self.checker.standings.failed(peer)
            reason = (
                f"its records said its round of epoch {epoch} began at the backbone's anchor and "
                f"could be replayed, and its receipt of that round said it could not"
            )
            self._sign(peer, epoch, "round_mislabeled", 1.0, reason)

    def accuse(self, standings: Mapping[str, float], epoch: int) -> None:
        """Accuse the members whose standing says their updates do not show their claims."""
        for peer, standing in standings.items():
            reason = (
                f"its updates show {standing:.2f} of the work per sample the others' show, over "
                f"its last rounds: it claims samples it did not compute"
            )
            self._sign(peer, epoch, "work_score", standing, reason)

    def _sign(self, peer: str, epoch: int, statistic: str, value: float, reason: str) -> None:
        """Sign evidence against ``peer`` and publish it in the background."""
        evidence = self.optimizer.evidence
        log.warning("evidence: peer %s %s", peer, reason)
        signed = evidence.accuse(
            PeerID.from_string(peer), round_key=f"work.{epoch}", group=b"", chunk=-1,
            statistic=statistic, value=value, reason=reason,
        )  # fmt: skip
        if signed is not None:
            self._tasks.spawn(
                f"{statistic}-{epoch}-{peer[:8]}",
                evidence.publish_signed([signed], f"{statistic} of epoch {epoch}"),
            )


def restore(diloco: DilocoState, checkpoint: Checkpoint) -> None:
    """On the training thread: a diloco checkpoint's model and outer momentum become the outer
    state; ``CheckpointError`` for one that is not a diloco checkpoint."""
    if checkpoint.metadata.get("mode") != "diloco":
        raise CheckpointError("not a diloco checkpoint")
    momentum = checkpoint.optimizer.get("outer_momentum")
    if not isinstance(momentum, list):
        raise CheckpointError("it holds no outer momentum")
    buffers = [_flat(m) for m in momentum]
    kept = checkpoint.optimizer.get(SCHEDULE_KEY, 0.0)
    schedule = float(kept) if isinstance(kept, int | float) else 0.0
    diloco.state.model.load_state_dict(checkpoint.model)
    diloco.restart(checkpoint.epoch, buffers, schedule)


def _flat(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to("cpu", torch.float32).contiguous().numpy().reshape(-1)
