"""What the collaboration produces: held-out loss in the learning regime, alone against together.

    python -m benchmarks.learning.outcome --model demo \
        --json docs/benchmarks/learning/outcome.json --png docs/figures/outcome-held-out.png
    python -m benchmarks.learning.outcome --model llama-demo \
        --json docs/benchmarks/learning/outcome-llama.json --png docs/figures/outcome-llama.png

The single source of truth for every training mode. A shipped preset (the masked ``demo`` or the
causal ``llama-demo``) on the demo's real corpus (the prose of Python's documentation, with whole
modules held out) is trained four ways, each measured on the same held-out sequences
(``[evaluation]``) beside the **unigram floor** (what a model that only counts tokens scores):

- ``single``: the reference, one process taking every step on the collaboration's global batch
  (``training.target_batch_size`` samples, accumulated microbatch by microbatch);
- ``dedloc``: a backbone and ``TRAINERS`` trainers, each its own process on loopback; every
  ``--churn-every`` seconds one trainer leaves (SIGTERM or SIGKILL, in turn) and a new one joins
  with its own data order; the backbone's evaluations are the curve;
- ``diloco``: the same swarm and churn in diloco mode with the preset's outer step and an exact
  codec (fp16);
- ``diloco-topk``: the same with the ``topk`` codec at ``--density`` (its error feedback, outer
  lr 1.0, no outer momentum, as the manifest reference advises). The default, 20 %, is what a
  run of a few dozen rounds needs to stay within its goal (``benchmarks/learning/diloco_sweep.py``: at 1 %
  the rounds send too few coordinates for the model to get past the floor in so few of them).

Every run goes on until it has trained on ``--samples`` samples (or ``--minutes`` pass). The
runs are compared at equal samples: each curve's held-out loss is interpolated at the sample
counts of the reference's evaluations, up to the fewest samples any run reached. Goals (DeDLOC,
Appendix G, finds the synchronous collaboration equivalent to one large-batch process; DiLoCo
and SparseLoCo match their baselines within a few percent): **dedloc within 2 %, diloco within
2 %, diloco-topk within 3 %** of the reference's loss, at a point where the reference is at least
``LEARNED`` nats below the floor and every curve still falls (``falling``: lower than at
``FALLING_SHARE`` of the compared samples). Every trainer is honest, so each swarm run also lists
the backbone's log lines that name an accused peer (``accusations``: each one false).
``--export DIR`` also exports the reference's final model with ``barnraise export``'s code and
scores it with transformers' Auto class on the held-out tokens (``runs.single.export``: its loss
beside the floor). ``--from-json`` compares and draws the curves of an earlier run again without
training.
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
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.kit.harness import emit
from benchmarks.swarm.churn import Swarm, accusation_lines
from core.data import ShardServer
from core.project import Manifest, load_manifest
from core.swarm.demo_data import prepare_demo_data
from core.util.process.resources import resource_path
from core.worker.events import PeerEvaluation, PeerMetrics

GOALS = {"dedloc": 0.02, "diloco": 0.02, "diloco-topk": 0.03}
"""Largest relative gap of each swarm's held-out loss to the reference's at equal samples."""
LEARNED = 1.0
"""Nats below the unigram floor the reference must be at the compared point."""
FALLING_SHARE = 0.8
"""A curve still falls when its loss at the compared point is below its loss at this share of it."""
TRAINERS = 3
MODELS = {"demo": "demo/project.toml", "llama-demo": "llama-demo/project.toml"}
RUNS = ("single", "dedloc", "diloco", "diloco-topk")
Point = dict[str, float]


# ---- one process, the global batch ----------------------------------------------------------------


def single_process(
    manifest: Manifest, data: Path, samples: int, checkpoints: Path | None = None
) -> list[Point]:
    """Steps on the global batch until ``samples`` are trained on; the held-out figures every
    ``evaluation.every`` steps; the final model saved as a checkpoint into ``checkpoints``."""
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
    done = step = 0
    while done < samples:
        got = 0
        while got < target:
            outcome = trainer.microbatch()
            if isinstance(outcome, tuple):
                local.accumulate(outcome[0])
                got += outcome[0]
        state.set_learning_rate(step)  # the schedule at the epoch being finished, as peers do
        local.apply(local.mean_gradients(got))
        step += 1
        state.epoch = step
        done += got
        if state.epoch % every == 0:
            measured = measure(model, held.batches, causal=held.causal)
            assert measured.loss is not None, "the single process diverged"
            points.append(
                {"epoch": state.epoch, "samples": done, "loss": measured.loss,
                 "accuracy": measured.accuracy}
            )  # fmt: skip
            print(f"single  epoch {state.epoch:>4}  held-out loss {measured.loss:.4f}", flush=True)
    if checkpoints is not None:
        from core.training.checkpoints import CheckpointStore

        metadata = {"samples": done, "samples_total": done}
        CheckpointStore(checkpoints).save(
            state.epoch, model.state_dict(), state.optimizer.state_dict(), metadata, None
        )
    return points


def exported_reference(
    manifest_path: Path, checkpoints: Path, data: Path, folder: Path, *, floor: float,
    last: Point | None,
) -> dict[str, Any]:  # fmt: skip
    """The reference's checkpoint exported (``barnraise export``'s code) and scored by
    transformers' Auto class on the held-out set's tokens: the model a user would download."""
    import torch
    import transformers

    from core.export.folder import export_model
    from core.export.records import HeldOutFigures
    from core.training.evaluation import load_held_out
    from core.training.peer.recipe import fetch_tokenizer

    manifest = load_manifest(manifest_path)
    figures = None
    if last is not None:
        figures = HeldOutFigures(int(last["epoch"]), last["loss"], last["accuracy"],
                                 manifest.evaluation.samples, floor)  # fmt: skip
    exported = export_model(manifest_path, None, folder, checkpoints=checkpoints,
                            data_base=str(data), evaluation=figures, overwrite=True)  # fmt: skip
    causal = manifest.model.kind == "llama-clm"
    auto = transformers.AutoModelForCausalLM if causal else transformers.AutoModelForMaskedLM
    model = auto.from_pretrained(str(folder)).eval()
    held = load_held_out(manifest, fetch_tokenizer(manifest, str(data), data), data_base=str(data))
    total, tokens = 0.0, 0
    with torch.no_grad():
        for batch in held.batches:
            logits = model(input_ids=batch["input_ids"],
                           attention_mask=batch["attention_mask"]).logits  # fmt: skip
            labels = batch["labels"]
            if causal:
                logits, labels = logits[:, :-1], labels[:, 1:]
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1),
                ignore_index=-100, reduction="sum",
            )  # fmt: skip
            total += float(loss)
            tokens += int((labels != -100).sum())
    loss = total / tokens
    return {
        "folder": str(folder),
        "epoch": exported.epoch,
        "transformers_class": auto.__name__,
        "transformers_loss": loss,
        "floor": floor,
        "below_floor": floor - loss,
        "card_says_samples": exported.samples,
    }


def floor_of(manifest: Manifest, data: Path) -> float:
    """The unigram floor of the held-out set, as the backbone computes it."""
    from core.training.evaluation import load_held_out, project_floor
    from core.training.peer.recipe import fetch_tokenizer

    tokenizer = fetch_tokenizer(manifest, str(data), data)
    held = load_held_out(manifest, tokenizer, data_base=str(data))
    return project_floor(manifest, tokenizer, held, data_base=str(data))


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
    name: str, manifest: Path, base: str, work: Path, *, samples: int, churn_every: float,
    minutes: float, seed: int,
) -> dict[str, Any]:  # fmt: skip
    """A backbone and ``TRAINERS`` trainers with churn until the backbone has evaluated a
    replica trained on ``samples`` samples (or ``minutes`` pass)."""
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
            if swarm.evaluations and swarm.samples_before(swarm.evaluations[-1].epoch) >= samples:
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
    floors = {e.floor for e in swarm.evaluations if e.floor is not None}
    return {
        "points": points,
        # every trainer is honest: a line naming an accused peer is a false accusation
        "accusations": accusation_lines(swarm),
        "leaves": leaves,
        "joins": joins,
        "seconds": round(time.monotonic() - started, 1),
        "epochs": max((m.epoch for _, m in swarm.metrics), default=-1) + 1,
        "backbone_floor": sorted(floors),
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


def compare(runs: dict[str, list[Point]], floor: float) -> dict[str, Any]:
    single = runs["single"]
    reach = min(max((p["samples"] for p in points), default=0) for points in runs.values())
    shared = [p for p in single if p["samples"] <= reach]
    if not shared:
        return {"compared_at_samples": 0, "verdict": "no common samples"}
    at = shared[-1]["samples"]
    reference = shared[-1]["loss"]
    result: dict[str, Any] = {
        "compared_at_samples": at,
        "floor": floor,
        "single_loss": reference,
        "single_below_floor": floor - reference,
        "learning_regime": floor - reference >= LEARNED,
        "single_falling": falling(single, at),
    }
    for name, points in runs.items():
        if name == "single":
            continue
        loss = loss_at(points, at)
        gap = None if loss is None else loss / reference - 1
        goal = GOALS.get(name, GOALS["dedloc"])
        result[name] = {
            "loss": loss,
            "below_floor": None if loss is None else floor - loss,
            "relative_gap": gap,
            "goal": goal,
            # the goal bounds how much worse a swarm may be; a lower loss is reported, not failed
            "within_goal": gap is not None and gap <= goal,
            "falling": falling(points, at),
        }
    return result


def falling(points: list[Point], at: float) -> bool | None:
    """Whether the curve is lower at ``at`` than at ``FALLING_SHARE`` of it (None: not known)."""
    now, then = loss_at(points, at), loss_at(points, FALLING_SHARE * at)
    return None if now is None or then is None else now < then


def plot(runs: dict[str, list[Point]], floor: float, path: Path, title: str) -> None:
    from benchmarks.kit.plot_png import Panel, Series, render_panels

    labels = {
        "single": "one process, global batch (reference)",
        "dedloc": "swarm with churn, dedloc",
        "diloco": "swarm with churn, diloco",
        "diloco-topk": "swarm with churn, diloco + topk",
    }
    reach = max((p["samples"] for points in runs.values() for p in points), default=0) / 1000
    series = [
        Series(
            labels.get(name, name), [(p["samples"] / 1000, p["loss"]) for p in points], markers=True
        )
        for name, points in runs.items()
    ]
    series.append(
        Series(
            f"unigram floor {floor:.2f} (a model that only counts tokens)",
            [(0.0, floor), (reach, floor)],
            color="#777777",
            dashed=True,
        )
    )
    panel = Panel(
        "Held-out loss",
        "samples trained on (thousands)",
        "held-out cross-entropy (nats per predicted token)",
        series,
    )
    render_panels([panel], columns=1, path=path, title=title, panel_size=(760, 460))


# ---- the run -------------------------------------------------------------------------------------


def with_keys(text: str, section: str, values: dict[str, str]) -> str:
    """``text`` with each ``key = value`` set: replaced where the key is, else added to
    ``[section]``. The presets name each of these keys once in the whole file."""
    for key, value in values.items():
        text, found = re.subn(rf"^{key} = .*$", f"{key} = {value}", text, flags=re.M)
        if not found:
            text = text.replace(f"[{section}]\n", f"[{section}]\n{key} = {value}\n", 1)
    return text


def manifests(preset: Path, work: Path, args: argparse.Namespace) -> dict[str, Path]:
    """The runs' manifests: the preset as shipped, evaluated every ``--every`` epochs (rounds),
    and its diloco variants."""
    base = with_keys(preset.read_text(), "evaluation", {"every": str(args.every)})
    diloco = {"mode": '"diloco"', "round_seconds": str(args.round_seconds)}
    texts = {
        "single": base,
        "dedloc": base,
        "diloco": with_keys(base, "training", diloco),
        "diloco-topk": with_keys(
            with_keys(base, "training", {**diloco, "outer_lr": "1.0", "outer_momentum": "0.0"}),
            "averaging",
            {"codec": '"topk"', "density": f"{args.density:g}"},
        ),
    }
    paths = {}
    for name in args.runs:
        path = work / f"{name}.toml"
        path.write_text(texts[name])
        paths[name] = path
    return paths


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    preset = resource_path(MODELS[args.model])
    with tempfile.TemporaryDirectory(prefix="outcome-") as tmp:
        work = Path(tmp)
        data = args.data or work / "data"
        shipped = load_manifest(preset)
        packages = args.corpus == "packages"
        await asyncio.to_thread(lambda: prepare_demo_data(shipped, data, packages=packages))
        paths = manifests(preset, work, args)
        floor = await asyncio.to_thread(floor_of, load_manifest(paths[args.runs[0]]), data)
        print(f"unigram floor of the held-out set: {floor:.4f} nats", flush=True)
        runs: dict[str, list[Point]] = {}
        details: dict[str, Any] = {}
        if "single" in paths:
            started = time.monotonic()
            single = load_manifest(paths["single"])
            checkpoints = work / "single-checkpoints" if args.export else None
            runs["single"] = await asyncio.to_thread(
                single_process, single, data, args.samples, checkpoints
            )
            details["single"] = {"seconds": round(time.monotonic() - started, 1)}
            if args.export and checkpoints is not None:
                last = runs["single"][-1] if runs["single"] else None
                details["single"]["export"] = await asyncio.to_thread(
                    lambda: exported_reference(
                        paths["single"], checkpoints, data, args.export, floor=floor, last=last
                    )
                )
                print(f"exported reference: {details['single']['export']}", flush=True)
        server = ShardServer(data)
        base = await server.start()
        try:
            for name, path in paths.items():
                if name == "single":
                    continue
                run = await swarm_run(
                    name, path, base, work, samples=args.samples,
                    churn_every=args.churn_every, minutes=args.minutes, seed=args.seed,
                )  # fmt: skip
                runs[name] = run.pop("points")
                details[name] = run
        finally:
            await server.close()
    t = shipped.training
    result: dict[str, Any] = {
        "benchmark": "outcome",
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "settings": {
            "model": args.model,
            "corpus": args.corpus,
            "samples": args.samples,
            "trainers": TRAINERS,
            "churn_every": args.churn_every,
            "round_seconds": args.round_seconds,
            "topk_density": args.density,
            "goals": GOALS,
            "learned": LEARNED,
            "target_batch_size": t.target_batch_size,
            "lr": t.lr,
            "optimizer": t.optimizer,
            "outer_lr": t.outer_lr,
            "outer_momentum": t.outer_momentum,
            "held_out_sequences": shipped.evaluation.samples,
            "every": args.every,
        },
        "floor": floor,
        "runs": details,
        "curves": runs,
        "comparison": compare(runs, floor) if "single" in runs else {},
    }
    if args.png and "single" in runs:
        plot(runs, floor, Path(args.png), title(result))
        result["plot"] = args.png
    return result


def title(result: dict[str, Any]) -> str:
    s = result["settings"]
    return f"{s['model']}: {s['trainers']} trainers with churn every {s['churn_every']:g} s"


def redraw(args: argparse.Namespace) -> dict[str, Any]:
    """An earlier run's result with its comparison made again (and its curves drawn)."""
    result: dict[str, Any] = json.loads(args.from_json.read_text())
    runs = result["curves"]
    result["comparison"] = compare(runs, result["floor"])
    if args.png:
        plot(runs, result["floor"], Path(args.png), title(result))
        result["plot"] = args.png
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="demo")
    parser.add_argument("--samples", type=int, default=76_800, help="samples each run trains on")
    parser.add_argument("--runs", nargs="+", choices=RUNS, default=list(RUNS))
    parser.add_argument("--churn-every", type=float, default=60.0, help="seconds between churns")
    parser.add_argument("--round-seconds", type=float, default=20.0, help="diloco: a round")
    parser.add_argument("--minutes", type=float, default=15.0, help="longest a swarm run may take")
    parser.add_argument("--every", type=int, default=10, help="epochs between evaluations")
    parser.add_argument(
        "--density", type=float, default=0.2, help="diloco-topk: the share of values sent"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--corpus", choices=("python-docs", "packages"), default="packages",
        help="the demo's text, or with the installed packages' docstrings (never repeated)",
    )  # fmt: skip
    parser.add_argument("--data", type=Path, default=None, help="keep the corpus here for reruns")
    parser.add_argument(
        "--export", type=Path, default=None,
        help="export the reference's final model here and score it in transformers",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--png", default=None, help="where to draw the curves")
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
