"""Can a checker replay a diloco member's round? How far an honest round lands from its replay,
beside how far each cheat lands, on the demo's model in one process.

    python -m benchmarks.robust.diloco_replay --json out.json

A round is replayable when it starts from what every peer holds: the anchor, the inner schedule's
clock, and inner moments that start from zero (``fresh``: the moments are cleared at each round's
start), with the batches the member names. ``warm`` rounds of three replicas first bring the model
to where it learns (the sweep's loop: ``benchmarks.learning.diloco_sweep``); then one round is
computed by each kind of member below, and replayed by a checker in float32 on the batches the
member claims (``core.training.diloco.checks.replay``). Each member's distance from its replay is the
relative L2 error of its work (over the whole model and over one fifth of it, a part as the
backbone reduces one), with the cosine, and whether ``judge`` passes it at its precision's limit.

- honest: ``fp32`` (the replay's own precision), ``bf16`` and ``fp16`` (autocast), ``x4`` and
  ``x12`` the inner steps of a round (a fast GPU; the replay takes as many), ``bf16_x12``;
- ``stale_first``: an honest round whose first step takes a gradient computed at the end of the
  round before (the microbatch that was computing as that round landed). A trainer keeping round
  receipts leaves that microbatch out; this says how far the round would land otherwise;
- cheats: ``lazy_1_16`` (a sixteenth of each batch), ``reused`` (one gradient for every step),
  ``skipped_half`` (half the steps, claims all), ``claims_2x`` (claims twice its steps),
  ``copies_mean`` (sends the mean of the others' round), ``copies_partner`` (a partner's
  update plus 1 % noise, claiming its own batches).

The figure that decides the design: the largest honest error beside the smallest cheat's.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import platform
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.kit.harness import emit
from core.project import Manifest, load_manifest
from core.swarm.demo_data import DEMO_MANIFEST, prepare_demo_data

Batch = dict[str, torch.Tensor]


@dataclasses.dataclass
class Replica:
    model: torch.nn.Module
    diloco: Any  # DilocoState


def replica(manifest: Manifest) -> Replica:
    from core.training.diloco.state import DilocoState
    from core.training.peer.recipe import build_model, training_state

    model = build_model(manifest)
    state = training_state(model, manifest)
    t = manifest.training
    diloco = DilocoState(
        state, outer_lr=t.outer_lr, outer_momentum=t.outer_momentum, overlap=False,
        sparse=False, clip_norm=t.clip_norm or None, fresh_moments=True,
    )  # fmt: skip
    return Replica(model, diloco)


def start_round(r: Replica, anchor: list[np.ndarray], schedule: float, per_round: float) -> None:
    """Where a replayable round starts: the anchor, the schedule, inner moments at zero."""
    r.diloco.start_round_at(anchor, schedule, per_round)


def steps(
    r: Replica, batches: list[Batch], *, dtype: torch.dtype | None = None, take: int = 0,
    gradient: Callable[[], None] | None = None,
) -> None:  # fmt: skip
    """Inner steps, one a batch: in autocast to ``dtype``; on the first ``take`` samples of each
    (0: all); ``gradient``: sets ``.grad`` itself (a reused gradient)."""
    from core.training.peer.recipe import mlm_loss

    for batch in batches:
        if gradient is not None:
            gradient()
        else:
            part = {k: v[:take] for k, v in batch.items()} if take else batch
            cast = torch.autocast("cpu", dtype=dtype) if dtype is not None else nullcontext()
            with cast:
                loss = mlm_loss(r.model, part)
            loss.float().backward()  # type: ignore[no-untyped-call]
        r.diloco.inner_step()


def end(r: Replica) -> np.ndarray:
    return np.concatenate([d.reshape(-1) for d in r.diloco.end_round(decay=False)])


def distance(sent: np.ndarray, replayed: np.ndarray, part: slice, precision: str) -> dict[str, Any]:
    from core.training.diloco.checks.replay import judge

    whole, piece = judge(sent, replayed, precision), judge(sent[part], replayed[part], precision)
    cosine = float(sent @ replayed / max(np.linalg.norm(sent) * np.linalg.norm(replayed), 1e-30))
    return {"error": whole.distance, "part_error": piece.distance, "cosine": cosine,
            "limit": whole.limit, "passes": whole.passed and piece.passed}  # fmt: skip


def run(manifest: Manifest, data: Path, *, inner: int, warm: int) -> dict[str, Any]:
    from core.training.peer.recipe import data_stream, fetch_tokenizer, mlm_loss

    tokenizer = fetch_tokenizer(manifest, str(data), data)
    streams: list[Iterator[Batch]] = [
        data_stream(manifest, tokenizer, data_base=str(data), seed=k + 1) for k in range(4)
    ]
    workers = [replica(manifest) for _ in range(3)]
    checker = replica(manifest)
    anchor = [a.copy() for a in workers[0].diloco.anchor]
    schedule = 0.0
    started = time.monotonic()
    for _ in range(warm):  # three replicas learn together, fresh moments every round
        deltas = []
        for k, w in enumerate(workers):
            start_round(w, anchor, schedule, inner)
            steps(w, [next(streams[k]) for _ in range(inner)])
            deltas.append(w.diloco.end_round(decay=False))
        mean = [np.mean([d[i] for d in deltas], axis=0) for i in range(len(anchor))]
        w0 = workers[0].diloco
        w0.outer.step(mean)
        anchor = [a.copy() for a in w0.anchor]
        schedule += inner
    warm_seconds = time.monotonic() - started

    def fresh(count: int, k: int = 3) -> list[Batch]:
        return [next(streams[k]) for _ in range(count)]

    size = sum(a.size for a in anchor)
    part = slice(2 * size // 5, 3 * size // 5)
    member = workers[0]

    def replay(batches: list[Batch]) -> np.ndarray:
        from core.training.diloco.checks.replay import RoundStart
        from core.training.diloco.checks.replay import replay as replayed

        return replayed(checker.diloco, RoundStart(anchor, schedule, inner), batches, mlm_loss)

    def honest(batches: list[Batch], dtype: torch.dtype | None = None) -> np.ndarray:
        start_round(member, anchor, schedule, inner)
        steps(member, batches, dtype=dtype)
        return end(member)

    results: dict[str, dict[str, float]] = {}

    def record(
        name: str, sent: np.ndarray, claimed: list[Batch], precision: str = "float32"
    ) -> None:
        t = time.monotonic()
        results[name] = distance(sent, replay(claimed), part, precision) | {
            "steps_claimed": len(claimed), "replay_seconds": round(time.monotonic() - t, 2)}  # fmt: skip
        print(f"{name:<16} {results[name]}", flush=True)

    batches = fresh(inner)
    record("fp32", honest(batches), batches)
    record("bf16", honest(batches, torch.bfloat16), batches, "bfloat16")
    record("fp16", honest(batches, torch.float16), batches, "float16")
    for times in (4, 12):
        many = fresh(times * inner)
        record(f"x{times}", honest(many), many)
    record("bf16_x12", honest(many, torch.bfloat16), many, "bfloat16")
    # a round's first step from a gradient taken before the round began: the microbatch that was
    # computing when the last round ended, at that round's last parameters (its step waits for
    # the landing); a stand-in for them is the end of another round from this anchor
    start_round(member, anchor, schedule, inner)
    steps(member, fresh(inner))
    mlm_loss(member.model, batches[0]).backward()  # type: ignore[no-untyped-call]
    stale = [p.grad.clone() if p.grad is not None else None for p in member.diloco.state.parameters]
    start_round(member, anchor, schedule, inner)
    for p, g in zip(member.diloco.state.parameters, stale, strict=True):
        p.grad = g
    member.diloco.inner_step()
    steps(member, batches[1:])
    record("stale_first", end(member), batches)
    size_of = int(batches[0]["input_ids"].shape[0])
    start_round(member, anchor, schedule, inner)
    steps(member, batches, take=max(1, size_of // 16))
    record("lazy_1_16", end(member), batches)

    start_round(member, anchor, schedule, inner)
    # one gradient, taken at the anchor, for every step
    mlm_loss(member.model, batches[0]).backward()  # type: ignore[no-untyped-call]
    kept = [p.grad.clone() if p.grad is not None else None for p in member.diloco.state.parameters]

    def reuse() -> None:
        for p, g in zip(member.diloco.state.parameters, kept, strict=True):
            p.grad = None if g is None else g.clone()

    for p in member.diloco.state.parameters:
        p.grad = None
    steps(member, batches, gradient=reuse)
    record("reused", end(member), batches)
    record("skipped_half", honest(batches[: inner // 2]), batches)
    record("claims_2x", honest(batches), batches + fresh(inner))
    others = [honest(fresh(inner, k), None) for k in (1, 2)]
    record("copies_mean", np.mean(others, axis=0), batches)
    noise = np.random.default_rng(0).standard_normal(size).astype(np.float32)
    partner = others[0]
    noisy = partner + 0.01 * float(np.linalg.norm(partner)) / math.sqrt(size) * noise
    record("copies_partner", noisy, batches)
    honest_names = ("fp32", "bf16", "fp16", "x4", "x12", "bf16_x12")
    cheat_names = [k for k in results if k not in (*honest_names, "stale_first")]
    worst = max(results[n]["error"] for n in honest_names)
    best_cheat = min(results[k]["error"] for k in cheat_names)
    return {
        "parameters": size,
        "inner": inner,
        "warm_rounds": warm,
        "warm_seconds": round(warm_seconds, 1),
        "members": results,
        "worst_honest_error": worst,
        "least_cheat_error": best_cheat,
        "separation": best_cheat / max(worst, 1e-30),
        "goals": {
            "every_honest_member_passes": all(results[n]["passes"] for n in honest_names),
            "every_cheat_fails": not any(results[k]["passes"] for k in cheat_names),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inner", type=int, default=32, help="inner steps of a 1x round")
    parser.add_argument("--warm", type=int, default=20, help="rounds before the one replayed")
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    manifest = load_manifest(DEMO_MANIFEST)
    manifest = dataclasses.replace(
        manifest, training=dataclasses.replace(manifest.training, mode="diloco")
    )
    data = args.data or Path(os.environ.get("BARNRAISE_DEMO_DATA", "/tmp/barnraise-demo-data"))
    prepare_demo_data(load_manifest(DEMO_MANIFEST), data)
    torch.manual_seed(0)
    result = {
        "benchmark": "diloco_replay",
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "settings": {"inner": args.inner, "warm": args.warm},
        "run": run(manifest, data, inner=args.inner, warm=args.warm),
    }
    emit(result, args.json)


if __name__ == "__main__":
    main()
