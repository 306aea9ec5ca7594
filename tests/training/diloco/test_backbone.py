"""The diloco backbone's checkpoints: one written after a landed round holds the outer state, and a
backbone started on the same folder resumes from it (the newest that loads, a checkpoint of another
mode skipped), with the samples behind it counted on."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import pytest

from core.training.checkpoints import CheckpointStore
from core.training.credit.metrics import EpochMetrics
from core.training.credit.samples import SAMPLES_TOTAL
from core.training.diloco.backbone import DilocoBackbone, restore
from tests.training.diloco.conftest import MakeDPeer, end_rounds, settle


async def test_a_backbone_resumes_from_the_outer_state_it_checkpointed(
    make_dpeer: MakeDPeer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = CheckpointStore(tmp_path / "checkpoints", keep=3)
    first = await make_dpeer(role="backbone", momentum=0.5)
    trainers = [await make_dpeer(momentum=0.5) for _ in range(2)]
    await settle([first, *trainers])
    for seed, trainer in enumerate(trainers):
        await trainer.train(3, seed=seed)
    await end_rounds([first, *trainers])
    assert first.optimizer.epoch == 1
    keeping = DilocoBackbone(first.optimizer, checkpoints=store, checkpoint_every=1)
    epoch = EpochMetrics(0, 1.5, 24, 10.0, 2, time.time())
    keeping.books.report(epoch)
    assert keeping.books.due(1)
    await keeping.books.checkpoint(epoch, keeping.saving)
    await keeping.close()
    # a newer checkpoint of another mode, which a diloco backbone cannot take
    saved = CheckpointStore.load(store.path_for(1))
    store.save(2, saved.model, {}, {"epoch": 2}, 1.0)

    second = await make_dpeer(role="backbone", momentum=0.5, swarm="restarted")
    assert second.anchor() != first.anchor()
    resuming = DilocoBackbone(second.optimizer, checkpoints=store, checkpoint_every=1)
    diloco = second.optimizer.diloco
    resumed = await resuming.books.resume(
        partial(restore, diloco), lambda: (diloco.epoch, diloco.state.rollback)
    )
    assert resumed is not None
    assert resumed.epoch == 1
    assert "not a diloco checkpoint" in caplog.text
    assert second.optimizer.epoch == 1
    assert second.anchor() == first.anchor()
    assert [m.tobytes() for m in diloco.outer.buffers] == [
        m.tobytes() for m in first.optimizer.diloco.outer.buffers
    ]
    assert resumed.metadata[SAMPLES_TOTAL] == 24
    assert resuming.books.samples.before(1, 0) == 24
    await resuming.close()
