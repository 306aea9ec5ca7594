"""The paths that only a CUDA GPU exercises: a peer's pause giving the GPU's memory back, the
trainer under autocast (fp16 loss scaling included), 8-bit states on the GPU agreeing with the CPU,
and an expert host placing its experts on the GPU. Skipped without a GPU; ``packaging/dev.py
gpu-check`` runs them on one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from core.moe.server.experts import ExpertSpec
from core.moe.server.hosted import HostedExpert, Served
from core.project import Manifest, load_manifest
from core.training.local import LocalWork
from core.training.peer.recipe import build_model, build_optimizer, mlm_loss, training_state
from core.training.peer.residency import Residency
from core.training.state import TrainingState
from core.training.trainer import Trainer
from core.worker.precision import Precision, choose_precision

pytestmark = pytest.mark.cuda

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo" / "project.toml"
GPU = torch.device("cuda")


def demo(states: str = "32bit", offload: bool = False) -> Manifest:
    manifest = load_manifest(DEMO).with_training(optimizer_states=states, offload_optimizer=offload)
    return manifest.with_training(microbatch_size=4)


def random_batches(manifest: Manifest, seed: int = 0) -> Iterator[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    size, seq = manifest.training.microbatch_size, manifest.data.seq_len
    while True:
        ids = torch.randint(5, manifest.model.vocab_size, (size, seq), generator=generator)
        masked = torch.rand(ids.shape, generator=generator) < 0.15
        labels = torch.where(masked, ids, torch.full_like(ids, -100))
        inputs = torch.where(masked, torch.full_like(ids, 4), ids)
        yield {"input_ids": inputs, "attention_mask": torch.ones_like(ids), "labels": labels}


def local_step(trainer: Trainer, local: LocalWork) -> float:
    """One microbatch and one optimizer step, as a peer alone would take them."""
    outcome = trainer.microbatch()
    assert isinstance(outcome, tuple), outcome
    size, loss = outcome
    local.accumulate(size)
    local.apply(local.mean_gradients(size))
    return loss


@pytest.mark.parametrize(("states", "offload"), [("32bit", False), ("8bit", False), ("8bit", True)])
def test_a_pause_gives_the_gpus_memory_back_and_training_goes_on(
    states: str, offload: bool
) -> None:
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    before, reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    manifest = demo(states, offload)
    torch.manual_seed(0)
    state = training_state(build_model(manifest).to(GPU), manifest)
    local = LocalWork(state, manifest.training.clip_norm or None)
    local.zeros()
    residency = Residency(state, lambda: local)
    residency.device = GPU
    trainer = Trainer(
        state.model, None, None, random_batches(manifest), mlm_loss,  # type: ignore[arg-type]
        precision=choose_precision(GPU),
    )  # fmt: skip
    assert all(p.device.type == "cuda" for p in state.model.parameters())
    local_step(trainer, local)
    assert torch.cuda.memory_allocated() > before

    residency.release()
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == before, "tensors left on the GPU after a pause"
    assert torch.cuda.memory_reserved() <= reserved, "the allocator kept its cache"

    residency.restore()
    assert all(p.device.type == "cuda" for p in state.model.parameters())
    loss = local_step(trainer, local)
    assert torch.isfinite(torch.tensor(loss))


def test_fp16_loss_scaling_skips_an_overflow_and_keeps_training() -> None:
    manifest = demo()
    torch.manual_seed(0)
    state = training_state(build_model(manifest).to(GPU), manifest)
    local = LocalWork(state, manifest.training.clip_norm or None)
    local.zeros()
    fp16 = Precision(GPU, torch.float16)
    trainer = Trainer(
        state.model, None, None, random_batches(manifest), mlm_loss,  # type: ignore[arg-type]
        precision=fp16,
    )  # fmt: skip
    assert trainer._scale is not None
    trainer._scale.value = 2.0**40  # certain to overflow fp16's gradients
    assert trainer.microbatch() is None
    assert trainer.skipped == 1
    assert trainer._scale.value == 2.0**39
    assert all(p.grad is None for p in state.model.parameters())
    trainer._scale.value = 2.0**10
    losses = [local_step(trainer, local) for _ in range(3)]
    assert all(torch.isfinite(torch.tensor(losses)))


@pytest.mark.parametrize("states", ["32bit", "8bit"])
def test_the_optimizer_on_the_gpu_takes_the_cpus_steps(states: str) -> None:
    manifest = demo(states).with_training(precision="fp32")
    results: list[list[torch.Tensor]] = []
    for device in (torch.device("cpu"), GPU):
        torch.manual_seed(0)
        model = build_model(manifest).to(device)
        # without the schedule, whose warm-up starts at a learning rate of 0
        state = TrainingState(model, build_optimizer(model, manifest))
        local = LocalWork(state, manifest.training.clip_norm or None)
        local.zeros()
        start = [p.detach().cpu().clone() for p in state.model.parameters()]
        trainer = Trainer(
            state.model, None, None, random_batches(manifest), mlm_loss,  # type: ignore[arg-type]
            precision=Precision(device, None),
        )  # fmt: skip
        for _ in range(3):
            local_step(trainer, local)
        results.append([p.detach().cpu() for p in state.model.parameters()])
    # kernels sum in another order on the GPU (and an 8-bit code may round the other way), so the
    # updates agree closely rather than exactly: measured against the size of the update itself
    cpu, gpu = (torch.cat([p.flatten() for p in r]) for r in results)
    update = cpu - torch.cat([p.flatten() for p in start])
    assert update.norm() > 0
    assert (gpu - cpu).norm() <= 0.05 * update.norm()


def test_a_hosted_expert_computes_on_the_gpu_and_moves_off_it() -> None:
    served = Served()
    expert = HostedExpert.build(ExpertSpec(hidden=64), "ffn.0.0", served, GPU)
    inputs = torch.randn(8, 64)
    outputs = expert.forward([inputs])
    assert outputs[0].device.type == "cpu"  # replies leave as CPU tensors
    grads = expert.backward([inputs], [torch.ones(8, 64)])
    assert grads[0].device.type == "cpu"
    assert all(p.device.type == "cuda" for p in expert.module.parameters())
    moments = [
        v
        for entry in expert.optimizer.state.values()
        for k, v in entry.items()
        if isinstance(v, torch.Tensor) and k != "step"
    ]
    assert moments
    assert all(t.device.type == "cuda" for t in moments)
    assert served.forward_samples == 8
    assert served.backward_samples == 8

    expert.move_to(torch.device("cpu"))
    assert all(p.device.type == "cpu" for p in expert.module.parameters())
    assert all(
        v.device.type == "cpu"
        for entry in expert.optimizer.state.values()
        for v in entry.values()
        if isinstance(v, torch.Tensor)
    )
    expert.move_to(GPU)
    assert expert.forward([inputs])[0].shape == (8, 64)
