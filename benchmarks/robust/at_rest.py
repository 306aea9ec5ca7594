"""Does dedloc's work check still tell a free rider from honest work once the model is at rest?

    python -m benchmarks.robust.at_rest --json out.json
    python -m benchmarks.robust.at_rest --checkpoint PATH --checkpoint PATH --json out.json

A check recomputes a sampled microbatch and compares its loss and its gradient's fingerprint
with the receipt (``core.training.credit.checks.tolerance``). Each tolerance has an absolute part
(for parameters a batch leaves untouched), so a check could go blind if honest fingerprints
shrank toward it once the loss stops falling. This measures the demo's model fresh and at each
checkpoint (default: the two newest the README's main command left; each run of it resumes the
demo where the last stopped, and its held-out loss was flat from epoch 80 on), on ``--batches``
microbatches of the demo's data:

- the fingerprint's size (root mean square) beside the size under which a fingerprint of zeros
  passes, for each precision a receipt may name (``zeros_pass_below``): a member that computes
  nothing and sends zeros;
- the smallest distance between two batches' fingerprints, relative to one of them, beside the
  precision's limit: a member that reuses one gradient for every batch;
- the share of pairs of batches whose losses lie within the loss tolerance: a member that
  reports one loss for every batch.

A cheap cheat passes at rest only where a ``*_margin`` figure falls to 1 or below, or the share
of losses is large.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.kit.harness import emit
from core.project import Manifest, load_manifest
from core.swarm.demo_data import DEMO_MANIFEST, prepare_demo_data

README_CHECKPOINTS = Path.home() / ".cache/barnraise/swarm/barnraise-demo/backbone/checkpoints"
"""Where ``python3 packaging/dev.py run`` keeps the backbone's checkpoints."""
NEWEST = 2
"""Checkpoints measured by default: the newest of the README's run."""


def measure(manifest: Manifest, data: Path, checkpoint: Path | None, count: int) -> dict[str, Any]:
    """The figures of one model state (``checkpoint``: None for a fresh model)."""
    from core.training.credit.checks.fingerprint import Fingerprinter
    from core.training.credit.checks.tolerance import TOLERANCES, gradient_error
    from core.training.peer.recipe import build_model, data_stream, fetch_tokenizer, mlm_loss

    model = build_model(manifest)
    epoch = 0
    if checkpoint is not None:
        saved = torch.load(checkpoint, map_location="cpu", weights_only=False)
        model.load_state_dict(saved["model"])
        epoch = int(saved["epoch"])
    model.train()
    fingerprint = Fingerprinter(list(model.parameters()))
    stream = data_stream(manifest, fetch_tokenizer(manifest, str(data), data),
                         data_base=str(data), seed=7)  # fmt: skip
    prints, losses = [], []
    for _ in range(count):
        model.zero_grad()
        value = mlm_loss(model, next(stream))
        value.backward()  # type: ignore[no-untyped-call]
        prints.append(fingerprint.read().astype(np.float64))
        losses.append(float(value.detach()))
    sizes = [float(np.sqrt(np.mean(p**2))) for p in prints]
    pairs = list(itertools.permutations(range(count), 2))
    reused = min(gradient_error(prints[a], prints[b]) for a, b in pairs)
    by_precision = {}
    for name, tol in TOLERANCES.items():
        zeros_below = tol.grad_abs / (1 - tol.grad_rel)
        within = [
            abs(losses[a] - losses[b]) <= tol.loss_abs + tol.loss_rel * abs(losses[b])
            for a, b in pairs
        ]
        by_precision[name] = {
            "zeros_pass_below": zeros_below,
            "zeros_margin": min(sizes) / zeros_below,
            "reused_gradient_margin": reused / tol.grad_rel,
            "one_loss_passes_share": sum(within) / len(within),
        }
    return {
        "checkpoint": None if checkpoint is None else str(checkpoint),
        "epoch": epoch,
        "batches": count,
        "loss_mean": float(np.mean(losses)),
        "loss_std": float(np.std(losses)),
        "fingerprint_rms_min": min(sizes),
        "fingerprint_rms_median": float(np.median(sizes)),
        "reused_gradient_error_min": reused,
        "precisions": by_precision,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, action="append", default=None,
                        help="a checkpoint of the demo's model (repeat for more)")  # fmt: skip
    parser.add_argument("--batches", type=int, default=16)
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.batches < 2:
        parser.error("--batches must be 2 or more (pairs of batches are compared)")
    checkpoints = args.checkpoint
    if checkpoints is None:
        found = sorted(README_CHECKPOINTS.glob("checkpoint-*.pt"))
        if not found:
            parser.error(
                f"no checkpoint in {README_CHECKPOINTS}: run `python3 packaging/dev.py run` "
                "first (each run resumes the last), or name checkpoints with --checkpoint"
            )
        checkpoints = found[-NEWEST:]
    missing = [str(path) for path in checkpoints if not path.is_file()]
    if missing:
        parser.error(f"no checkpoint at {', '.join(missing)}")
    manifest = load_manifest(DEMO_MANIFEST)
    data = args.data or Path(os.environ.get("BARNRAISE_DEMO_DATA", "/tmp/barnraise-demo-data"))
    prepare_demo_data(manifest, data)
    torch.manual_seed(0)
    states = [measure(manifest, data, None, args.batches)]
    states += [measure(manifest, data, path, args.batches) for path in checkpoints]
    for state in states:
        print(f"epoch {state['epoch']:4d}  loss {state['loss_mean']:.3f} ± {state['loss_std']:.3f}"
              f"  fingerprint rms {state['fingerprint_rms_min']:.3g} (min)"
              f"  reused gradient off by {state['reused_gradient_error_min']:.3g}", flush=True)  # fmt: skip
    at_rest = states[1:]
    result = {
        "benchmark": "at_rest",
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "states": states,
        "goals": {
            "zeros_caught_at_rest": all(
                p["zeros_margin"] > 1 for s in at_rest for p in s["precisions"].values()
            ),
            "reused_gradient_caught_at_rest": all(
                p["reused_gradient_margin"] > 1 for s in at_rest for p in s["precisions"].values()
            ),
        },
    }
    emit(result, args.json)


if __name__ == "__main__":
    main()
