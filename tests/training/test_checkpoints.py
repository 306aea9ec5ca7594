"""Checkpoints: round trips, refusing NaN, pruning, atomic writes, damaged files, resuming."""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from core.optim.lamb import Lamb
from core.optim.schedule import albert_schedule
from core.training.checkpoints import Checkpoint, CheckpointStore
from core.training.errors import CheckpointError


def tiny_state(value: float = 1.0) -> dict[str, Any]:
    return {
        "weight": torch.full((2, 3), value),
        "bias": torch.arange(3, dtype=torch.float32),
        "count": torch.tensor(7),
    }


def files_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "ckpt")
    model = tiny_state(0.5)
    optimizer = {"state": {0: {"step": 3, "exp_avg": torch.ones(2)}}, "param_groups": [{"lr": 0.1}]}
    metadata = {"run": "albert", "samples": 4096, "ok": True, "nested": {"a": [1, 2.5, None]}}
    before = time.time()
    path = store.save(12, model, optimizer, metadata, loss=2.25)

    assert path == tmp_path / "ckpt" / "checkpoint-00000012.pt"
    loaded = CheckpointStore.load(path)
    assert isinstance(loaded, Checkpoint)
    assert loaded.epoch == 12
    assert loaded.loss == 2.25
    assert loaded.metadata == metadata
    assert before <= loaded.saved_at <= time.time()
    assert loaded.model.keys() == model.keys()
    assert all(torch.equal(loaded.model[k], v) for k, v in model.items())
    assert loaded.optimizer["state"][0]["step"] == 3
    assert torch.equal(loaded.optimizer["state"][0]["exp_avg"], torch.ones(2))
    assert store.latest() == path
    assert store.list() == [path]


def test_a_missing_loss_is_allowed(tmp_path: Path) -> None:
    path = CheckpointStore(tmp_path).save(0, tiny_state(), {}, {}, loss=None)
    assert path is not None
    assert CheckpointStore.load(path).loss is None


@pytest.mark.parametrize("loss", [math.nan, math.inf, -math.inf])
def test_a_non_finite_loss_is_never_written(
    tmp_path: Path, loss: float, caplog: pytest.LogCaptureFixture
) -> None:
    store = CheckpointStore(tmp_path / "ckpt")
    with caplog.at_level(logging.WARNING, logger="core.training.checkpoints"):
        assert store.save(1, tiny_state(), {}, {}, loss=loss) is None
    assert files_in(tmp_path / "ckpt") == []
    assert store.latest() is None
    assert any("loss" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_weights_are_never_written(
    tmp_path: Path, bad: float, caplog: pytest.LogCaptureFixture
) -> None:
    store = CheckpointStore(tmp_path)
    good = store.save(1, tiny_state(), {}, {}, loss=1.0)
    model = tiny_state()
    model["bias"][1] = bad
    with caplog.at_level(logging.WARNING, logger="core.training.checkpoints"):
        assert store.save(2, model, {}, {}, loss=1.0) is None
    assert store.list() == [good]
    assert files_in(tmp_path) == ["checkpoint-00000001.pt"]
    assert any("model['bias']" in r.getMessage() for r in caplog.records)


def test_non_finite_optimizer_state_is_never_written(tmp_path: Path) -> None:
    optimizer = {"state": {0: {"exp_avg_sq": torch.tensor([1.0, math.inf])}}, "param_groups": []}
    assert CheckpointStore(tmp_path).save(1, tiny_state(), optimizer, {}, loss=1.0) is None
    assert files_in(tmp_path) == []


def test_only_the_newest_checkpoints_are_kept(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=2)
    for epoch in range(1, 5):
        store.save(epoch, tiny_state(epoch), {}, {}, loss=1.0)
    assert [p.name for p in store.list()] == ["checkpoint-00000003.pt", "checkpoint-00000004.pt"]
    assert files_in(tmp_path) == ["checkpoint-00000003.pt", "checkpoint-00000004.pt"]
    latest = store.latest()
    assert latest is not None
    assert torch.equal(CheckpointStore.load(latest).model["weight"], torch.full((2, 3), 4.0))


def test_order_is_by_epoch_not_by_write_time_or_name(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=3)
    # Past 8 digits the names no longer sort like the epochs do.
    for epoch in (100_000_000, 2, 20_000_000):
        store.save(epoch, tiny_state(), {}, {}, loss=1.0)
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    assert [p.name for p in store.list()] == [
        "checkpoint-00000002.pt",
        "checkpoint-20000000.pt",
        "checkpoint-100000000.pt",
    ]
    assert store.latest() == tmp_path / "checkpoint-100000000.pt"
    # An epoch older than all those kept is still kept, until the next save prunes it.
    older = store.save(1, tiny_state(), {}, {}, loss=1.0)
    assert older is not None
    assert older.exists()
    assert len(store.list()) == 4
    store.save(30_000_000, tiny_state(), {}, {}, loss=1.0)
    assert [p.name for p in store.list()] == [
        "checkpoint-20000000.pt",
        "checkpoint-30000000.pt",
        "checkpoint-100000000.pt",
    ]


def test_an_empty_or_absent_directory_has_no_checkpoints(tmp_path: Path) -> None:
    assert CheckpointStore(tmp_path / "absent").list() == []
    assert CheckpointStore(tmp_path).latest() is None


@pytest.mark.parametrize("keep", [0, -1])
def test_keep_must_be_at_least_one(tmp_path: Path, keep: int) -> None:
    with pytest.raises(CheckpointError, match="at least 1"):
        CheckpointStore(tmp_path, keep=keep)


def test_writes_leave_no_temporary_files(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=5)
    (tmp_path / ".checkpoint-left-by-a-crash.tmp").write_bytes(b"x" * 100)
    for epoch in range(3):
        store.save(epoch, tiny_state(), {}, {}, loss=1.0)
        store.save(epoch, tiny_state(2.0), {}, {}, loss=0.5)  # the same epoch again replaces it
    assert files_in(tmp_path) == [f"checkpoint-{e:08d}.pt" for e in range(3)]
    assert CheckpointStore.load(tmp_path / "checkpoint-00000001.pt").loss == 0.5


def test_a_failed_write_leaves_the_previous_checkpoint_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CheckpointStore(tmp_path)
    first = store.save(1, tiny_state(), {}, {}, loss=1.0)

    def disk_full(obj: object, f: Any) -> None:
        f.write(b"PK\x03\x04 half a checkpoint")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(CheckpointError, match=r"checkpoint-00000002\.pt.*No space left"):
        store.save(2, tiny_state(), {}, {}, loss=1.0)
    monkeypatch.undo()
    assert files_in(tmp_path) == ["checkpoint-00000001.pt"]
    assert first is not None
    assert CheckpointStore.load(first).epoch == 1


def test_metadata_must_be_plain_data(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    with pytest.raises(CheckpointError, match=r"metadata\['where'\] is a (Posix|Windows)Path"):
        store.save(1, tiny_state(), {}, {"where": tmp_path}, loss=1.0)
    with pytest.raises(CheckpointError, match="not a str"):
        store.save(1, tiny_state(), {}, {"ok": {3: "x"}}, loss=1.0)
    assert files_in(tmp_path) == []


def test_a_truncated_file_is_reported_by_path(tmp_path: Path) -> None:
    path = CheckpointStore(tmp_path).save(3, tiny_state(), {}, {"a": 1}, loss=1.0)
    assert path is not None
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=str(path)):
        CheckpointStore.load(path)


def test_missing_and_foreign_files_are_reported_by_path(tmp_path: Path) -> None:
    missing = tmp_path / "checkpoint-00000009.pt"
    with pytest.raises(CheckpointError, match=f"no checkpoint at {missing}"):
        CheckpointStore.load(missing)

    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"this is not a zip archive at all")
    with pytest.raises(CheckpointError, match=str(garbage)):
        CheckpointStore.load(garbage)

    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.ones(2)}, foreign)
    with pytest.raises(CheckpointError, match=f"{foreign} is not a Barnraise checkpoint"):
        CheckpointStore.load(foreign)


def test_an_unknown_format_or_bad_fields_are_refused(tmp_path: Path) -> None:
    path = CheckpointStore(tmp_path).save(1, tiny_state(), {}, {}, loss=1.0)
    assert path is not None
    data = torch.load(path, weights_only=True)
    torch.save({**data, "format": 2}, path)
    with pytest.raises(CheckpointError, match="format 2"):
        CheckpointStore.load(path)
    torch.save({**data, "epoch": "one"}, path)
    with pytest.raises(CheckpointError, match="wrong type"):
        CheckpointStore.load(path)
    del data["optimizer"]
    torch.save(data, path)
    with pytest.raises(CheckpointError, match="lacks optimizer"):
        CheckpointStore.load(path)


def make_run(seed: int) -> tuple[torch.nn.Module, Lamb, torch.optim.lr_scheduler.LambdaLR]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = Lamb(model.parameters(), lr=0.01, weight_decay=0.01)
    return model, optimizer, albert_schedule(optimizer, warmup_steps=2, total_steps=20)


def train(
    run: tuple[torch.nn.Module, Lamb, torch.optim.lr_scheduler.LambdaLR],
    batches: list[tuple[torch.Tensor, torch.Tensor]],
) -> None:
    model, optimizer, scheduler = run
    for x, y in batches:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        scheduler.step()


def test_a_fresh_peer_resumes_from_a_checkpoint_exactly(tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(0)
    batches = [
        (torch.randn(16, 4, generator=gen), torch.randn(16, 2, generator=gen)) for _ in range(6)
    ]
    original = make_run(seed=1)
    train(original, batches[:3])
    model, optimizer, scheduler = original
    path = CheckpointStore(tmp_path).save(
        3,
        model.state_dict(),
        optimizer.state_dict(),
        {"scheduler": scheduler.state_dict()},
        loss=1.0,
    )
    assert path is not None

    resumed = make_run(seed=2)  # other initial weights: only the checkpoint can make them agree
    checkpoint = CheckpointStore.load(path)
    resumed[0].load_state_dict(checkpoint.model)
    resumed[1].load_state_dict(checkpoint.optimizer)
    resumed[2].load_state_dict(checkpoint.metadata["scheduler"])

    train(original, batches[3:])
    train(resumed, batches[3:])
    pairs = list(zip(original[0].parameters(), resumed[0].parameters(), strict=True))
    assert all(torch.equal(a, b) for a, b in pairs)
    assert resumed[1].param_groups[0]["lr"] == original[1].param_groups[0]["lr"]


def test_a_trainer_starts_from_a_diloco_checkpoint_and_a_foreign_one_is_refused_by_path(
    tmp_path: Path,
) -> None:
    """A diloco checkpoint holds the outer parameters as its model and the inner optimizer beside
    the outer state: a trainer takes both (the swarm's outer state when it joins). One of another
    model is refused, saying which file and why."""
    from core.project import load_manifest
    from core.swarm.demo_data import DEMO_MANIFEST
    from core.training.diloco.state import DilocoState
    from core.training.peer.recipe import build_model, load_checkpoint, training_state

    manifest = load_manifest(DEMO_MANIFEST).with_training(mode="diloco")
    torch.manual_seed(0)
    written = training_state(build_model(manifest), manifest)
    diloco = DilocoState(written, outer_lr=0.7, outer_momentum=0.9, overlap=False, sparse=False,
                         clip_norm=1.0)  # fmt: skip
    for p in written.parameters:
        p.grad = torch.full_like(p, 0.01)
    diloco.inner_step()  # inner moments that are not zero
    store = CheckpointStore(tmp_path / "diloco")
    path = store.save(7, diloco.model_state(), diloco.outer_state(), {"mode": "diloco"}, None)
    assert path is not None

    torch.manual_seed(1)  # other initial weights: only the checkpoint can make them agree
    started = training_state(build_model(manifest), manifest)
    load_checkpoint(started, path)
    assert started.epoch == 7
    for anchor, p in zip(diloco.anchor, started.parameters, strict=True):
        assert np.array_equal(anchor, p.detach().numpy().reshape(anchor.shape))
    inner = written.optimizer.state_dict()["state"]
    taken = started.optimizer.state_dict()["state"]
    assert inner
    assert inner.keys() == taken.keys()
    for key, moments in inner.items():
        assert all(torch.equal(v, taken[key][k]) for k, v in moments.items())

    other = dataclasses.replace(manifest, model=dataclasses.replace(manifest.model, hidden_size=64))
    foreign = training_state(build_model(other), other)
    with pytest.raises(CheckpointError, match=f"cannot start from {path}: its model is not"):
        load_checkpoint(foreign, path)
