"""The backbone's composition root: what ``barnraise backbone`` adds to a peer's settings.

- Its checkpoints published (``--publish-checkpoints``, ``--project-key``): copied into a folder
  with an index signed by the project key and, beside each, the model exported for transformers
  (``model_export``).
- The held-out evaluations kept for those models, those of earlier runs read back from its log.
- Its epochs and held-out evaluations reported to the project's coordinator (``reporting_to``)
  when it has an account there, in the bodies ``core.trust.reports`` defines.

The command (``command``) builds a peer's settings from its options and hands a backbone's here.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from core.cli.peer.model_export import ModelExport
from core.project import Manifest
from core.trust.identity import Identity
from core.trust.reports import evaluation_report
from core.util.errors import ConfigError

if TYPE_CHECKING:
    from core.account.reporter import CoordinatorReporter
    from core.training.peer.project_peer import PeerSettings
    from core.training.publish.checkpoint import CheckpointPublishing
    from core.training.publish.model import HeldOutHistory
    from core.worker.events import PeerEvaluation

log = logging.getLogger(__name__)


def backbone_settings(settings: PeerSettings, args: argparse.Namespace) -> PeerSettings:
    """A backbone's ``settings`` with its checkpoints' publication, the model exported beside
    each, and the held-out evaluations kept for those models; unchanged without
    ``--publish-checkpoints``."""
    publishing = publishing_from_args(args, settings.manifest)
    if publishing is None:
        return settings
    history = held_out_history(settings.work_dir)
    publishing = with_model_export(
        publishing,
        settings.manifest,
        args.manifest,
        data_base=settings.data_base,
        history=history,
        scratch=settings.work_dir,
        work_dir=settings.work_dir,
    )
    return dataclasses.replace(settings, publishing=publishing, on_evaluation=history.record)


def publishing_from_args(
    args: argparse.Namespace, manifest: Manifest
) -> CheckpointPublishing | None:
    """How ``barnraise backbone`` publishes its checkpoints, from ``--publish-checkpoints`` and
    ``--project-key``; None when it does not.

    Raises ``ConfigError`` when one option comes without the other, when the folder is a file, or
    when the key is not the one the manifest names (``access.project_key``); ``IdentityError`` when
    the key file cannot be read.
    """
    from core.coordinator.service import check_project_key  # noqa: PLC0415 - only for the backbone
    from core.training.publish.checkpoint import CheckpointPublishing  # noqa: PLC0415 - loads aiohttp

    folder: Path | None = getattr(args, "publish_checkpoints", None)
    key_path: Path | None = getattr(args, "project_key", None)
    if folder is None:
        if key_path is not None:
            raise ConfigError("--project-key is used only with --publish-checkpoints FOLDER")
        return None
    if key_path is None:
        raise ConfigError(
            "--publish-checkpoints needs --project-key PATH: the project key file that signs "
            "the published checkpoints (the coordinator's <project>-key.pem)"
        )
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--publish-checkpoints {folder} is a file, not a folder")
    project_key = Identity.load(key_path)
    check_project_key(manifest, project_key.peer_id, f"the key in {key_path}")
    if manifest.access.key is None:
        # Publishing still works, but no peer can check the index until the manifest names the key.
        log.warning(
            "the manifest names no access.project_key, so peers cannot verify the published "
            "checkpoints; add access.project_key = %r",
            str(project_key.peer_id),
        )
    return CheckpointPublishing(folder, project_key, manifest.project.name)


def held_out_history(work_dir: Path) -> HeldOutHistory:
    """The backbone's held-out evaluations, starting with those its log kept from earlier runs."""
    from core.training.credit.metrics import MetricsLog  # noqa: PLC0415 - torch only for this command
    from core.training.peer.roles import EVALUATION_LOG  # noqa: PLC0415
    from core.training.publish.model import HeldOutHistory  # noqa: PLC0415

    history = HeldOutHistory()
    log_path = work_dir / EVALUATION_LOG
    if log_path.exists():
        try:
            history.record_all(MetricsLog(log_path).records())
        except OSError as exc:
            log.warning("the held-out evaluations in %s cannot be read: %s", log_path, exc)
    return history


def with_model_export(
    publishing: CheckpointPublishing,
    manifest: Manifest,
    manifest_path: Path,
    *,
    data_base: str | None,
    history: HeldOutHistory,
    scratch: Path,
    work_dir: Path | None = None,
) -> CheckpointPublishing:
    """``publishing`` that also publishes, beside each checkpoint, its model in the transformers
    format (``ModelExport``; ``work_dir``: the backbone's, whose logs its model card reads);
    unchanged when the manifest's model kind cannot be exported."""
    from core.export.kinds import MAPPINGS  # noqa: PLC0415 - loads torch

    if manifest.model.kind not in MAPPINGS:
        log.info(
            "models of kind %r cannot be exported yet: only the checkpoints are published",
            manifest.model.kind,
        )
        return publishing
    export = ModelExport(publishing, manifest_path, data_base, history, scratch, work_dir=work_dir)
    return dataclasses.replace(publishing, beside=export)


def reporting_to(settings: PeerSettings, reporter: CoordinatorReporter) -> PeerSettings:
    """``settings`` whose epochs and held-out evaluations also go to the coordinator."""
    recorded = settings.on_evaluation

    def evaluated(result: PeerEvaluation) -> None:
        if recorded is not None:
            recorded(result)
        report = evaluation_report(result)
        if report is None:
            log.info("the held-out evaluation of epoch %d has no loss to report", result.epoch)
            return
        reporter.submit_evaluation(report)

    return dataclasses.replace(
        settings,
        on_metrics=lambda metrics: reporter.submit(metrics.contribution_report()),
        on_evaluation=evaluated,
    )
