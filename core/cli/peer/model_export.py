"""ModelExport: the model published beside each of the backbone's checkpoints.

``barnraise backbone --publish-checkpoints`` publishes, beside each checkpoint, the model for everyone:
the checkpoint exported in the transformers format (``core.export``), packed and signed
(``core.training.publish.model``) with the newest held-out figures at or before its epoch. Its model
card reads them, with the unigram floor and the contributors, from the backbone's logs in its work
folder, as ``barnraise export`` does (the figures it remembers when the log has none). The
backbone's composition root (``backbone``) hands it to the checkpoints' publication.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.training.publish.checkpoint import CheckpointPublishing, PublishedIndex
    from core.training.publish.model import HeldOutHistory

_SCRATCH_PREFIX = ".model-export-"


class ModelExport:
    """Export a just-published checkpoint (``core.export``) and publish the folder beside it,
    packed and signed (``core.training.publish.model``): what ``CheckpointPublishing`` calls
    ``beside``. Runs on the publication's worker thread; its failure is the caller's to log."""

    def __init__(
        self,
        publishing: CheckpointPublishing,
        manifest_path: Path,
        data_base: str | None,
        history: HeldOutHistory,
        scratch: Path,
        *,
        work_dir: Path | None = None,
    ) -> None:
        """``work_dir``: the backbone's, whose logs the model card reads (none: only ``history``)."""
        self.publishing = publishing
        self.manifest_path = manifest_path
        self.data_base = data_base
        self.history = history
        self.scratch = scratch
        self.work_dir = work_dir
        # what a run killed mid-export left
        for leftover in scratch.glob(_SCRATCH_PREFIX + "*"):
            shutil.rmtree(leftover, ignore_errors=True)

    def __call__(self, checkpoint: Path, index: PublishedIndex) -> None:
        import torch  # noqa: PLC0415 - the backbone has loaded it already

        from core.export.folder import export_model  # noqa: PLC0415 - loads torch
        from core.export.records import HeldOutFigures  # noqa: PLC0415
        from core.training.publish.model import publish_model  # noqa: PLC0415
        from core.trust.published_model import archive_name  # noqa: PLC0415

        held_out = self.history.at_or_before(index.epoch)
        self.scratch.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=_SCRATCH_PREFIX, dir=self.scratch) as scratch:
            # named as the archive's folder, so that the model card's lines load it as it unpacks
            out = Path(scratch) / archive_name(index.epoch).removesuffix(".zip")
            # the export builds the model seeded (``build_model``): the backbone's random state
            # stays as it was
            with torch.random.fork_rng(devices=[]):
                export_model(
                    self.manifest_path,
                    checkpoint,
                    out,
                    data_base=self.data_base,
                    backbone_dir=self.work_dir,
                    evaluation=None
                    if held_out is None
                    else HeldOutFigures(
                        held_out.epoch,
                        held_out.loss,
                        held_out.accuracy,
                        held_out.samples,
                        held_out.floor,
                    ),
                )
            p = self.publishing
            publish_model(
                out,
                p.folder,
                p.project_key,
                project=p.project,
                epoch=index.epoch,
                architecture=_architecture(out / "config.json"),
                held_out=held_out,
            )


def _architecture(config: Path) -> str:
    """The transformers class an exported folder names (``config.json``'s ``architectures``)."""
    from core.export.errors import ExportError  # noqa: PLC0415

    try:
        names = json.loads(config.read_text(encoding="utf-8")).get("architectures")
    except (OSError, ValueError, AttributeError) as exc:
        raise ExportError(f"the export's {config} cannot be read: {exc}") from None
    if not isinstance(names, list) or not names or not isinstance(names[0], str):
        raise ExportError(f"the export's {config} names no architecture")
    return names[0]
