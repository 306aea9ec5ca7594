"""Expert checkpoints: written whole or not at all, the newest readable one restored (damaged ones
skipped with a log line), retention, and the saver's policy (by time, by updates, at close)."""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import torch

from core.moe.server.backend import ExpertBackend
from core.moe.server.checkpoints import CheckpointSaver, ExpertCheckpointError, ExpertCheckpoints
from core.moe.server.experts import ExpertSpec
from core.util.clock import FakeClock
from core.worker.bridge import TrainingBridge

SPEC = ExpertSpec(kind="linear", hidden=4, optimizer="adam", lr=0.01, max_batch=8)


def learn(expert: ExpertBackend, steps: int = 1) -> None:
    for _ in range(steps):
        expert.backward([torch.randn(3, 4)], [torch.randn(3, 4)])


def assert_same_state(a: ExpertBackend, b: ExpertBackend) -> None:
    assert a.updates == b.updates
    for (name, mine), (_, theirs) in zip(
        a.module.state_dict().items(), b.module.state_dict().items(), strict=True
    ):
        assert torch.equal(mine, theirs), name
    sa, sb = a.optimizer.state_dict(), b.optimizer.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    assert sa["state"].keys() == sb["state"].keys()
    for key in sa["state"]:
        for field in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(sa["state"][key][field], sb["state"][key][field])


def test_the_newest_checkpoint_is_restored_into_a_fresh_expert(tmp_path: Path) -> None:
    store = ExpertCheckpoints(tmp_path, keep=5)
    expert = SPEC.backend("ffn.0.1")
    learn(expert, 2)
    store.save(expert)
    learn(expert, 3)
    newest = store.save(expert)
    fresh = SPEC.backend("ffn.0.1")
    assert fresh.updates == 0
    assert store.restore(fresh) == newest
    assert_same_state(fresh, expert)
    assert store.uids() == ["ffn.0.1"]
    assert store.restore(SPEC.backend("ffn.0.2")) is None  # nothing saved for it


def test_newest_means_most_updates_then_latest(tmp_path: Path) -> None:
    store = ExpertCheckpoints(tmp_path, keep=5)
    expert = SPEC.backend("ffn.1.1")
    learn(expert, 3)
    most = store.save(expert)
    expert.updates = 1  # an older history saved later (another server's, say) does not win
    store.save(expert)
    assert store.files("ffn.1.1")[0] == most
    fresh = SPEC.backend("ffn.1.1")
    store.restore(fresh)
    assert fresh.updates == 3


def test_a_damaged_newest_checkpoint_is_skipped_with_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = ExpertCheckpoints(tmp_path, keep=5)
    expert = SPEC.backend("ffn.2.0")
    learn(expert)
    good = store.save(expert)
    snapshot = SPEC.backend("ffn.2.0")
    snapshot.load_state_dict(copy.deepcopy(expert.state_dict()))  # Adam updates in place
    learn(expert)
    truncated = store.save(expert)
    truncated.write_bytes(truncated.read_bytes()[:100])
    learn(expert)
    garbage = store.save(expert)
    garbage.write_bytes(b"not a checkpoint at all")
    fresh = SPEC.backend("ffn.2.0")
    with caplog.at_level(logging.WARNING, logger="core.moe.server.checkpoints"):
        assert store.restore(fresh) == good
    assert_same_state(fresh, snapshot)
    skipped = [r.getMessage() for r in caplog.records if "skipping damaged" in r.getMessage()]
    assert len(skipped) == 2
    assert str(garbage) in skipped[0]
    assert str(truncated) in skipped[1]


def test_a_checkpoint_of_another_expert_or_shape_is_not_loaded(tmp_path: Path) -> None:
    store = ExpertCheckpoints(tmp_path)
    other = SPEC.backend("ffn.0.0")
    learn(other)
    path = store.save(other)
    (tmp_path / "ffn.0.3").mkdir()
    os.replace(path, tmp_path / "ffn.0.3" / path.name)  # a copy under the wrong uid
    target = SPEC.backend("ffn.0.3")
    before = {k: v.clone() for k, v in target.module.state_dict().items()}
    assert store.restore(target) is None
    # a checkpoint of a wider expert (the manifest changed) fails half way: nothing is kept of it
    wide = ExpertSpec(kind="linear", hidden=8, optimizer="adam").backend("ffn.0.3")
    wide.backward([torch.randn(2, 8)], [torch.randn(2, 8)])
    store.save(wide)
    assert store.restore(target) is None
    for name, value in target.module.state_dict().items():
        assert torch.equal(value, before[name])
    assert target.updates == 0


def test_a_write_that_dies_half_way_leaves_no_checkpoint_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ExpertCheckpoints(tmp_path)
    expert = SPEC.backend("ffn.3.3")
    learn(expert)
    first = store.save(expert)
    learn(expert)

    def dies(obj: Any, out: Any) -> None:
        out.write(b"PK\x03\x04 half a zip")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", dies)
    with pytest.raises(OSError, match="disk full"):
        store.save(expert)
    monkeypatch.undo()
    assert store.files("ffn.3.3") == [first]
    assert sorted(p.name for p in (tmp_path / "ffn.3.3").iterdir()) == [first.name]
    # a temporary that a killed process left behind is never taken for a checkpoint
    (tmp_path / "ffn.3.3" / ".expert-abc.tmp").write_bytes(b"half")
    fresh = SPEC.backend("ffn.3.3")
    assert store.restore(fresh) == first
    assert fresh.updates == 1


def test_only_the_newest_few_are_kept_and_non_finite_weights_are_never_written(
    tmp_path: Path,
) -> None:
    store = ExpertCheckpoints(tmp_path, keep=2)
    expert = SPEC.backend("ffn.1.0")
    paths = []
    for _ in range(4):
        learn(expert)
        paths.append(store.save(expert))
    assert store.files("ffn.1.0") == [paths[3], paths[2]]
    with torch.no_grad():
        next(expert.module.parameters()).fill_(float("nan"))
    with pytest.raises(ExpertCheckpointError, match="non-finite"):
        store.save(expert)
    assert store.files("ffn.1.0") == [paths[3], paths[2]]


@pytest.fixture
async def bridge() -> AsyncIterator[TrainingBridge]:
    bridge = TrainingBridge("checkpoints-test")
    yield bridge
    await bridge.aclose()


async def test_the_saver_saves_experts_that_learned_by_time_by_updates_and_at_close(
    tmp_path: Path, bridge: TrainingBridge
) -> None:
    clock = FakeClock(monotonic_start=100.0)
    store = ExpertCheckpoints(tmp_path, keep=10)
    a, b = SPEC.backend("ffn.0.0"), SPEC.backend("ffn.0.1")
    saver = CheckpointSaver(store, bridge, [a, b], interval=60.0, updates=3, clock=clock)
    learn(a)
    assert await saver.save_due() == []  # learned, but neither 60 s nor 3 updates yet
    clock.advance(61)
    assert await saver.save_due() == ["ffn.0.0"]  # b never learned: nothing to save
    learn(b, 3)
    assert await saver.save_due() == ["ffn.0.1"]  # 3 updates, long before 60 s
    assert await saver.save_due() == []
    learn(a)
    assert await saver.close(save=False) == []  # killed: the last update is not saved
    assert len(store.files("ffn.0.0")) == 1
    saver = CheckpointSaver(store, bridge, [a, b], interval=0.0)
    learn(a)
    assert await saver.close() == ["ffn.0.0"]  # a clean stop saves what learned
    fresh = SPEC.backend("ffn.0.0")
    store.restore(fresh)
    assert_same_state(fresh, a)
    assert saver.saves == 1
