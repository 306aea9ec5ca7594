"""Part ``convergence`` of ``benchmarks/moe/suite.py``: Learning@home, Section 4.2, at laptop scale.

The paper trains a feed-forward network and DMoE variants asynchronously under emulated latency and
failures (MNIST, Figure 5) and finds that staleness hurts the mixtures much less. This part repeats
that on the 1,797 real UCI handwritten digits (8x8, ``resources/digits``, as scikit-learn ships
them; ``core.moe.client.digits``: 1,437 training and 360 test images) on this machine's CPU.

Models (``--convergence-hidden`` H, default 64; all map 64 pixels -> ``Linear(64, H)`` + ReLU ->
four blocks -> ``Linear(H, 10)``):

- ``ffn``: four local residual feed-forward blocks ``LayerNorm(x + W2·gelu(W1·x))`` with ``W1`` of
  ``H -> 4H``: exactly the ``ExpertSpec(kind="ffn", hidden=H)`` module, held locally (the paper's
  "4 stacked feed-forward blocks").
- ``dmoe-E``: four ``RemoteMixtureOfExperts`` layers, each over its own grid of E experts (16 on a
  4x4 grid, 64 on 8x8, ...), top-4 experts per input. Each expert is the same residual block with a
  quarter of the inner width (``H -> H -> H``): a quarter of the ffn block's weights and FLOPs, so
  four of them cost what one ffn block costs (the paper's "blocks with 1/4 of the FFN size ...
  computationally equivalent to the FFN baseline"). The experts live on ``--convergence-servers``
  real ``ExpertServer``s on loopback Hosts (``loopback_experts``), found through a real DHT with
  the beam search, and learn on their servers with each backward call.

Training, the same for every model: Adam with ``--convergence-lr`` for every parameter (the trainer's
own and, on their servers, the experts'), batches of ``--convergence-batch`` drawn in the same seeded
order, cross-entropy (plus ``--convergence-balancing`` times the gates' load-balancing loss for the
mixtures), ``--convergence-steps`` batches per run (320: 7 epochs of the training images).

The default lr, 1e-4, was chosen from 1e-4, 3e-4 and 1e-3 (one run each, seed 0) as the one at
which the most models trained steadily under staleness: at 3e-4 (where the ffn trained
synchronously is fastest, 97% test accuracy in 200 steps) every model's accuracy swung widely in
the high-latency scenario, and at 1e-3 the asynchronous ffn did not learn at all. Two checks
travel with the results: ``reference``, the ffn trained synchronously (one worker, no delay: no
staleness at all), drawn dashed in every panel; and ``ffn_lr_check``, the ffn in every scenario
at the other rates of ``--convergence-ffn-lrs``, so a reader can see whether the shared rate
handicaps the baseline (run the whole part with another ``--convergence-lr`` to see the mixtures
at it).

Asynchrony and delay, per scenario (the paper's three):

========== ======= ================ ===================== ===========================
scenario   workers mean batch delay per pass (8 per batch) failures
========== ======= ================ ===================== ===========================
low        16      100 ms           12.5 ms               none
high       64      1 s              125 ms                none
failures   16      100 ms           12.5 ms               each request, p = 0.1
========== ======= ================ ===================== ===========================

A batch passes four layers forward and four backward: eight passes, so the paper's "1 s per batch
= 125 ms for each forward and backward pass through DMoE" is a per-pass mean of delay / 8.

- DMoE: ``AsyncMoETrainer`` with ``concurrency`` = workers (each batch snapshots the trainer's
  parameters, runs, applies its gradient in turn). Every expert request (forward or backward) is
  delayed at its server by ``ServerFaults`` with an exponential delay of the per-pass mean and fails
  with the scenario's probability. A layer pass sends its rows to several experts at once and waits
  for the slowest answer, so a DMoE batch's realised delay is longer than 8 x the mean (the JSON
  has the realised per-request figures); that is the mixture's real cost, not hidden here.
- ``ffn``: asynchronous SGD with the same workers in flight: each worker takes a batch, snapshots
  the parameters, computes its gradient, waits its drawn delay (a sum of eight exponential passes of
  the per-pass mean: the same per-pass distribution as one expert request), then applies it with
  the shared optimizer; so its gradients are as stale as the mixture's. With failures, each of its
  eight block requests fails with the same probability and a batch with any failed request is
  dropped after its delay (a plain network has no other expert to fall back on).

Measured per model and scenario: training loss of every applied step (and a moving mean over
``--convergence-smooth`` steps), test accuracy on the 360 held-out images every
``--convergence-eval-every`` steps and at the end, staleness of every step (steps applied by others
between the batch's snapshot and its own step), batches dropped, steps/s (wall clock, this shared
machine), the mean time a batch took (workers x wall / batches, by Little's law: its delay plus its
waits for the CPU), and for the mixtures the expert calls, their failures and the injected faults. Curves are
indexed by applied step and by batches processed (applied + dropped); the plot
(``--convergence-plot``, PNG, default next to ``--json``) shows loss and accuracy against batches
processed, one panel per scenario and one line per model. A mixture's test accuracy is measured on a
snapshot of the trainer's parameters taken at that step, evaluated while training goes on, so its
experts (on the servers) may be a few steps newer than the snapshot.

Scale versus the paper: digits instead of MNIST, H = 64 instead of 512 (the paper's 4.1 block with
half the units), 16 and 64 experts per layer, one seed instead of 5 runs (no error bands), 320
batches per run instead of many thousands, everything in one process on two CPU cores, so a
mixture's steps/s is bound by this machine's CPU (hundreds of expert calls per step through one
event loop), not by the delays; the ffn's is bound by its delays.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from benchmarks.kit.plot_png import attach_plot, plot_path
from benchmarks.moe.convergence_runs import SCENARIOS, SYNCHRONOUS, run_dmoe, run_ffn

NAME = "convergence"
HELP = "Learning@home 4.2: FFN vs DMoE convergence under async staleness, latency and failures"
DEFAULTS: dict[str, Any] = {
    "convergence_scenarios": "low,high,failures",
    "convergence_experts": "16,64",
    "convergence_hidden": 64,
    "convergence_batch": 32,
    "convergence_steps": 320,
    "convergence_lr": 1e-4,
    "convergence_ffn_lrs": "3e-4,1e-3",
    "convergence_k": 4,
    "convergence_servers": 4,
    "convergence_balancing": 0.01,
    "convergence_eval_every": 40,
    "convergence_smooth": 25,
    "convergence_seed": 0,
    "convergence_plot": None,  # next to --json: <stem>.convergence.png
}
QUICK: dict[str, Any] = {
    "convergence_scenarios": "low",
    "convergence_experts": "16",
    "convergence_hidden": 32,
    "convergence_batch": 16,
    "convergence_steps": 40,
    "convergence_servers": 2,
    "convergence_eval_every": 20,
    "convergence_smooth": 5,
    "convergence_ffn_lrs": "",
}


def add_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("part convergence")
    group.add_argument(
        "--convergence-scenarios", help=f"comma-separated, from {', '.join(SCENARIOS)}"
    )
    group.add_argument(
        "--convergence-experts", help="comma-separated experts per DMoE layer (square numbers)"
    )
    group.add_argument("--convergence-hidden", type=int, help="model width H")
    group.add_argument("--convergence-batch", type=int, help="samples per batch")
    group.add_argument("--convergence-steps", type=int, help="batches per run")
    group.add_argument("--convergence-lr", type=float, help="Adam's learning rate, every model")
    group.add_argument(
        "--convergence-ffn-lrs",
        help="comma-separated other learning rates to run the ffn at (a check that the baseline "
        "is not handicapped by the shared one; empty: none)",
    )
    group.add_argument("--convergence-k", type=int, help="experts per input and layer")
    group.add_argument("--convergence-servers", type=int, help="expert servers per DMoE run")
    group.add_argument("--convergence-balancing", type=float, help="load-balancing loss weight")
    group.add_argument("--convergence-eval-every", type=int, help="steps between test evaluations")
    group.add_argument("--convergence-smooth", type=int, help="moving-mean window of the loss")
    group.add_argument("--convergence-seed", type=int)
    group.add_argument("--convergence-plot", type=Path, help="PNG of the curves")


# ---- the part ----------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The part's entry point: the reference, every model in every scenario, the lr check, the plot."""
    import torch

    from core.moe.client.digits import load_digits

    scenarios = [SCENARIOS[name.strip()] for name in args.convergence_scenarios.split(",") if name]
    expert_counts = [int(n) for n in str(args.convergence_experts).split(",") if n.strip()]
    ffn_lrs = [float(x) for x in str(args.convergence_ffn_lrs or "").split(",") if x.strip()]
    digits = load_digits(seed=args.convergence_seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # dozens of worker threads on two cores: no intra-op threads on top
    try:
        progress("synchronous ffn (reference)")
        reference = asyncio.run(run_ffn(args, SYNCHRONOUS, digits))
        runs: list[dict[str, Any]] = []
        for scenario in scenarios:
            progress(f"{scenario.name}, ffn")
            runs.append(asyncio.run(run_ffn(args, scenario, digits)))
            for experts in expert_counts:
                progress(f"{scenario.name}, dmoe-{experts}")
                runs.append(asyncio.run(run_dmoe(args, scenario, digits, experts)))
        lr_check = []
        for scenario in scenarios:
            for lr in ffn_lrs:
                progress(f"{scenario.name}, ffn at lr {lr:g}")
                lr_check.append(asyncio.run(run_ffn(args, scenario, digits, lr=lr)))
    finally:
        torch.set_num_threads(threads)
    result: dict[str, Any] = {
        "paper": "Learning@home (Ryabinin and Gusev 2020), Section 4.2, Figure 5",
        "data": {
            "name": "UCI optical recognition of handwritten digits, 8x8 (real data)",
            "source": "resources/digits/digits.csv.gz, as shipped by scikit-learn",
            "train": len(digits.train_x),
            "test": len(digits.test_x),
            "synthetic": False,
        },
        "settings": {
            "hidden": args.convergence_hidden,
            "batch": args.convergence_batch,
            "batches_per_run": args.convergence_steps,
            "optimizer": "adam",
            "lr": args.convergence_lr,
            "k": args.convergence_k,
            "balancing_weight": args.convergence_balancing,
            "servers": args.convergence_servers,
            "eval_every": args.convergence_eval_every,
            "smooth": args.convergence_smooth,
            "seed": args.convergence_seed,
            "repeats": 1,
            "torch_threads": 1,
            "ffn_block": "LayerNorm(x + W2 gelu(W1 x)), W1: H -> 4H (ExpertSpec ffn), local",
            "dmoe_expert": "LayerNorm(x + W2 gelu(W1 x)), W1: H -> H (a quarter), remote, top-k",
            "delay": "DMoE: every expert request delayed at its server (ServerFaults), exponential "
            "with mean batch_delay / 8; ffn: each batch waits a sum of 8 such draws",
            "failures": "DMoE: every expert request fails with p at its server; ffn: each of a "
            "batch's 8 block requests fails with p, a batch with any failure is dropped",
        },
        "scenarios": [
            {
                "name": s.name,
                "workers": s.workers,
                "batch_delay_ms": round(1000 * s.batch_delay, 1),
                "pass_delay_ms": round(1000 * s.pass_delay, 2),
                "failure_rate": s.failure_rate,
            }
            for s in scenarios
        ],
        "reference": reference,
        "runs": runs,
        "ffn_lr_check": lr_check,
    }
    path = plot_path(args.convergence_plot, getattr(args, "json", None), "convergence")
    return attach_plot(result, path, write_plot)


def progress(text: str) -> None:
    print(f"  convergence: {text}", file=sys.stderr, flush=True)


REFERENCE_COLOR = "#888888"


def write_plot(result: dict[str, Any], path: Path) -> None:
    """Loss (top row) and test accuracy (bottom row) against batches processed, per scenario; the
    synchronous ffn dashed in every panel."""
    from benchmarks.kit.plot_png import Panel, Series, render_panels

    reference = result["reference"]
    first = result["scenarios"][0]["name"]
    ref_label = "ffn, synchronous (1 worker, no delay)"
    loss_panels: list[Panel] = []
    accuracy_panels: list[Panel] = []
    for scenario in result["scenarios"]:
        runs = [r for r in result["runs"] if r["scenario"] == scenario["name"]]
        heading = (
            f"{scenario['name']}: {scenario['workers']} workers, "
            f"{scenario['batch_delay_ms']:g} ms/batch"
            + (f", p_fail {scenario['failure_rate']:g}" if scenario["failure_rate"] else "")
        )
        losses = [Series(r["model"], loss_points(r)) for r in runs]
        losses.append(Series(ref_label, loss_points(reference), color=REFERENCE_COLOR, dashed=True))
        loss_panels.append(
            Panel(
                title=f"{heading}: training loss",
                x_label="batches processed (applied + dropped)",
                y_label=f"cross-entropy (moving mean of {result['settings']['smooth']})",
                series=losses,
            )
        )
        accuracies = [Series(r["model"], accuracy_points(r), markers=True) for r in runs]
        accuracies.append(
            Series(
                ref_label,
                accuracy_points(reference),
                markers=True,
                color=REFERENCE_COLOR,
                dashed=True,
            )
        )
        accuracy_panels.append(
            Panel(
                title=f"{scenario['name']}: test accuracy (360 held-out digits)",
                x_label="batches processed (applied + dropped)",
                y_label="accuracy",
                series=accuracies,
                y_range=(0.0, 1.0),
            )
        )
    settings = result["settings"]
    experts = "/".join(
        str(r["experts_per_layer"])
        for r in result["runs"]
        if r["scenario"] == first and "experts_per_layer" in r
    )
    render_panels(
        [*loss_panels, *accuracy_panels],
        columns=len(loss_panels),
        path=path,
        title="Learning@home 4.2 at small scale: FFN vs DMoE trained asynchronously on the UCI "
        f"digits (batch {settings['batch']}, Adam lr {settings['lr']:g}, width "
        f"{settings['hidden']}, top-{settings['k']} of {experts} experts per layer, one seed)",
        shared_legend=True,
    )


def loss_points(run: dict[str, Any]) -> list[tuple[float, float]]:
    curves = run["curves"]
    return list(zip(curves["batches_processed"], curves["loss_smoothed"], strict=True))


def accuracy_points(run: dict[str, Any]) -> list[tuple[float, float]]:
    return [(a["batches_processed"], a["accuracy"]) for a in run["curves"]["accuracy"]]


def summarize(section: dict[str, Any]) -> list[str]:
    lines = [
        f"data: {section['data']['name']}",
        f"plot: {section.get('plot') or 'not written: ' + str(section.get('plot_error'))}",
    ]
    for r in [section["reference"], *section["runs"], *section.get("ffn_lr_check", [])]:
        s = r["staleness"]
        lines.append(
            f"{r['scenario']:>11} {r['model']:>8} lr {r['lr']:g}: loss {r['final_loss']}, test acc "
            f"{r['final_accuracy']:.3f} (last 3 {r['last3_accuracy']:.3f}, best "
            f"{r['best_accuracy']:.3f}), {r['steps']} steps "
            f"+ {r['dropped']} dropped, staleness mean {s['mean']} p90 {s['p90']} max {s['max']}, "
            f"{r['steps_per_s']} steps/s, {r['mean_batch_s']} s per batch"
        )
    return lines
