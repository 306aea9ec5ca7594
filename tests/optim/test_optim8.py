"""8-bit optimizer states for LAMB and AdamW: AdamW against torch's, loss curves against 32-bit,
the state's layout, checkpoints, snapshots for newcomers, state averaging, and the manifest."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from core.optim.adamw import AdamW
from core.optim.lamb import Lamb
from core.optim.moments import MomentOptimizer
from core.project import ManifestError, load_manifest
from core.training.checkpoints import CheckpointStore
from core.training.local import LocalWork
from core.training.peer.recipe import build_model, build_optimizer
from core.training.state import TrainingState
from core.util.errors import ConfigError

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo" / "project.toml"
# the curve test's microbatch: 4 samples of 16 tokens over a 64-token vocabulary in which each
# token follows from the one before (a fixed permutation): small enough for 4 x 200 steps to take
# seconds, and a task whose loss falls from 8.3 to about 4.3 in those steps
BATCH, SEQ, VOCAB, STEPS, WINDOW = 4, 16, 64, 200, 50


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """These models are too small for torch's intra-op threads to pay, and on a busy machine two
    threads spin against each other: 200 AdamW steps took 52 s of CPU with 2 threads, 5 s with 1."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def demo_batches(steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    follows = torch.randperm(VOCAB, generator=generator) + 1
    batches = []
    for _ in range(steps):
        ids = torch.empty(BATCH, SEQ, dtype=torch.long)
        ids[:, 0] = torch.randint(1, VOCAB + 1, (BATCH,), generator=generator)
        for t in range(1, SEQ):
            ids[:, t] = follows[ids[:, t - 1] - 1]
        masked = torch.rand(BATCH, SEQ, generator=generator) < 0.15
        labels = torch.where(masked, ids, torch.full_like(ids, -100))
        batches.append((torch.where(masked, torch.zeros_like(ids), ids), labels))
    return batches


def make(kind: str, params: object, states: str, **extra: object) -> MomentOptimizer:
    if kind == "lamb":
        return Lamb(params, 0.01, weight_decay=0.01, states=states, **extra)  # type: ignore[arg-type]
    return AdamW(params, 3e-3, weight_decay=0.01, eps=1e-6, states=states, **extra)  # type: ignore[arg-type]


def train_demo(
    kind: str, states: str, batches: list[tuple[torch.Tensor, torch.Tensor]]
) -> list[float]:
    model = build_model(load_manifest(DEMO))
    optimizer = make(kind, model.parameters(), states)
    losses = []
    for ids, labels in batches:
        loss = model(ids, None, labels).loss
        assert loss is not None
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["lamb", "adamw"])
def test_8bit_loss_curve_stays_within_2_percent_of_32bit_over_200_steps(kind: str) -> None:
    batches = demo_batches(STEPS)
    full = train_demo(kind, "32bit", batches)
    eight = train_demo(kind, "8bit", batches)
    means = [
        (sum(full[i : i + WINDOW]) / WINDOW, sum(eight[i : i + WINDOW]) / WINDOW)
        for i in range(0, STEPS, WINDOW)
    ]
    assert means[-1][0] < 0.6 * full[0]  # it really trains
    gaps = [abs(e - f) / f for f, e in means]
    print(f"{kind}: 50-step mean losses 32-bit/8-bit {means}, largest gap {max(gaps):.2%}")
    assert max(gaps) <= 0.02, means


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_adamw_32bit_matches_torchs_adamw(weight_decay: float) -> None:
    generator = torch.Generator().manual_seed(0)
    start = torch.randn(64, 80, generator=generator)
    ours, theirs = torch.nn.Parameter(start.clone()), torch.nn.Parameter(start.clone())
    mine = AdamW([ours], 1e-2, weight_decay=weight_decay)
    reference = torch.optim.AdamW([theirs], 1e-2, weight_decay=weight_decay)
    for _ in range(20):
        grad = torch.randn(start.shape, generator=generator)
        ours.grad, theirs.grad = grad.clone(), grad.clone()
        mine.step()
        reference.step()
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_large_parameters_keep_8bit_codes_and_small_ones_32bit_moments() -> None:
    big, small = torch.nn.Parameter(torch.randn(100, 50)), torch.nn.Parameter(torch.randn(10))
    optimizer = Lamb([big, small], states="8bit")
    big.grad, small.grad = torch.randn_like(big), torch.randn_like(small)
    optimizer.step()
    assert sorted(optimizer.state[big]) == [
        "exp_avg_absmax", "exp_avg_codes", "exp_avg_sq_absmax", "exp_avg_sq_codes", "step",
    ]  # fmt: skip
    assert optimizer.state[big]["exp_avg_codes"].dtype == torch.uint8
    assert sorted(optimizer.state[small]) == ["exp_avg", "exp_avg_sq", "step"]
    stored = sum(t.numel() * t.element_size() for t in optimizer.state[big].values())
    assert stored / big.numel() < 2.1  # bytes per parameter, against 8 for 32-bit moments


def stepped(
    states: str, kind: str = "lamb", steps: int = 3
) -> tuple[torch.nn.Module, MomentOptimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(96, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4))
    optimizer = make(kind, model.parameters(), states)
    for _ in range(steps):
        model(torch.randn(8, 96)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    return model, optimizer


def continue_training(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> torch.Tensor:
    torch.manual_seed(5)
    for _ in range(3):
        model(torch.randn(8, 96)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def test_8bit_state_survives_a_checkpoint_round_trip(tmp_path: Path) -> None:
    model, optimizer = stepped("8bit")
    store = CheckpointStore(tmp_path)
    path = store.save(3, model.state_dict(), optimizer.state_dict(), {}, 1.0)
    assert path is not None
    checkpoint = CheckpointStore.load(path)
    resumed_model, resumed = stepped("8bit", steps=0)
    resumed_model.load_state_dict(checkpoint.model)
    resumed.load_state_dict(checkpoint.optimizer)
    first = resumed.param_groups[0]["params"][0]
    assert resumed.state[first]["exp_avg_codes"].dtype == torch.uint8
    assert torch.equal(
        continue_training(resumed_model, resumed), continue_training(model, optimizer)
    )


def test_a_checkpoint_converts_between_32bit_and_8bit_states() -> None:
    _, full = stepped("32bit")
    _, eight = stepped("8bit", steps=0)
    eight.load_state_dict(copy.deepcopy(full.state_dict()))
    _, back = stepped("32bit", steps=0)
    back.load_state_dict(copy.deepcopy(eight.state_dict()))
    for p, q, r in zip(
        full.param_groups[0]["params"], eight.param_groups[0]["params"], back.param_groups[0]["params"],
        strict=True,
    ):  # fmt: skip
        dense = eight.dense_state(q)
        for key in ("exp_avg", "exp_avg_sq"):
            scale = full.state[p][key].abs().max()
            torch.testing.assert_close(dense[key], full.state[p][key], rtol=0.03, atol=0.01 * scale)
            assert back.state[r][key].dtype == torch.float32
        assert int(back.state[r]["step"]) == 3


def test_absmax_keeps_float32_precision_for_half_precision_parameters() -> None:
    p = torch.nn.Parameter(torch.randn(5000).to(torch.bfloat16))
    optimizer = AdamW([p], states="8bit")
    p.grad = torch.randn_like(p) * 1.2345
    optimizer.step()
    saved = copy.deepcopy(optimizer.state_dict())
    again = AdamW([torch.nn.Parameter(p.detach().clone())], states="8bit")
    again.load_state_dict(saved)
    state = next(iter(again.state.values()))
    assert state["exp_avg_absmax"].dtype == torch.float32
    assert torch.equal(state["exp_avg_absmax"], optimizer.state[p]["exp_avg_absmax"])


def test_a_state_that_does_not_fit_is_refused_with_a_clear_error() -> None:
    _, optimizer = stepped("8bit")
    saved = copy.deepcopy(optimizer.state_dict())
    bad = copy.deepcopy(saved)
    bad["state"][0]["exp_avg_absmax"] = -bad["state"][0]["exp_avg_absmax"] - 1
    with pytest.raises(ValueError, match="non-negative"):
        optimizer.load_state_dict(bad)
    bad = copy.deepcopy(saved)
    bad["state"][0]["exp_avg_codes"] = bad["state"][0]["exp_avg_codes"][:-1]
    with pytest.raises(ValueError, match="uint8 values"):
        optimizer.load_state_dict(bad)


def test_snapshots_carry_the_8bit_codes_and_load_round_trips() -> None:
    model, optimizer = stepped("8bit")
    state = TrainingState(model, optimizer)
    state.epoch = 4
    epoch, _, arrays = state.snapshot()
    assert any(a.dtype == np.uint8 for a in arrays)
    other_model, other = stepped("8bit", steps=0)
    other_state = TrainingState(other_model, other)
    other_state.load(epoch, arrays)
    assert other_state.epoch == 4
    for mine, theirs in zip(other_state.averaged_tensors(), state.averaged_tensors(), strict=True):
        assert torch.equal(mine, theirs)
    assert torch.equal(continue_training(other_model, other), continue_training(model, optimizer))


def test_load_refuses_a_snapshot_of_the_other_layout_and_changes_nothing() -> None:
    model, full = stepped("32bit")
    _, _, arrays32 = TrainingState(model, full).snapshot()
    model8, eight = stepped("8bit")
    state8 = TrainingState(model8, eight)
    before = [t.clone() for t in state8.averaged_tensors()]
    with pytest.raises(ValueError, match="optimizer_states"):
        state8.load(9, arrays32)
    _, _, arrays8 = state8.snapshot()
    codes = next(i for i, a in enumerate(arrays8) if a.dtype == np.uint8)
    forged = list(arrays8)
    forged[codes] = arrays8[codes].astype(np.float32)  # floats where codes belong
    with pytest.raises(ValueError, match="optimizer_states"):
        state8.load(9, forged)
    forged = list(arrays8)
    absmax = codes - 1  # keys sorted: exp_avg_absmax just before exp_avg_codes
    forged[absmax] = -np.abs(arrays8[absmax]) - 1
    with pytest.raises(ValueError, match="non-negative"):
        state8.load(9, forged)
    assert state8.epoch == 0
    for now, then in zip(state8.averaged_tensors(), before, strict=True):
        assert torch.equal(now, then)


def test_the_demo_states_download_is_smaller_with_8bit() -> None:
    manifest = load_manifest(DEMO)
    sizes = {}
    for states in ("32bit", "8bit"):
        model = build_model(manifest)
        optimizer = build_optimizer(model, manifest.with_training(optimizer_states=states))
        _, _, arrays = TrainingState(model, optimizer).snapshot()
        sizes[states] = sum(a.nbytes for a in arrays)
    print(f"demo state download: {sizes}")
    assert sizes["8bit"] < 0.6 * sizes["32bit"]


def test_state_averaging_of_two_8bit_optimizers_gives_the_quantised_mean() -> None:
    model_a, a = stepped("8bit", kind="adamw")
    model_b, b = stepped("8bit", kind="adamw", steps=5)
    work_a = LocalWork(TrainingState(model_a, a), None)
    work_b = LocalWork(TrainingState(model_b, b), None)
    copies_a, copies_b = work_a.state_copies(), work_b.state_copies()
    assert all(c.dtype == torch.float32 for c in copies_a)
    mean = [(x + y) / 2 for x, y in zip(copies_a, copies_b, strict=True)]
    work_a.write_state(mean)

    # what quantising the mean gives, computed apart: a fresh optimizer loads the mean's moments
    _, expected = stepped("8bit", kind="adamw", steps=0)
    expected_state = TrainingState(stepped("8bit", kind="adamw", steps=0)[0], expected)
    expected_state.write_averaged(mean)
    params = len(work_a.state.parameters)
    assert int(a.state[a.param_groups[0]["params"][0]]["step"]) == 4  # (3 + 5) / 2
    for p, q in zip(work_a.state.parameters, expected_state.parameters, strict=True):
        assert torch.equal(p, q)
        for key, value in a.state[p].items():
            assert torch.equal(value, expected.state[q][key]), key
    # and the quantised mean is close to the mean itself
    again = work_a.state_copies()
    for got, want in zip(again[params:], mean[params:], strict=True):
        torch.testing.assert_close(
            got, want, rtol=0.03, atol=0.01 * float(want.abs().max()) + 1e-12
        )


def test_the_manifest_validates_the_settings(tmp_path: Path) -> None:
    manifest = load_manifest(DEMO)
    assert manifest.training.optimizer_states == "32bit"
    assert manifest.training.offload_optimizer is False
    with pytest.raises(ManifestError, match=r"training.optimizer_states: must be one of"):
        manifest.with_training(optimizer_states="4bit")
    with pytest.raises(ManifestError, match=r"training.optimizer_states: needs training.optimizer"):
        manifest.with_training(optimizer="sgd", optimizer_states="8bit")
    with pytest.raises(
        ManifestError, match=r"training.offload_optimizer: needs training.optimizer"
    ):
        manifest.with_training(optimizer="adam", offload_optimizer=True)
    with pytest.raises(ManifestError, match=r"training.offload_optimizer: expected boolean"):
        manifest.with_training(offload_optimizer="yes")


def test_build_optimizer_wires_the_settings() -> None:
    manifest = load_manifest(DEMO)
    model = build_model(manifest)
    lamb = build_optimizer(model, manifest.with_training(optimizer_states="8bit"))
    assert isinstance(lamb, Lamb)
    assert (lamb.states, lamb.offload) == ("8bit", False)
    adamw = build_optimizer(
        model, manifest.with_training(optimizer="adamw", offload_optimizer=True)
    )
    assert isinstance(adamw, AdamW)
    assert (adamw.states, adamw.offload) == ("32bit", True)
    # 32-bit AdamW on the device stays torch's, as before
    assert (
        type(build_optimizer(model, manifest.with_training(optimizer="adamw"))) is torch.optim.AdamW
    )
    assert issubclass(ManifestError, ConfigError)
