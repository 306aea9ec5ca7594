"""CPU offload of the optimizer: the same training as on the device, states kept on the host,
accumulators on the host, staging memory bounded by the largest parameter, and the pause path."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from core.optim.adamw import AdamW
from core.optim.lamb import Lamb
from core.optim.moments import MomentOptimizer
from core.optim.offload import Offload
from core.project import load_manifest
from core.training.dedloc.optimizer import DedlocConfig
from core.training.local import LocalWork
from core.training.peer.recipe import build_model, build_optimizer
from core.training.peer.residency import Residency
from core.training.state import TrainingState
from core.training.trainer import Trainer
from tests.training.conftest import MakePeer
from tests.training.dedloc import test_collaborative as collab

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo" / "project.toml"


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Small models: one intra-op thread is faster, and far faster on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def fresh_model(device: str = "cpu") -> torch.nn.Module:
    torch.manual_seed(0)  # the "same seed": identical initial weights
    model = torch.nn.Sequential(
        torch.nn.Linear(96, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Linear(64, 3)
    )
    return model.to(device)


def make(kind: str, model: torch.nn.Module, states: str, offload: bool) -> MomentOptimizer:
    params = model.parameters()
    if kind == "lamb":
        return Lamb(params, 0.01, weight_decay=0.01, states=states, offload=offload)
    return AdamW(params, 3e-3, weight_decay=0.01, states=states, offload=offload)


def batches(count: int, device: str = "cpu") -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)  # the "same batches"
    made = []
    for _ in range(count):
        x = torch.randn(16, 96, generator=generator)
        made.append((x.to(device), x[:, :3].sin().to(device)))
    return made


def train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, data: list) -> list[float]:
    losses = []
    for x, y in data:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("staged", [False, True], ids=["in-place", "staged"])
@pytest.mark.parametrize("states", ["32bit", "8bit"])
@pytest.mark.parametrize("kind", ["lamb", "adamw"])
def test_offloaded_training_is_identical_to_training_on_the_device(
    kind: str, states: str, staged: bool
) -> None:
    data = batches(30)
    on_device = fresh_model()
    reference = train(on_device, make(kind, on_device, states, offload=False), data)
    offloaded = fresh_model()
    optimizer = make(kind, offloaded, states, offload=True)
    # staged: every parameter goes through the host staging buffers, as from a GPU
    optimizer.offloader = Offload(always_stage=staged)
    losses = train(offloaded, optimizer, data)
    assert reference[-1] < 0.5 * reference[0]  # it trains
    # on the CPU the update computes the same operations on the same values: bit for bit
    assert losses == reference
    for mine, theirs in zip(offloaded.parameters(), on_device.parameters(), strict=True):
        assert torch.equal(mine, theirs)
    if staged:  # two slots, each a weight and a gradient of at most the largest parameter
        largest = max(p.numel() * p.element_size() for p in offloaded.parameters())
        assert 0 < optimizer.offloader.staged_bytes <= 2 * 2 * largest


@pytest.mark.parametrize("clip", [None, 0.05])
def test_host_accumulators_and_host_gradients_give_the_same_steps(clip: float | None) -> None:
    results = []
    for offload in (False, True):
        model = fresh_model()
        state = TrainingState(model, make("lamb", model, "8bit", offload=offload))
        work = LocalWork(state, clip)
        work.zeros()
        assert work.offloaded == offload
        for epoch, (x, y) in enumerate(batches(6)):
            torch.nn.functional.mse_loss(model(x), y).backward()
            work.accumulate(16)
            if epoch % 2 == 1:
                work.apply(work.mean_gradients(32))
        assert all(p.grad is None for p in model.parameters())
        results.append([p.detach().clone() for p in model.parameters()])
    for on_device, offloaded in zip(*results, strict=True):
        torch.testing.assert_close(offloaded, on_device, rtol=0, atol=1e-7)


def test_a_non_finite_gradient_skips_the_offloaded_step() -> None:
    model = fresh_model()
    state = TrainingState(model, make("adamw", model, "8bit", offload=True))
    work = LocalWork(state, 1.0)
    before = [p.detach().clone() for p in model.parameters()]
    grads = [torch.full_like(p, float("nan")) for p in model.parameters()]
    work.apply(grads)
    for now, then in zip(model.parameters(), before, strict=True):
        assert torch.equal(now, then)


def test_offloaded_states_and_accumulators_stay_on_the_host_when_the_model_moves() -> None:
    # the pause path moves everything to the CPU and a resume back to the device (runtime's
    # _move_state): an offloaded optimizer's statistics must never follow. The "meta" device
    # stands in for an accelerator here: whatever lands there is visible by its device.
    model = fresh_model()
    optimizer = make("lamb", model, "8bit", offload=True)
    state = TrainingState(model, optimizer)
    work = LocalWork(state, None)
    work.zeros()
    train(model, optimizer, batches(2))
    optimizer.move_states(torch.device("meta"))
    work.move_to(torch.device("meta"))
    tensors = [t for s in optimizer.state.values() for t in s.values()]
    assert all(t.device.type == "cpu" for t in [*tensors, *work._accumulators])

    on_device = make("lamb", model, "8bit", offload=False)
    train(model, on_device, batches(1))
    on_device.move_states(torch.device("meta"))
    moved = [t for s in on_device.state.values() for k, t in s.items() if k != "step"]
    assert all(t.device.type == "meta" for t in moved)


def test_moving_to_the_cpu_releases_tables_and_staging_buffers() -> None:
    model = fresh_model()
    optimizer = make("adamw", model, "8bit", offload=True)
    optimizer.offloader = Offload(always_stage=True)
    train(model, optimizer, batches(2))
    assert optimizer.offloader.staged_bytes > 0
    assert optimizer.codebook._tables
    optimizer.move_states(torch.device("cpu"))
    assert optimizer.offloader.staged_bytes == 0
    assert not optimizer.codebook._tables
    train(model, optimizer, batches(1))  # and the next step rebuilds them


@pytest.mark.cuda
@pytest.mark.parametrize("states", ["32bit", "8bit"])
def test_on_cuda_offloaded_training_matches_and_leaves_no_state_on_the_gpu(states: str) -> None:
    baseline = torch.cuda.memory_allocated()
    data = batches(30, "cuda")
    on_device = fresh_model("cuda")
    reference = train(on_device, make("lamb", on_device, states, offload=False), data)
    offloaded = fresh_model("cuda")
    optimizer = make("lamb", offloaded, states, offload=True)
    losses = train(offloaded, optimizer, data)
    for mine, theirs in zip(offloaded.parameters(), on_device.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-5)
    assert abs(losses[-1] - reference[-1]) <= 1e-3 * reference[-1]
    tensors = [t for s in optimizer.state.values() for t in s.values()]
    assert all(t.device.type == "cpu" for t in tensors)
    assert all(s.weight.is_pinned() for s in optimizer.offloader._slots)
    # the pause path: model to the CPU, statistics stay there: nothing left on the GPU
    del on_device, data
    offloaded.to("cpu")
    optimizer.move_states(torch.device("cpu"))
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == baseline


def test_the_peers_move_between_devices_leaves_offloaded_statistics_on_the_host() -> None:
    # Residency.move is what a peer's pause (to the CPU) and resume (back to the GPU) run
    manifest = load_manifest(DEMO).with_training(optimizer_states="8bit", offload_optimizer=True)
    model = build_model(manifest)
    optimizer = build_optimizer(model, manifest)
    state = TrainingState(model, optimizer)
    state.ensure_optimizer_state()
    Residency(state).move(torch.device("meta"))
    assert all(p.device.type == "meta" for p in model.parameters())
    tensors = [t for s in optimizer.state.values() for t in s.values()]
    assert tensors
    assert all(t.device.type == "cpu" for t in tensors)


async def test_three_peers_with_8bit_offloaded_states_match_one_large_batch_run(
    make_peer: MakePeer,
) -> None:
    # tests/training/dedloc/test_collaborative.py's equivalence, with AdamW keeping 8-bit moments on the
    # host (the threshold lowered so that this small model's weight matrices are quantised), and
    # the state averaged twice over the network (dequantised, averaged, quantised again)
    def optimizer_for(model: torch.nn.Module) -> AdamW:
        return AdamW(model.parameters(), 0.02, weight_decay=0.0, states="8bit", offload=True,
                     min_quantised=64)  # fmt: skip

    data = collab.dataset()
    config = DedlocConfig(target_batch_size=collab.TARGET, average_state_every=5)
    peers = []
    for _ in range(3):
        model = collab.fresh_model()
        peers.append(await make_peer(model, optimizer_for(model), config))
    recorders = [collab.Recorder(data, 100 + i, peer) for i, peer in enumerate(peers)]
    epochs = 10
    curve: list[float] = []

    async def train(i: int) -> None:
        peer = peers[i]
        trainer = Trainer(peer.model, peer.optimizer, peer.bridge, recorders[i], collab.mse)
        on_epoch = (lambda _: curve.append(collab.evaluate(peer.model, data))) if i == 0 else None
        await trainer.run(until_epoch=epochs, on_epoch=on_epoch)

    await asyncio.wait_for(asyncio.gather(*(train(i) for i in range(3))), timeout=150)
    for peer in peers:
        assert [r.epoch for r in peer.optimizer.reports] == list(range(epochs))
        assert all(r.group_size == 3 and r.averaged for r in peer.optimizer.reports)
        assert list(peer.optimizer.states_averaged) == [5, 10]
        optimizer = peer.optimizer.state.optimizer
        tensors = [t for s in optimizer.state.values() for t in s.values()]
        assert any(t.dtype == torch.uint8 for t in tensors)
        assert all(t.device.type == "cpu" for t in tensors)
    for model in (p.model for p in peers[1:]):
        for mine, theirs in zip(model.parameters(), peers[0].model.parameters(), strict=True):
            torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-6)

    single = collab.fresh_model()
    optimizer = optimizer_for(single)
    reference = []
    for epoch in range(epochs):
        index = torch.cat([torch.cat(r.used[epoch]) for r in recorders])
        optimizer.zero_grad()
        collab.mse(single, (index, data[0][index], data[1][index])).backward()
        optimizer.step()
        reference.append(collab.evaluate(single, data))
    assert reference[-1] < 0.5 * reference[0]
    gaps = [abs(ours - theirs) / theirs for ours, theirs in zip(curve, reference, strict=True)]
    print(f"largest relative gap between the loss curves: {max(gaps):.2e}")
    assert max(gaps) <= 0.01, (curve, reference)
