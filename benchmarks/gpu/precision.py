"""Mixed precision check: the demo model trained on one device in fp32, bf16 and fp16.

    python -m benchmarks.gpu.precision --device cuda --steps 60 --json out.json

Runs the trainer's real microbatch path (autocast, fp16 loss scaling and unscaling) and the
collaborative optimizer's local work (accumulating, the mean gradient, clipping, the LAMB step) on
random-token masked-LM batches, without a network. Reports samples/s and the loss curve per
precision, so that bf16 and fp16 can be checked against fp32 on a GPU. On a CPU only fp32 runs.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.kit.harness import ROOT, emit
from core.project import load_manifest
from core.training.local import LocalWork
from core.training.peer.recipe import build_model, build_optimizer, mlm_loss
from core.training.state import TrainingState
from core.training.trainer import Trainer
from core.worker.precision import choose_precision

GOAL_LOSS_GAP = 0.05
MANIFEST = ROOT / "resources" / "demo" / "project.toml"


def batches(vocab: int, seq: int, size: int, seed: int) -> Any:
    generator = torch.Generator().manual_seed(seed)
    # a learnable task: every sequence repeats one short random pattern
    while True:
        pattern = torch.randint(5, vocab, (size, 8), generator=generator)
        ids = pattern.repeat(1, seq // 8)
        labels = torch.full_like(ids, -100)
        masked = torch.rand(ids.shape, generator=generator) < 0.15
        labels[masked] = ids[masked]
        inputs = ids.clone()
        inputs[masked] = 4
        yield {"input_ids": inputs, "attention_mask": torch.ones_like(ids), "labels": labels}


def run(requested: str, args: argparse.Namespace) -> dict[str, Any]:
    manifest = load_manifest(MANIFEST)
    precision = choose_precision(torch.device(args.device), requested)
    model = build_model(manifest).to(precision.device)
    state = TrainingState(model, build_optimizer(model, manifest))
    local = LocalWork(state, manifest.training.clip_norm)
    local.zeros()
    data = batches(manifest.model.vocab_size, manifest.data.seq_len, args.microbatch, 0)
    trainer = Trainer(model, None, None, data, mlm_loss, precision=precision)  # type: ignore[arg-type]
    losses, started, samples = [], time.perf_counter(), 0
    for step in range(args.steps):
        total, count, got = 0.0, 0, 0
        for _ in range(args.accumulate):
            outcome = trainer.microbatch()
            if isinstance(outcome, tuple):
                local.accumulate(outcome[0])
                total, count, got = total + outcome[1], count + 1, got + outcome[0]
        local.apply(local.mean_gradients(got))
        samples += got
        losses.append(total / max(1, count))
        if step == 1:  # exclude warm-up (kernel selection, allocator) from the rate
            if precision.device.type == "cuda":
                torch.cuda.synchronize()
            started, samples = time.perf_counter(), 0
    if precision.device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - started
    return {
        "requested": requested,
        "dtype": str(precision.dtype),
        "device": str(precision.device),
        "samples_per_s": round(samples / elapsed, 1),
        "loss_first": round(losses[0], 4),
        "loss_last": round(sum(losses[-5:]) / len(losses[-5:]), 4),
        "skipped_microbatches": trainer.skipped,
        "loss_scale": trainer.loss_scale,
    }


def goals(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Half precision learns as fp32 does: the last losses within ``GOAL_LOSS_GAP`` of fp32's."""
    by = {r["requested"]: r for r in runs}
    full = by["fp32"]["loss_last"]
    gaps = {
        kind: round(abs(by[kind]["loss_last"] - full) / full, 4)
        for kind in ("bf16", "fp16")
        if kind in by and by[kind]["dtype"] != "None"
    }
    worst = max(gaps.values()) if gaps else None
    return {
        "half_precision_loss_gap": {
            "value": worst,
            "all": gaps,
            "goal": GOAL_LOSS_GAP,
            "met": None if worst is None else worst <= GOAL_LOSS_GAP,
            "note": "relative gap of the mean of the last five losses to fp32's (GPU only)",
        }
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--microbatch", type=int, default=64)
    parser.add_argument("--accumulate", type=int, default=4)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    kinds = ["fp32", "bf16", "fp16"] if args.device.startswith("cuda") else ["fp32"]
    runs = [run(kind, args) for kind in kinds]
    result = {
        "benchmark": "precision",
        "device": args.device,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
        "steps": args.steps,
        "runs": runs,
        "goals": goals(runs),
    }
    emit(result, args.json)


if __name__ == "__main__":
    main()
