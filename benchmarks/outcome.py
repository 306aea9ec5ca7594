"""What the collaboration produces: the demo model's held-out loss, alone against together.

    python benchmarks/outcome.py --epochs 60 --json docs/benchmarks/outcome.json \
        --png docs/figures/outcome-held-out.png

The demo project on its real corpus (the prose of Python's documentation, with whole modules held
out), trained three ways, each measured on the same held-out sequences (``[evaluation]``):

- ``single``: one process takes every step on the collaboration's global batch
  (``training.target_batch_size`` samples, accumulated microbatch by microbatch), evaluating its
  model every ``evaluation.every`` steps as the backbone would;
- ``swarm``: a backbone and 3 trainers, each its own process on loopback, dedloc mode; every
  ``--churn-every`` seconds one trainer leaves (SIGTERM or SIGKILL, in turn) and a new one joins
  with its own data order; the backbone's evaluations are the curve;
- ``diloco``: the same swarm and churn in diloco mode (``--round-seconds``), the backbone's
  evaluations of the outer parameters.

Every trainer is honest, so each swarm run also lists the backbone's log lines that name an
accused peer (``accusations``: each one false).

The runs are compared at equal samples: each curve's held-out loss is interpolated at the sample
counts of the single-process evaluations, up to the fewest samples any run reached. Goal: neither
swarm's final held-out loss more than 2 % above the single process's (DeDLOC, Appendix G, finds the
synchronous collaboration equivalent to one large-batch process); ``equivalent`` says whether it is
within 2 % either way. The curves go into a PNG. ``--from-json`` compares and draws the curves of
an earlier run again without training.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import re
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from churn import Swarm, accusation_lines
from harness import emit

from core.data import ShardServer
from core.project import load_manifest
from core.swarm.demo_data import DEMO_MANIFEST, prepare_demo_data
from core.worker.events import PeerEvaluation, PeerMetrics

GOAL = 0.02
"""Largest relative gap of a swarm's final held-out loss to the single process's."""
TRAINERS = 3
Point = dict[str, float]


# ---- one process, the global batch ----------------------------------------------------------------


def single_process(manifest_path: Path, data: Path, epochs: int) -> list[Point]:
    """``epochs`` steps on the global batch; the held-out figures every ``evaluation.every``."""
    from core.training.evaluation import load_held_out, measure
    from core.training.local import LocalWork
    from core.training.peer.recipe import (
        build_model,
        data_stream,
        fetch_tokenizer,
        mlm_loss,
        training_state,
    )
    from core.training.trainer import Trainer

    manifest = load_manifest(manifest_path)
    model = build_model(manifest)
    state = training_state(model, manifest)
    local = LocalWork(state, manifest.training.clip_norm or None)
    local.zeros()
    tokenizer = fetch_tokenizer(manifest, str(data), data)
    held = load_held_out(manifest, tokenizer, data_base=str(data))
    batches = data_stream(manifest, tokenizer, data_base=str(data), seed=1)
    trainer = Trainer(model, None, None, batches, mlm_loss)  # type: ignore[arg-type]
    target, every = manifest.training.target_batch_size, manifest.evaluation.every
    points: list[Point] = []
    samples = 0
    for step in range(epochs):
        got = 0
        while got < target:
            outcome = trainer._microbatch()
            if isinstance(outcome, tuple):
                local.accumulate(outcome[0])
                got += outcome[0]
        state.set_learning_rate(step)  # the schedule at the epoch being finished, as peers do
        local.apply(local.mean_gradients(got))
        state.epoch = step + 1
        samples += got
        if state.epoch % every == 0:
            measured = measure(model, held.batches, causal=held.causal)
            assert measured.loss is not None, "the single process diverged"
            points.append(
                {"epoch": state.epoch, "samples": samples, "loss": measured.loss,
                 "accuracy": measured.accuracy}
            )  # fmt: skip
            print(f"single  epoch {state.epoch:>4}  held-out loss {measured.loss:.4f}", flush=True)
    return points


# ---- swarms with churn --------------------------------------------------------------------------


class OutcomeSwarm(Swarm):
    """The churn benchmark's swarm, keeping the backbone's evaluations too."""

    def __init__(self, base: str, work: Path, target: int, manifest: Path) -> None:
        super().__init__(base, work, target, manifest)
        self.evaluations: list[PeerEvaluation] = []

    async def _read_backbone(self, child: Any) -> None:
        while (event := await child.event()) is not None:
            if isinstance(event, PeerMetrics):
                self.metrics.append((self.now(), event))
            elif isinstance(event, PeerEvaluation):
                self.evaluations.append(event)
                shown = "-" if event.loss is None else f"{event.loss:.4f}"
                print(
                    f"{self.work.name:<7} epoch {event.epoch:>4}  held-out loss {shown}", flush=True
                )

    def samples_before(self, epoch: int) -> int:
        """Samples of the collaboration's epochs before ``epoch`` (what a replica at ``epoch``
        was trained on)."""
        return sum(m.samples for _, m in self.metrics if m.epoch < epoch)


async def swarm_run(
    name: str, manifest: Path, base: str, work: Path, *, epochs: int, churn_every: float,
    minutes: float, seed: int,
) -> dict[str, Any]:  # fmt: skip
    """A backbone and ``TRAINERS`` trainers with churn until the backbone has evaluated its replica
    at ``epochs`` (or ``minutes`` pass)."""
    rng = random.Random(seed)
    swarm = OutcomeSwarm(base, work / name, load_manifest(manifest).training.target_batch_size,
                         manifest)  # fmt: skip
    swarm.work.mkdir(parents=True)
    leaves = joins = 0
    started = time.monotonic()
    try:
        await swarm.start_backbone()
        for _ in range(TRAINERS):
            await swarm.start_trainer()
        next_churn = time.monotonic() + churn_every
        how = ("SIGTERM", "SIGKILL")
        while time.monotonic() - started < minutes * 60:
            if swarm.evaluations and swarm.evaluations[-1].epoch >= epochs:
                break
            if time.monotonic() >= next_churn:
                live = swarm.live()
                if live:
                    await swarm.stop_trainer(rng.choice(live), how[leaves % 2])
                    leaves += 1
                await swarm.start_trainer()
                joins += 1
                next_churn = time.monotonic() + churn_every
            await asyncio.sleep(0.5)
    finally:
        await swarm.close()
    points = [
        {"epoch": e.epoch, "samples": swarm.samples_before(e.epoch), "loss": e.loss,
         "accuracy": e.accuracy}
        for e in swarm.evaluations
        if e.loss is not None
    ]  # fmt: skip
    return {
        "points": points,
        # every trainer is honest: a line naming an accused peer is a false accusation
        "accusations": accusation_lines(swarm),
        "leaves": leaves,
        "joins": joins,
        "seconds": round(time.monotonic() - started, 1),
        "epochs": max((m.epoch for _, m in swarm.metrics), default=-1) + 1,
    }


# ---- comparing at equal samples ------------------------------------------------------------------


def loss_at(points: list[Point], samples: float) -> float | None:
    """The held-out loss at ``samples``, linear between the two evaluations around it."""
    before = [p for p in points if p["samples"] <= samples]
    after = [p for p in points if p["samples"] >= samples]
    if not before or not after:
        return None
    a, b = before[-1], after[0]
    if b["samples"] == a["samples"]:
        return a["loss"]
    share = (samples - a["samples"]) / (b["samples"] - a["samples"])
    return a["loss"] + share * (b["loss"] - a["loss"])


def compare(runs: dict[str, list[Point]]) -> dict[str, Any]:
    single = runs["single"]
    reach = min(max((p["samples"] for p in points), default=0) for points in runs.values())
    shared = [p for p in single if p["samples"] <= reach]
    if not shared:
        return {"compared_at_samples": 0, "verdict": "no common samples"}
    at = shared[-1]["samples"]
    result: dict[str, Any] = {"compared_at_samples": at, "single_loss": shared[-1]["loss"]}
    for name, points in runs.items():
        if name == "single":
            continue
        loss = loss_at(points, at)
        gap = None if loss is None else loss / shared[-1]["loss"] - 1
        result[name] = {
            "loss": loss,
            "relative_gap": gap,
            # the goal bounds how much worse a swarm may be; a lower loss is reported, not failed
            "within_goal": gap is not None and gap <= GOAL,
            "equivalent": gap is not None and abs(gap) <= GOAL,
        }
    return result


def plot(runs: dict[str, list[Point]], path: Path, title: str) -> None:
    from plot_png import Panel, Series, render_panels

    labels = {"single": "one process, global batch", "swarm": "swarm with churn (dedloc)",
              "diloco": "swarm with churn (diloco)"}  # fmt: skip
    panel = Panel(
        "Held-out loss of the demo model",
        "samples trained on (thousands)",
        "held-out loss (cross-entropy per masked token)",
        [
            Series(labels[name], [(p["samples"] / 1000, p["loss"]) for p in points], markers=True)
            for name, points in runs.items()
        ],
    )
    render_panels([panel], columns=1, path=path, title=title, panel_size=(760, 460))


# ---- the run -------------------------------------------------------------------------------------


def demo_manifest(work: Path, every: int, *, round_seconds: float | None = None) -> Path:
    """The demo's manifest, evaluating every ``every`` epochs, in diloco mode with a round."""
    text = re.sub(r"^every = .*$", f"every = {every}", DEMO_MANIFEST.read_text(), flags=re.M)
    name = "dedloc.toml"
    if round_seconds is not None:
        diloco = f'[training]\nmode = "diloco"\nround_seconds = {round_seconds}\n'
        text = text.replace("[training]\n", diloco, 1)
        name = "diloco.toml"
    path = work / name
    path.write_text(text)
    return path


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="outcome-") as tmp:
        work = Path(tmp)
        data = work / "data"
        manifest = load_manifest(DEMO_MANIFEST)
        await asyncio.to_thread(prepare_demo_data, manifest, data)
        runs: dict[str, list[Point]] = {}
        details: dict[str, Any] = {}
        started = time.monotonic()
        dedloc = demo_manifest(work, args.every)
        runs["single"] = await asyncio.to_thread(single_process, dedloc, data, args.epochs)
        details["single"] = {"seconds": round(time.monotonic() - started, 1)}
        server = ShardServer(data)
        base = await server.start()
        try:
            plans = {"swarm": dedloc}
            if not args.no_diloco:
                plans["diloco"] = demo_manifest(work, args.every, round_seconds=args.round_seconds)
            for name, path in plans.items():
                run = await swarm_run(
                    name, path, base, work, epochs=args.epochs,
                    churn_every=args.churn_every, minutes=args.minutes, seed=args.seed,
                )  # fmt: skip
                runs[name] = run.pop("points")
                details[name] = run
        finally:
            await server.close()
    result: dict[str, Any] = {
        "benchmark": "outcome",
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "settings": {
            "epochs": args.epochs,
            "trainers": TRAINERS,
            "churn_every": args.churn_every,
            "round_seconds": args.round_seconds,
            "goal": GOAL,
            "target_batch_size": manifest.training.target_batch_size,
            "held_out_sequences": manifest.evaluation.samples,
            "every": args.every,
        },
        "runs": details,
        "curves": runs,
        "comparison": compare(runs),
    }
    if args.png:
        plot(runs, Path(args.png), f"{args.epochs} epochs of {manifest.training.target_batch_size}")
        result["plot"] = args.png
    return result


def redraw(args: argparse.Namespace) -> dict[str, Any]:
    """An earlier run's result with its comparison made again (and its curves drawn)."""
    result: dict[str, Any] = json.loads(args.from_json.read_text())
    runs = result["curves"]
    result["comparison"] = compare(runs)
    if args.png:
        settings = result["settings"]
        plot(runs, Path(args.png),
             f"{settings['epochs']} epochs of {settings['target_batch_size']}")  # fmt: skip
        result["plot"] = args.png
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=60, help="collaborative steps to compare")
    parser.add_argument("--churn-every", type=float, default=30.0, help="seconds between churns")
    parser.add_argument("--round-seconds", type=float, default=15.0, help="diloco: a round")
    parser.add_argument("--minutes", type=float, default=20.0, help="longest a swarm run may take")
    parser.add_argument("--no-diloco", action="store_true", help="leave out the diloco swarm")
    parser.add_argument("--every", type=int, default=2, help="epochs between evaluations")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--png", default=None, help="where to draw the three curves")
    parser.add_argument("--from-json", type=Path, default=None, help="an earlier run's JSON")
    args = parser.parse_args()
    with contextlib.suppress(AttributeError):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if args.from_json is not None:
        emit(redraw(args), args.json)
        return
    emit(asyncio.run(bench(args)), args.json)


if __name__ == "__main__":
    main()
