"""Why diloco levels off: DiLoCo's rounds on the demo's task in one process, settings varied.

    python -m benchmarks.learning.diloco_sweep --samples 40960 \
        --json docs/benchmarks/learning/diloco_sweep.json

``workers`` replicas of the project's model, each with its own data order and inner optimizer
(the manifest's), take ``inner`` inner steps of one microbatch each, then the round ends as a
diloco peer ends it: every replica's pseudo-gradient (``DilocoState.end_round``), their mean, and
the outer Nesterov step of every replica (``DilocoState.land``) — the landed code with the network
taken away, so that the algorithm is what is measured, not the machine. Every ``--every`` samples
the shared outer parameters are measured on the held-out set beside the unigram floor. The
reference is one process taking a step on every ``target_batch_size`` samples (the dedloc
equivalent), on the same seeds.

A variant is ``name:key=value,key=value`` over ``workers``, ``inner`` (inner steps a round),
``outer_lr``, ``momentum``, ``inner_lr`` (the manifest's ``training.inner_lr``: 0 for the
square-root rule), ``full`` (1: the inner steps at ``lr`` itself), ``total`` (the inner
schedule's total steps), ``warmup``, ``fresh`` (1: the inner moments from zero every round, as
a round a checker replays starts), ``overlap`` (1: a round's exchange lands ``lag`` inner steps
into the next round, as a peer's overlapped exchange does; with ``fresh`` each round starts at
the anchor, as with round checks), and for the ``topk`` codec ``density`` (above 0: the
exchange goes through it), ``bits`` and ``decay`` (``residual_decay``); ``--variant`` may be given
many times. With ``topk`` each replica's pseudo-gradient goes through the codec as a sender's chunk
does, the mean of what arrived goes back as a reducer sends it (its largest values, 8-bit), and
what of a replica's work the mean lacks is its residual, as ``core.averaging.round.feedback`` keeps
it. The default set is
the one the benchmarks page explains: the inner steps at the full ``lr`` (as diloco ran before
the square-root rule), the manifest's diloco defaults, then one change at a time.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.kit.harness import emit
from core.project import Manifest, load_manifest
from core.swarm.demo_data import DEMO_MANIFEST, prepare_demo_data

DEFAULT_VARIANTS = (
    "full-rate:full=1",
    "defaults:",
    "inner-8:inner=8",
    "inner-128:inner=128",
    "outer-1-no-momentum:outer_lr=1.0,momentum=0.0",
)
KEYS = (
    "workers", "inner", "outer_lr", "momentum", "inner_lr", "full", "total", "warmup",
    "density", "bits", "decay", "fresh", "overlap", "lag",
)  # fmt: skip
FLOATS = ("outer_lr", "momentum", "inner_lr", "density", "decay")


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    workers: int = 3
    inner: int = 32
    """Inner steps a round: about what a 10 s round gives each of 3 demo trainers on 2 cores."""
    outer_lr: float = 0.7
    momentum: float = 0.9
    inner_lr: float = 0.0
    full: int = 0
    """1: the inner steps take ``lr`` itself, as before the square-root rule."""
    total: int | None = None
    warmup: int | None = None
    density: float = 0.0
    """Above 0: the pseudo-gradients travel through ``topk`` at this density (0: exactly)."""
    bits: int = 2
    decay: float = 0.95
    """``residual_decay``: what the residual keeps a round (with ``topk`` only)."""
    fresh: int = 0
    """1: the inner moments start from zero every round (``DilocoState.fresh_moments``: a round
    a checker can replay)."""
    overlap: int = 0
    """1: each round's mean lands ``lag`` inner steps into the next round (``DilocoState``'s
    overlap; with ``fresh``, the next round starts at the anchor: ``anchored``)."""
    lag: int = 0
    """With ``overlap``: the inner steps a round takes before the last round's mean lands (the
    exchange's time over a step's)."""

    @classmethod
    def parse(cls, text: str) -> Variant:
        name, _, rest = text.partition(":")
        values: dict[str, Any] = {}
        for item in filter(None, rest.split(",")):
            key, _, value = item.partition("=")
            if key not in KEYS:
                raise SystemExit(f"unknown key {key!r} in {text!r}; choose from {', '.join(KEYS)}")
            values[key] = float(value) if key in FLOATS else int(value)
        return cls(name or "variant", **values)


def tuned(manifest: Manifest, variant: Variant) -> Manifest:
    t = manifest.training
    training = dataclasses.replace(
        t,
        mode="diloco",
        inner_lr=t.lr if variant.full else variant.inner_lr,
        total_steps=t.total_steps if variant.total is None else variant.total,
        warmup_steps=t.warmup_steps if variant.warmup is None else variant.warmup,
    )
    return dataclasses.replace(manifest, training=training)


def exchange(
    deltas: list[list[np.ndarray]], density: float, bits: int
) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
    """The mean that lands and each replica's residual. ``density`` 0: the exact mean, nothing
    left; else through ``topk`` as the network's round carries it (one chunk for the whole vector:
    the blocks of 4096 fall a little differently than in a group's parts)."""
    shapes = [d.shape for d in deltas[0]]
    if density == 0:
        return [np.mean([d[i] for d in deltas], axis=0) for i in range(len(shapes))], [
            [np.zeros_like(a) for a in d] for d in deltas
        ]
    from core.codecs.chunks import decode, encode
    from core.codecs.topk import top_k

    codec = top_k(density, bits)
    flats = [np.concatenate([a.reshape(-1) for a in d]).astype(np.float32) for d in deltas]
    count = flats[0].size
    sent = [decode(codec, encode(codec, f), count) for f in flats]
    mean = np.mean(sent, axis=0).astype(np.float32)
    back = codec.for_sum(len(deltas))
    landed = decode(back, encode(back, mean), count)
    lefts = []
    for flat, own in zip(flats, sent, strict=True):
        left = flat - own
        np.copyto(left, flat, where=landed == 0)  # a value the mean dropped comes back whole
        lefts.append(left)

    ends = np.cumsum([int(np.prod(shape)) for shape in shapes])[:-1]

    def split(flat: np.ndarray) -> list[np.ndarray]:
        parts = np.split(flat, ends)
        return [part.reshape(shape).copy() for part, shape in zip(parts, shapes, strict=True)]

    return split(landed), [split(left) for left in lefts]


def run(
    manifest: Manifest, data: Path, variant: Variant, samples: int, every: int
) -> dict[str, Any]:
    import torch

    from core.training.diloco.state import DilocoState
    from core.training.evaluation import below_floor, load_held_out, measure, project_floor
    from core.training.peer.recipe import (
        build_model,
        data_stream,
        fetch_tokenizer,
        mlm_loss,
        training_state,
    )
    from core.training.trainer import Trainer

    manifest = tuned(manifest, variant)
    tokenizer = fetch_tokenizer(manifest, str(data), data)
    held = load_held_out(manifest, tokenizer, data_base=str(data))
    floor = project_floor(manifest, tokenizer, held, data_base=str(data))
    clip = manifest.training.clip_norm or None
    replicas = []
    for k in range(variant.workers):
        model = build_model(manifest)  # seeded: every replica starts from the same weights
        state = training_state(model, manifest)
        diloco = DilocoState(
            state, outer_lr=variant.outer_lr, outer_momentum=variant.momentum,
            overlap=bool(variant.overlap), sparse=variant.density > 0, clip_norm=clip,
            residual_decay=variant.decay, fresh_moments=bool(variant.fresh),
        )  # fmt: skip
        batches = data_stream(manifest, tokenizer, data_base=str(data), seed=k + 1)
        replicas.append((model, diloco, Trainer(model, None, None, batches, mlm_loss)))  # type: ignore[arg-type]
    evaluated = build_model(manifest)  # the anchor, measured apart from a replica's own steps
    points: list[dict[str, float]] = []
    done = next_measure = 0
    started = time.monotonic()
    lag = min(variant.lag, variant.inner) if variant.overlap else 0
    out: tuple[list[np.ndarray], list[list[np.ndarray]]] | None = None

    def inner(diloco: DilocoState, trainer: Trainer, count: int) -> int:
        taken = 0
        for _ in range(count):
            outcome = trainer.microbatch()
            if isinstance(outcome, tuple):
                diloco.inner_step()
                taken += outcome[0]
        return taken

    def land(landing: tuple[list[np.ndarray], list[list[np.ndarray]]]) -> None:
        mean, lefts = landing
        for (_, diloco, _), left in zip(replicas, lefts, strict=True):
            diloco.land([m.copy() for m in mean], left, [], per_round=variant.inner)

    while done < samples:
        deltas = []
        for k, (_, diloco, trainer) in enumerate(replicas):
            done += inner(diloco, trainer, lag)
            if out is not None:  # the last round lands here, ``lag`` steps in (overlap)
                mean, lefts = out
                diloco.land([m.copy() for m in mean], lefts[k], [], per_round=variant.inner)
            done += inner(diloco, trainer, variant.inner - lag)
            deltas.append(diloco.end_round())
            if diloco.anchored:
                diloco.restart_at_anchor()
        out = exchange(deltas, variant.density, variant.bits)
        if not variant.overlap:
            land(out)
            out = None
        if done >= next_measure:
            model = evaluated
            model.load_state_dict(replicas[0][1].model_state())
            with torch.no_grad():
                measured = measure(model, held.batches, causal=held.causal)
            points.append({"samples": done, "loss": measured.loss or float("nan"),
                           "lr": replicas[0][1].state.optimizer.param_groups[0]["lr"]})  # fmt: skip
            print(f"{variant.name:<22} {done:>7} samples  {below_floor(measured.loss, floor)}  "
                  f"inner lr {points[-1]['lr']:.5f}", flush=True)  # fmt: skip
            next_measure += every
    return {
        "variant": dataclasses.asdict(variant),
        "floor": floor,
        "points": points,
        "seconds": round(time.monotonic() - started, 1),
    }


def reference(manifest: Manifest, data: Path, samples: int, every: int) -> dict[str, Any]:
    """One process, a step every ``target_batch_size`` samples (outcome.py's reference)."""
    from benchmarks.learning.outcome import single_process

    epochs = max(1, every // manifest.training.target_batch_size)
    evaluation = dataclasses.replace(manifest.evaluation, every=epochs)
    started = time.monotonic()
    points = single_process(dataclasses.replace(manifest, evaluation=evaluation), data, samples)
    return {"points": points, "seconds": round(time.monotonic() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--manifest", type=Path, default=DEMO_MANIFEST)
    parser.add_argument(
        "--corpus", choices=("python-docs", "packages"), default="python-docs",
        help="the demo's text, or with the installed packages' docstrings (outcome.py's)",
    )  # fmt: skip
    parser.add_argument("--data", type=Path, default=None, help="where the corpus is kept")
    parser.add_argument("--samples", type=int, default=40960)
    parser.add_argument("--every", type=int, default=2560, help="samples between evaluations")
    parser.add_argument("--variant", action="append", default=None)
    parser.add_argument("--no-reference", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    manifest = load_manifest(args.manifest)
    data = args.data or Path(os.environ.get("BARNRAISE_DEMO_DATA", "/tmp/barnraise-demo-data"))
    prepare_demo_data(load_manifest(DEMO_MANIFEST), data, packages=args.corpus == "packages")
    variants = [Variant.parse(v) for v in (args.variant or DEFAULT_VARIANTS)]
    result: dict[str, Any] = {
        "benchmark": "diloco_sweep",
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "settings": {
            "manifest": str(args.manifest),
            "corpus": args.corpus,
            "samples": args.samples,
            "every": args.every,
        },
        "runs": {},
    }
    if not args.no_reference:
        result["reference"] = reference(manifest, data, args.samples, args.every)
    for variant in variants:
        result["runs"][variant.name] = run(manifest, data, variant, args.samples, args.every)
    emit(result, args.json)


if __name__ == "__main__":
    main()
