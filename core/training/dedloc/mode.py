"""The ``dedloc`` mode's training code: a trainer's ``DedlocOptimizer`` and the backbone's
``DedlocBackbone``, built from a project peer's parts (``core.training.mode``)."""

from __future__ import annotations

import logging

from core.averaging.robust.aggregation import AggregationConfig
from core.config.roles import CLIENT, TRAINER
from core.project import Manifest
from core.training.dedloc.backbone import DedlocBackbone, DedlocBackboneConfig, WorkChecks
from core.training.dedloc.optimizer import DedlocConfig, DedlocOptimizer
from core.training.mode import BackboneParts, Matchmaking, PeerParts
from core.training.publish.checkpoint import published_fallback
from core.training.rollback_replica import ReplicaRollback

log = logging.getLogger(__name__)

LEADER_PATIENCE = 1.0
"""Seconds at most a leader waits before closing a group that holds the target batch: the
readiness brings the members to the round within a microbatch of each other."""


class Dedloc:
    def matchmaking(self, manifest: Manifest) -> Matchmaking:
        wait = manifest.averaging.matchmaking_time
        return Matchmaking(min(LEADER_PATIENCE, wait), wait)

    def aggregation(self, base: AggregationConfig) -> AggregationConfig:
        """As the manifest says: one batch's gradient need not point the others' way (an
        embedding row one batch touched), so no screening by direction."""
        return base

    def trainer(self, parts: PeerParts) -> DedlocOptimizer:
        """The collaborative optimizer, its fallback to the published checkpoint, the moderators'
        rollback orders and, in the demo only, a misbehaviour."""
        s, manifest, links = parts.settings, parts.manifest, parts.links
        t = manifest.training
        optimizer = DedlocOptimizer(
            parts.state,
            links,
            config=DedlocConfig(
                target_batch_size=t.target_batch_size,
                role=CLIENT if s.role == CLIENT else TRAINER,
                average_state_every=t.average_state_every,
                delay_parameter_updates=t.delay_parameter_updates,
                clip_norm=t.clip_norm or None,
                matchmaking_time=manifest.averaging.matchmaking_time,
                averaging_timeout=manifest.averaging.allreduce_timeout,
                keep_receipts=t.work_checks > 0,
            ),
        )
        optimizer.fallback = published_fallback(manifest, s.work_dir)
        if s.misbehaviour is not None:
            log.warning("this peer misbehaves on purpose: %s", s.misbehaviour.describe())
            s.misbehaviour.install(optimizer, links.averager)
        optimizer.rollback = ReplicaRollback.following(
            s.access,
            optimizer.local,
            links,
            published=optimizer.fallback,
            on_applied=lambda done: parts.on_event(done.event()),
        )
        return optimizer

    def backbone(self, parts: BackboneParts) -> DedlocBackbone:
        """The backbone: a replica stepped with the trainers, its checkpoints, the
        members' evidence, and the moderators' rollback orders applied to it."""
        s, manifest = parts.settings, parts.manifest
        t = manifest.training
        backbone = DedlocBackbone(
            parts.state,
            parts.links,
            config=DedlocBackboneConfig(
                target_batch_size=t.target_batch_size,
                matchmaking_time=manifest.averaging.matchmaking_time,
                checkpoint_every=s.checkpoint_every,
                average_state_every=t.average_state_every,
                clip_norm=t.clip_norm or None,
                delay_parameter_updates=t.delay_parameter_updates,
            ),
            checkpoints=parts.checkpoints,
            on_metrics=parts.report,
            # it says where it published; a failure is the backbone's to report
            publish=s.publishing.publish if s.publishing is not None else None,
            on_evidence=s.on_evidence,
            work_checks=(
                WorkChecks(t.work_checks, parts.loss, parts.on_check)
                if t.work_checks > 0 and parts.loss is not None
                else None
            ),
        )
        backbone.rollback = ReplicaRollback.following(
            s.access,
            backbone.local,
            parts.links,
            checkpoints=parts.checkpoints,
            on_applied=lambda done: parts.on_event(done.event()),
        )
        return backbone


MODE = Dedloc()
