"""Swarm benchmark: collaboration throughput on the demo model against plain single-process training.

    python -m benchmarks.swarm.demo --peers 1,2,4 --seconds 60 --json out.json

``plain``: one process trains the demo model (same microbatch, same data pipeline, all cores) with
no networking at all. Then, for each peer count P: a backbone and P trainer processes on
loopback (the cores split between them, as ``barnraise swarm`` does), timed for ``--seconds`` after
their first epoch. ``samples_per_s`` is the samples the collaboration averaged per second (from the
backbone's per-epoch metrics), ``averaging_s_per_epoch`` the median time a trainer spent from
reaching the target until its step was applied (matchmaking, all-reduce, step).

On a machine with fewer cores than peers the trainers share the cores, so samples/s cannot grow with
P there; the figure to read is the ratio to plain training (the cost of collaborating).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.kit.harness import emit
from core.data import ShardServer
from core.project import load_manifest
from core.swarm.children import ChildProcess, spawn_command
from core.swarm.demo_data import DEMO_MANIFEST, prepare_demo_data
from core.worker.events import PeerEpoch, PeerMetrics, PeerReady


def plain_training(data: Path, seconds: float) -> dict[str, Any]:
    import torch

    from core.training.local import LocalWork
    from core.training.peer.recipe import (
        build_model,
        build_optimizer,
        data_stream,
        fetch_tokenizer,
        mlm_loss,
    )
    from core.training.state import TrainingState
    from core.training.trainer import Trainer

    manifest = load_manifest(DEMO_MANIFEST)
    model = build_model(manifest)
    state = TrainingState(model, build_optimizer(model, manifest))
    local = LocalWork(state, manifest.training.clip_norm)
    local.zeros()
    tokenizer = fetch_tokenizer(manifest, str(data), data)
    batches = data_stream(manifest, tokenizer, data_base=str(data), seed=1)
    trainer = Trainer(model, None, None, batches, mlm_loss)  # type: ignore[arg-type]
    target = manifest.training.target_batch_size
    samples = steps = 0
    started = None
    while started is None or time.perf_counter() - started < seconds:
        got = 0
        while got < target:
            outcome = trainer.microbatch()
            if isinstance(outcome, tuple):
                local.accumulate(outcome[0])
                got += outcome[0]
        local.apply(local.mean_gradients(got))
        steps += 1
        if started is None:  # the first step warms up (imports, allocator, data)
            started = time.perf_counter()
        else:
            samples += got
    elapsed = time.perf_counter() - started
    return {
        "samples_per_s": round(samples / elapsed, 1),
        "steps": steps,
        "threads": torch.get_num_threads(),
        "parameters": sum(p.numel() for p in model.parameters()),
    }


async def collaboration(peers: int, base: str, work: Path, seconds: float) -> dict[str, Any]:
    threads = max(1, ((os.cpu_count() or 2) - 1) // peers)  # a core for loops and data
    common = ["--manifest", str(DEMO_MANIFEST), "--data-base", base, "--threads", str(threads)]
    common += ["--host", "127.0.0.1", "--port", "0"]
    children: list[ChildProcess] = []
    epochs: list[PeerEpoch] = []
    try:
        aux = await spawn_command(
            "backbone",
            ["backbone", *common, "--work-dir", str(work / "backbone"), "--checkpoint-every", "0"],
            work / "backbone.log",
        )
        children.append(aux)
        ready = await asyncio.wait_for(aux.event(), 120)
        if not isinstance(ready, PeerReady):
            raise RuntimeError(f"the backbone did not start (see {work / 'aux.log'})")
        trainers = []
        for i in range(peers):
            args = ["peer", *common, "--initial-peers", ready.address, "--data-seed", str(i)]
            trainer = await spawn_command(
                f"p{i}", [*args, "--work-dir", str(work / f"p{i}")], work / f"p{i}.log"
            )
            children.append(trainer)
            trainers.append(trainer)

        async def watch(child: ChildProcess) -> None:
            while (event := await child.event()) is not None:
                if isinstance(event, PeerEpoch):
                    epochs.append(event)

        watchers = [asyncio.create_task(watch(t)) for t in trainers]
        metrics: list[PeerMetrics] = []
        first_at = None
        while True:
            event = await asyncio.wait_for(aux.event(), 300)
            assert event is not None, "the backbone exited"
            if not isinstance(event, PeerMetrics):
                continue
            now = time.perf_counter()
            if first_at is None:
                first_at = now  # from the end of the first epoch on
                continue
            metrics.append(event)
            if now - first_at >= seconds:
                break
        for task in watchers:
            task.cancel()
        elapsed = time.perf_counter() - first_at
    finally:
        await asyncio.gather(*(child.stop() for child in reversed(children)))
    averaging = [e.seconds for e in epochs if e.seconds]
    return {
        "peers": peers,
        "threads_per_process": threads,
        "epochs": len(metrics),
        "samples_per_s": round(sum(m.samples for m in metrics) / elapsed, 1),
        "averaging_s_per_epoch_median": round(statistics.median(averaging), 3)
        if averaging
        else None,
        "group_sizes": sorted({e.group_size for e in epochs}),
        "loss_first": metrics[0].loss if metrics else None,
        "loss_last": metrics[-1].loss if metrics else None,
    }


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    manifest = load_manifest(DEMO_MANIFEST)
    with tempfile.TemporaryDirectory(prefix="barnraise-swarm-bench-") as tmp:
        work = Path(tmp)
        data = args.data or work / "data"
        if args.data is None:
            await asyncio.to_thread(prepare_demo_data, manifest, data)
        plain = await asyncio.to_thread(plain_training, data, args.seconds / 2)
        print(f"  plain: {plain['samples_per_s']} samples/s", file=sys.stderr, flush=True)
        server = ShardServer(data)
        base = await server.start()
        runs = []
        try:
            for peers in [int(p) for p in args.peers.split(",")]:
                run = await collaboration(peers, base, work / f"run-{peers}", args.seconds)
                run["ratio_to_plain"] = round(run["samples_per_s"] / plain["samples_per_s"], 3)
                print(f"  {peers} peer(s): {run}", file=sys.stderr, flush=True)
                runs.append(run)
        finally:
            await server.close()
    return {
        "benchmark": "swarm",
        "model_parameters": plain["parameters"],
        "target_batch_size": manifest.training.target_batch_size,
        "microbatch_size": manifest.training.microbatch_size,
        "plain": plain,
        "runs": runs,
        "env": {"python": platform.python_version(), "cpus": os.cpu_count()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--peers", default="1,2,4")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--data", type=Path, help="the demo's shards and tokenizer, made already")
    args = parser.parse_args()
    emit(asyncio.run(bench(args)), args.json)


if __name__ == "__main__":
    main()
