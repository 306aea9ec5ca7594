"""The ``diloco`` mode's training code: a trainer's ``DilocoOptimizer`` and the backbone's
``DilocoBackbone``, built from a project peer's parts (``core.training.mode``)."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from core.averaging.robust.aggregation import AggregationConfig
from core.averaging.robust.screening import NEVER, OPPOSED_FROM
from core.config.roles import BACKBONE, CLIENT, TRAINER
from core.modes import active_modes
from core.project import Manifest
from core.training.diloco.backbone import DilocoBackbone, RoundChecks
from core.training.diloco.checks.replay import replica_of
from core.training.diloco.checks.replayer import RoundReplayer
from core.training.diloco.optimizer import DilocoConfig, DilocoOptimizer, reads_every
from core.training.diloco.state import DilocoState
from core.training.links import PeerLinks
from core.training.mode import BackboneParts, Matchmaking, PeerParts
from core.training.state import TrainingState
from core.worker.bridge import TrainingBridge

log = logging.getLogger(__name__)

UNSENT_FILE = "diloco-unsent.npz"
"""In a trainer's work folder: its unsent work across a restart (``UnsentWork``)."""


class Diloco:
    def matchmaking(self, manifest: Manifest) -> Matchmaking:
        """The members of a round reach its end up to one microbatch apart (a round ends between
        microbatches), and with overlap the wait costs no computing: a leader waits for everyone
        it expects, up to a third of a round or the manifest's time if longer."""
        t, wait = manifest.training, manifest.averaging.matchmaking_time
        most = max(wait, t.round_seconds / 3)
        return Matchmaking(most, most)

    def aggregation(self, base: AggregationConfig) -> AggregationConfig:
        """Pseudo-gradients span a round of inner steps: honest members' point the same way, so
        a large one that points away is screened (a sign flip just under the norm limit). How
        far one lies from the others grows with its sender's inner steps, so CenteredClip's clip
        factor says how fast a member is as much as whether it lies: it bounds the pull but makes
        no finding (a clean swarm of 64 with speeds spread 4x drew 13 against honest members in
        12 rounds); the norm screen leaves out without a finding too (``NEVER``: honest members'
        norms differ by thousands of times near the end of the inner schedule; the replays name
        the cheats). Reducers keep each sender's sums along the others' mean: the backbone scores
        the members' work by them (``core.training.credit.scores``)."""
        return replace(
            base,
            opposed_from=OPPOSED_FROM,
            clip_finding_below=0.0,
            accuse_from=NEVER,
            alignments=True,
        )

    def trainer(self, parts: PeerParts) -> DilocoOptimizer:
        """The diloco optimizer and, in the demo only, a misbehaviour."""
        s = parts.settings
        role = CLIENT if s.role == CLIENT else TRAINER
        optimizer = self.optimizer(
            parts.manifest, parts.state, parts.links, role, unsent_file=s.work_dir / UNSENT_FILE
        )
        if role == TRAINER and replays_rounds(parts.manifest) and parts.loss and parts.replica:
            optimizer.replay_for_backbone(self.replayer(optimizer, parts))
        if s.misbehaviour is not None:
            log.warning("this peer misbehaves on purpose: %s", s.misbehaviour.describe())
            s.misbehaviour.install(optimizer, parts.links.averager)
        return optimizer

    def replayer(self, optimizer: DilocoOptimizer, parts: PeerParts) -> RoundReplayer:
        """A trainer's replays of members' rounds for the backbone (``checks.replayer``), on a
        replica of its own on the CPU."""
        assert parts.replica is not None
        assert parts.loss is not None
        return RoundReplayer(
            replica_of(parts.replica(), optimizer.diloco.clip_norm),
            parts.links.averager.host,
            bridge=TrainingBridge("round-replays"),
            loss=parts.loss,
        )

    def backbone(self, parts: BackboneParts) -> DilocoBackbone:
        s, t = parts.settings, parts.manifest.training
        replays = replays_rounds(parts.manifest) and parts.loss is not None
        return DilocoBackbone(
            self.optimizer(parts.manifest, parts.state, parts.links, BACKBONE),
            checkpoints=parts.checkpoints,
            checkpoint_every=s.checkpoint_every,
            on_metrics=parts.report,
            publish=s.publishing.publish if s.publishing is not None else None,
            on_evidence=s.on_evidence,
            on_check=parts.on_check,
            round_checks=(
                RoundChecks(t.work_checks, parts.loss, parts.replica)
                if replays and parts.loss is not None and parts.replica is not None
                else None
            ),
        )

    def optimizer(
        self,
        manifest: Manifest,
        state: TrainingState,
        links: PeerLinks,
        role: str,
        unsent_file: Path | None = None,
    ) -> DilocoOptimizer:
        """The manifest's DiLoCo rounds around ``state`` (already on its training device), for a
        trainer, a client or the backbone; ``unsent_file``: where a trainer keeps
        its unsent work across a restart."""
        t, codec = manifest.training, links.averager.config.codec
        replays = replays_rounds(manifest)
        diloco = DilocoState(
            state,
            outer_lr=t.outer_lr,
            outer_momentum=t.outer_momentum,
            overlap=t.overlap,
            sparse=codec.sparse,
            clip_norm=t.clip_norm or None,
            residual_decay=t.residual_decay,
            fresh_moments=replays,
        )
        config = DilocoConfig(
            round_seconds=t.round_seconds,
            role=role,
            matchmaking_time=self.matchmaking(manifest).most,
            refresh_interval=reads_every(t.round_seconds),
            unsent_file=unsent_file,
            keep_rounds=replays,
        )
        return DilocoOptimizer(diloco, links, config)


def replays_rounds(manifest: Manifest) -> bool:
    """The backbone replays trainers' rounds (``training.work_checks`` above 0): trainers then
    start each round at the anchor with fresh inner moments and keep round receipts."""
    return active_modes().parse(manifest.training.mode).checks_work(manifest.training)


MODE = Diloco()
