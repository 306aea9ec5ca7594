"""The model the backbone publishes beside each checkpoint carries the card ``barnraise export``
writes: the samples behind the checkpoint, the held-out figures of its epoch with the unigram floor
(from the backbone's log, the floor included), and the contributors."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from core.cli.peer.backbone import with_model_export
from core.project import load_manifest
from core.training.publish.checkpoint import CheckpointPublishing
from core.training.publish.model import HeldOutHistory
from core.trust.identity import Identity
from core.trust.published_model import INDEX_NAME, HeldOut, ModelIndex
from core.worker.events import PeerEvaluation
from tests.export.conftest import Project, epoch_line, held_out, save, write_lines

KEY = Identity.from_seed(bytes(range(32)))


def published_card(project: Project, public: Path, history: HeldOutHistory, epoch: int) -> str:
    """Publish the checkpoint of ``epoch`` as the backbone does, its work folder the project's
    ``aux``; the card inside the published archive."""
    work = project.checkpoints.parent
    checkpoint = save(project.model, project.checkpoints, epoch, samples_total=256 * epoch)
    publishing = with_model_export(
        CheckpointPublishing(public, KEY, "tiny-export"),
        load_manifest(project.manifest),
        project.manifest,
        data_base=None,
        history=history,
        scratch=work,
        work_dir=work,
    )
    publishing.publish(checkpoint, epoch, 3.5)
    index = ModelIndex.from_json(json.loads((public / INDEX_NAME).read_text()), "model.json")
    with zipfile.ZipFile(public / index.file) as packed:
        return packed.read(f"{index.folder}/README.md").decode()


def test_the_published_card_reads_the_backbone_logs(project: Project, tmp_path: Path) -> None:
    aux = project.checkpoints.parent
    write_lines(aux / "evaluation.jsonl", [held_out(100, 5.9), held_out(110, 5.7312)])
    write_lines(aux / "metrics.jsonl", [epoch_line(e, {"a": 128, "b": 160}) for e in range(110)])
    history = HeldOutHistory()
    history.record(PeerEvaluation(110, 5.7312, 0.4125, 512, 9000, 3.0, 1_700_000_000.0))
    card = published_card(project, tmp_path / "public", history, 110)
    assert "checkpoint of epoch 110, after 28,160 samples in all" in card
    assert "measured at its epoch 110: loss 5.7312 nats per masked token, 0.51 below" in card
    assert " 2 peer(s) contributed to it" in card


def test_without_a_log_the_published_card_shows_what_the_backbone_remembers(
    project: Project, tmp_path: Path
) -> None:
    history = HeldOutHistory()
    history.record(PeerEvaluation(105, 5.8, 0.4, 512, 9000, 3.0, 1_700_000_000.0))
    card = published_card(project, tmp_path / "public", history, 110)
    assert (
        "measured at epoch 105, the newest evaluation before this checkpoint: loss 5.8000" in card
    )
    assert "floor" not in card
    index = ModelIndex.from_json(
        json.loads((tmp_path / "public" / INDEX_NAME).read_text()), "model.json"
    )
    assert index.held_out == HeldOut(105, 5.8, 0.4, 512)

    # the floor it remembers too
    history.record(PeerEvaluation(108, 5.7312, 0.4, 512, 9000, 3.0, 1_700_000_000.0, 6.2412))
    card = published_card(project, tmp_path / "public", history, 110)
    assert (
        "measured at epoch 108, the newest evaluation before this checkpoint: loss 5.7312" in card
    )
    assert "0.51 below the unigram floor of 6.24 nats" in card
