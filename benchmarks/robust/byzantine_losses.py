"""Loss figures of collaborations with one Byzantine trainer, with and without the defences.

    python -m benchmarks.robust.byzantine_losses --epochs 30 --json out.json

Four trainers train a small regression MLP together (``byzantine_task``) with the real collaborative
optimizer and averager on loopback (``byzantine_runs``). One of them misbehaves
(``core.swarm.byzantine``): gradients x1000, sign-flipped x10, noise, NaN, or, as a reducer, a
shifted aggregate. Each attack runs under the plain mean (screening off) and under the defence
(CenteredClip with screening; for the lying reducer, reducer verification as well), beside a clean
collaboration.

Each scenario's figures: its held-out loss after every epoch, ``within_reference`` (the largest
|loss / reference - 1| over every epoch, the reference being full-batch SGD over the four shards,
which an honest collaboration computes step for step), ``within_clean`` (the same against the
clean collaboration), whether and when it was stopped as diverged, how often the Byzantine peer
misbehaved, and the statistics the honest trainers' findings named it with. ``data_gap`` is how far
a perfect defence lands from the reference, having lost one shard of four.

``tests/swarm/test_byzantine.py`` runs the same scenarios; ``benchmarks/robust/aggregation.py --losses``
calls ``loss_figures``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks.robust.byzantine_runs import CLEAN, Curve, all_scenarios, run_scenarios
from benchmarks.robust.byzantine_task import TRAINERS, data_gap, reference, within
from core.swarm.byzantine import Attack

# ---- the figures ---------------------------------------------------------------------------------


def _rounded(values: Sequence[float]) -> list[float | str]:
    return [round(x, 5) if math.isfinite(x) else str(x) for x in values]


def figures(curves: dict[str, Curve], epochs: int) -> dict[str, Any]:
    ideal = reference(epochs)
    clean = curves.get(CLEAN.name)
    out: dict[str, Any] = {}
    for name, curve in curves.items():
        gap = within(curve.losses, ideal)
        versus_clean = within(curve.losses, clean.losses) if clean is not None else math.inf
        out[name] = {
            "losses": _rounded(curve.losses),
            "final_loss": curve.losses[-1] if math.isfinite(curve.losses[-1]) else None,
            "stopped": curve.stopped,
            "epochs_run": len(curve.losses) - 1,
            "within_reference": None if math.isinf(gap) else round(gap, 4),
            "within_clean": None if math.isinf(versus_clean) else round(versus_clean, 4),
            "attacks": curve.attacks,
            "byzantine_named": curve.byzantine_named,
            "findings_against_byzantine": sorted(curve.accused.get(curve.byzantine_peer, ())),
            "honest_accused": len(curve.honest_accused),
            "microbatches": curve.microbatches,
            "seconds": round(curve.seconds, 2),
        }
    return out


def loss_figures(
    epochs: int = 30, attacks: Sequence[Attack] = tuple(Attack), **_: Any
) -> dict[str, Any]:
    """The clean run and each attack under the mean and the defence, for ``epochs`` epochs."""
    started = time.monotonic()
    curves = asyncio.run(run_scenarios(all_scenarios(attacks), epochs))
    return {
        "epochs": epochs,
        "trainers": TRAINERS,
        "byzantine": 1,
        "criterion": "max |loss / reference - 1| over every epoch; reference: full-batch SGD "
        "over the four shards (an honest collaboration's steps)",
        "reference": _rounded(reference(epochs)),
        "data_gap": round(data_gap(epochs), 4),
        "scenarios": figures(curves, epochs),
        "wall_s": round(time.monotonic() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument(
        "--attacks", nargs="*", default=[a.value for a in Attack], help="default: all of them"
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    result = loss_figures(args.epochs, [Attack.parse(a) for a in args.attacks])
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
