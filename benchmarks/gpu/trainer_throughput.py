"""Trainer throughput: one Barnraise trainer against a plain PyTorch loop on the same device.

    python -m benchmarks.gpu.trainer_throughput --device cuda --json out.json
    python -m benchmarks.gpu.trainer_throughput --device cpu --dry-run      # the code path, in seconds

For each model (``--models``: the demo, ``albert-large``, and ``albert-xxlarge`` with the 8-bit
offloaded states its manifest asks for), two runs, each in a fresh process so that its memory
high-water marks are its own:

- ``barnraise``: the real ``Trainer.run`` loop (each microbatch crosses to the training thread,
  runs under the chosen autocast with fp16 loss scaling, syncs for the loss value) feeding the
  collaborative optimizer's local work (``LocalWork``: float32 accumulators, the mean gradient
  copied to the host as the averager needs it, clipping, the manifest's optimizer). One
  collaborative step every ``--accumulate`` microbatches stands in for the collaboration, alone:
  no DHT, no averaging round (those go to the network, measured by the swarm benchmarks).
- ``plain``: what a PyTorch user would write for the same work, on one thread: the same model,
  batches, autocast and optimizer (built by the same recipe), gradients accumulated in ``.grad``
  over ``--accumulate`` microbatches, ``GradScaler`` where fp16 needs it, ``clip_grad_norm_``, the
  step. It never waits for the loss value, so the GPU can run ahead of Python.

Both start from the same seeded weights and see the same random-token masked-LM batches; the first
``--warmup`` steps are not timed. The figure is samples/s of ``barnraise`` over ``plain`` (the goal
is at least 0.9 for ``albert-large`` on a GPU), with each run's peak GPU memory. ``--reference``
adds a third run per model: the plain loop with ``torch.optim.AdamW`` (foreach), to show what the
manifest's optimizer itself costs against PyTorch's own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.kit.harness import ROOT, as_module, emit, mlm_batches, training_device

MODELS = ("demo", "albert-large", "albert-xxlarge")
PATHS = ("plain", "barnraise")
GOAL_RATIO = 0.9
GOAL_MODEL = "albert-large"


def manifest_for(args: argparse.Namespace, model: str) -> Any:
    from core.project import load_manifest

    manifest = load_manifest(ROOT / "resources" / model / "project.toml")
    if args.seq_len:
        manifest = replace(manifest, data=replace(manifest.data, seq_len=args.seq_len))
    if args.microbatch:
        manifest = manifest.with_training(microbatch_size=args.microbatch)
    return manifest


def run_plain(args: argparse.Namespace, manifest: Any, precision: Any, reference: bool) -> float:
    """The plain loop; returns the seconds of the timed steps."""
    import torch

    from core.training.peer.recipe import build_model, build_optimizer, mlm_loss

    device = precision.device
    model = build_model(manifest).to(device)
    t = manifest.training
    optimizer = (
        torch.optim.AdamW(model.parameters(), t.lr, betas=t.betas, eps=t.eps, foreach=True)
        if reference
        else build_optimizer(model, manifest)
    )
    scaler = precision.scaler()
    data = mlm_batches(manifest.model.vocab_size, manifest.data.seq_len, t.microbatch_size, seed=1)
    clip = t.clip_norm or None
    started = 0.0
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            synchronize(device)
            started = time.perf_counter()
        for _ in range(args.accumulate):
            batch = {k: v.to(device, non_blocking=True) for k, v in next(data).items()}
            with precision.autocast():
                loss = mlm_loss(model, batch)
            scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
    synchronize(device)
    return time.perf_counter() - started


class SoloCollaboration:
    """The collaborative optimizer's local part for one peer alone: ``step`` accumulates each
    microbatch (on the training thread, as ``DedlocOptimizer.step`` does) and every
    ``accumulate`` microbatches takes the step with the mean gradient, copied to the host first as
    an averaging round would need it."""

    def __init__(self, local: Any, bridge: Any, accumulate: int) -> None:
        self.local = local
        self.bridge = bridge
        self.accumulate = accumulate
        self.epoch = 0
        self._microbatches = 0
        self._samples = 0

    async def step(self, batch_size: int, loss: float | None = None) -> None:
        await self.bridge.run(self.local.accumulate, batch_size)
        self._microbatches += 1
        self._samples += batch_size
        if self._microbatches % self.accumulate == 0:
            samples, self._samples = self._samples, 0
            await self.bridge.run(self._apply, samples)
            self.epoch += 1

    def _apply(self, samples: int) -> None:
        self.local.apply(self.local.mean_gradients(samples))


async def run_barnraise(args: argparse.Namespace, manifest: Any, precision: Any) -> float:
    """The trainer's loop and local work; returns the seconds of the timed steps."""
    from core.training.local import LocalWork
    from core.training.peer.recipe import build_model, mlm_loss, training_state
    from core.training.trainer import Trainer
    from core.worker.bridge import TrainingBridge

    device = precision.device
    bridge = TrainingBridge()
    try:
        model = await bridge.run(lambda: build_model(manifest).to(device))
        state = training_state(model, manifest)
        local = LocalWork(state, manifest.training.clip_norm or None)
        await bridge.run(local.zeros)
        t = manifest.training
        data = mlm_batches(
            manifest.model.vocab_size, manifest.data.seq_len, t.microbatch_size, seed=1
        )
        solo = SoloCollaboration(local, bridge, args.accumulate)
        trainer = Trainer(model, solo, bridge, data, mlm_loss, precision=precision)  # type: ignore[arg-type]
        await trainer.run(until_epoch=args.warmup)
        await bridge.run(synchronize, device)
        started = time.perf_counter()
        await trainer.run(until_epoch=args.warmup + args.steps)
        await bridge.run(synchronize, device)
        return time.perf_counter() - started
    finally:
        await bridge.aclose()


def synchronize(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_one(args: argparse.Namespace, model_name: str, path: str) -> dict[str, Any]:
    """One run in this process (the child's side)."""
    import torch

    from core.worker.precision import choose_precision

    torch.manual_seed(0)
    manifest = manifest_for(args, model_name)
    precision = choose_precision(torch.device(args.device), manifest.training.precision)
    device = precision.device
    cuda = device.type == "cuda"
    if path == "barnraise":
        seconds = asyncio.run(run_barnraise(args, manifest, precision))
    else:
        seconds = run_plain(args, manifest, precision, reference=path == "plain_adamw")
    t = manifest.training
    samples = args.steps * args.accumulate * t.microbatch_size
    return {
        "model": model_name,
        "path": path,
        "optimizer": "adamw (torch, foreach)" if path == "plain_adamw" else t.optimizer,
        "optimizer_states": t.optimizer_states,
        "offload_optimizer": t.offload_optimizer,
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if cuda else None,
        "torch": torch.__version__,
        "dtype": str(precision.dtype),
        "microbatch": t.microbatch_size,
        "seq_len": manifest.data.seq_len,
        "accumulate": args.accumulate,
        "steps": args.steps,
        "seconds": round(seconds, 3),
        "samples_per_s": round(samples / seconds, 3) if seconds > 0 else None,
        "peak_device_bytes": torch.cuda.max_memory_allocated(device) if cuda else None,
        "peak_device_reserved_bytes": torch.cuda.max_memory_reserved(device) if cuda else None,
    }


def run_child(args: argparse.Namespace, model_name: str, path: str) -> dict[str, Any]:
    command = [
        sys.executable,
        *as_module(__spec__),
        "--device",
        args.device,
        "--steps",
        str(args.steps),
    ]
    command += ["--warmup", str(args.warmup), "--accumulate", str(args.accumulate)]
    command += ["--microbatch", str(args.microbatch), "--seq-len", str(args.seq_len)]
    command += ["--worker", f"{model_name}:{path}"]
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode != 0:
        tail = done.stderr[-4000:]
        return {"model": model_name, "path": path, "error": tail.strip().splitlines()[-1:] or ""}
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def ratios(runs: list[dict[str, Any]]) -> dict[str, float | None]:
    """samples/s of ``barnraise`` over ``plain``, per model."""
    out: dict[str, float | None] = {}
    for model in dict.fromkeys(r["model"] for r in runs):
        by = {r["path"]: r.get("samples_per_s") for r in runs if r["model"] == model}
        ours, plain = by.get("barnraise"), by.get("plain")
        out[model] = round(ours / plain, 3) if ours and plain else None
    return out


def goals(by_model: dict[str, float | None], device: str) -> dict[str, Any]:
    value = by_model.get(GOAL_MODEL)
    on_gpu = device.startswith("cuda")
    return {
        "trainer_over_plain_albert_large": {
            "value": value,
            "goal": GOAL_RATIO,
            "met": value >= GOAL_RATIO if value is not None and on_gpu else None,
            "note": (
                "samples/s of the Barnraise trainer over a plain PyTorch loop, albert-large"
                + ("" if on_gpu else "; judged on a GPU only")
            ),
        }
    }


def table(runs: list[dict[str, Any]]) -> None:
    print(
        f"{'model':>15} {'path':>11} {'samples/s':>10} {'peak GiB':>9} {'dtype':>15}",
        file=sys.stderr,
    )
    for r in runs:
        if "error" in r:
            print(f"{r['model']:>15} {r['path']:>11} failed: {r['error']}", file=sys.stderr)
            continue
        peak = r["peak_device_reserved_bytes"]
        print(
            f"{r['model']:>15} {r['path']:>11} {r['samples_per_s'] or '-':>10} "
            f"{'-' if peak is None else round(peak / 2**30, 2):>9} {r['dtype']:>15}",
            file=sys.stderr,
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="", help="cpu, cuda or cuda:N (default: cuda if any)")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated")
    parser.add_argument("--steps", type=int, default=6, help="timed optimizer steps")
    parser.add_argument("--warmup", type=int, default=2, help="optimizer steps not timed")
    parser.add_argument("--accumulate", type=int, default=8, help="microbatches per step")
    parser.add_argument("--microbatch", type=int, default=0, help="0: the manifest's")
    parser.add_argument("--seq-len", type=int, default=0, help="0: the manifest's")
    parser.add_argument("--reference", action="store_true", help="also plain with torch AdamW")
    parser.add_argument("--dry-run", action="store_true", help="the demo model, a few steps")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # MODEL:PATH, in a child
    args = parser.parse_args()
    args.device = training_device(parser, args.device)
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}: choose from {', '.join(MODELS)}")
    for name in ("steps", "accumulate"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.dry_run:
        models, args.steps, args.warmup, args.accumulate = ["demo"], 2, 1, 2
    if args.worker:
        model_name, path = args.worker.split(":")
        print(json.dumps(run_one(args, model_name, path)))
        return
    paths = (*PATHS, "plain_adamw") if args.reference else PATHS
    runs = [run_child(args, m, p) for m in models for p in paths]
    table(runs)
    by_model = ratios(runs)
    print("barnraise / plain:", by_model, file=sys.stderr)
    result = {
        "benchmark": "trainer_throughput",
        "device": args.device,
        "dry_run": args.dry_run,
        "runs": runs,
        "ratio_barnraise_over_plain": by_model,
        "goals": goals(by_model, args.device),
    }
    emit(result, args.json)
    if any("error" in r for r in runs):
        sys.exit(1)


if __name__ == "__main__":
    main()
