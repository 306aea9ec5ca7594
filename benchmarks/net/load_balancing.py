"""Load balancing benchmark: all-reduce over links of different speeds, LP shares against equal shares.

    python -m benchmarks.net.load_balancing --json out.json

Four trainer peers whose links are limited to 4:2:1:1 (``--speeds``) times ``--unit`` bytes/s (each
direction, by the Host's own bandwidth limiter), plus one helper that only reduces (no data, weight 0)
with a link ``--helper-speed`` times the unit; every peer is its own OS process. Rounds cycle through three
ways of splitting the vector, all with the same chunk size:

- ``balanced``: every member announces its link speeds and the DeDLOC linear program sizes the parts;
- ``equal``: nobody announces anything, so every dialable member, the helper included, reduces
  an equal share (load balancing off);
- ``plain``: the helper sits out and the four trainers split the vector equally (neither
  helper nor balancing).

Each round times the all-reduce from the trigger until every peer has its result, checks every
trainer's result against the exact mean, and records the parts that were used. ``predicted_s`` is the
time the traffic alone implies (bytes through the busiest link over its speed), so the measured
speedup can be read against what the topology allows.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.kit.harness import (
    PeerProcess,
    as_module,
    commands,
    emit,
    precompile,
    reply,
    stop_all,
    tensor_for,
)

MODES = ("balanced", "equal", "plain")
"""``plain``: the four trainers alone, equal shares (the helper sits out)."""


# ---- a peer (worker process) ---------------------------------------------------------------------


async def worker(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(1)  # five peers share this machine's cores
    from core.averaging import Averager, AveragerConfig
    from core.averaging.round.load_balancing import PlanCache
    from core.dht import DHTConfig, DHTNode, HostTransport
    from core.net import Host, Identity, NetConfig

    speed = args.speed
    host = Host(Identity.generate(), NetConfig(upload_limit=speed, download_limit=speed))
    await host.start()
    dht = DHTNode(HostTransport(host), DHTConfig())
    await dht.start([args.join] if args.join else [])
    reply({"address": str(host.addresses[0])})
    tensor = np.zeros(args.numel, dtype=np.float32)
    pending = None
    averager: Averager | None = None
    plans = PlanCache()
    async for command in commands():
        op = command["op"]
        answer: dict[str, Any] = {}
        if op == "mode":
            # one averager at a time holds the all-reduce handler of this host
            if averager is not None:
                await averager.close()
            announce = command["mode"] == "balanced"
            group = command["group"]
            config = AveragerConfig(
                target_group_size=group,
                min_group_size=group,
                compute=0.0 if args.aux else 1.0,
                upload=speed if announce else 0.0,
                download=speed if announce else 0.0,
                reduce_only=args.aux,
                chunk_bytes=args.chunk_kib * 1024,  # the same in both modes
                allreduce_timeout=600.0,
                sender_timeout=60.0,
                reducer_timeout=120.0,
            )
            averager = Averager(host, dht, f"lb-{command['mode']}", config)
            # one cache for the whole run, as one long-lived averager would have: a group seen
            # before reuses its plan (the first round of each split pays the solve; lp_solve_ms)
            averager.plans = plans
        elif op == "load":
            if not args.aux:
                tensor = tensor_for(args.seed, command["round"], args.index, args.numel)
        elif op == "prepare":
            assert averager is not None
            pending = await averager.prepare(f"round-{command['round']}", timeout=60)
        elif op == "run":
            assert pending is not None
            result = await pending.run([tensor])
            answer = {
                "complete": result.complete,
                "summary": result.summary(),
                "parts": result.parts,
                "members": [str(m) for m in result.members],
            }
        elif op == "check":
            if not args.aux:
                reference = sum(
                    tensor_for(args.seed, command["round"], p, args.numel)
                    for p in range(args.trainers)
                ) / np.float32(args.trainers)
                answer = {"max_abs_err_vs_mean": float(np.max(np.abs(tensor - reference)))}
        else:
            break
        reply(answer)
    if averager is not None:
        await averager.close()
    await dht.close()
    await host.close()


# ---- the driver ----------------------------------------------------------------------------------


class Peer(PeerProcess):
    speed = 0.0
    aux = False


async def start_peer(
    args: argparse.Namespace, index: int, speed: float, aux: bool, join: str | None
) -> Peer:
    command = [
        *as_module(__spec__),
        "--worker",
        "--index",
        str(index),
        "--speed",
        str(speed),
        "--numel",
        str(args.numel),
        "--trainers",
        str(len(args.speeds.split(","))),
        "--chunk-kib",
        str(args.chunk_kib),
        "--seed",
        str(args.seed),
    ]
    if aux:
        command.append("--aux")
    if join:
        command += ["--join", join]
    peer = await Peer.start(command)
    peer.speed, peer.aux = speed, aux
    return peer


def predicted_seconds(speeds: list[float], aux: list[bool], parts: list[int], numel: int) -> float:
    """Bytes through the busiest link over its speed: a lower bound for a perfectly pipelined round."""
    receivers = sum(1 for a in aux if not a)
    worst = 0.0
    for speed, auxiliary, part in zip(speeds, aux, parts, strict=True):
        mine = part * 4
        if auxiliary:
            sent = received = receivers * mine
        else:
            # my data for the others' parts out, their data for my part in, and the results both ways
            sent = (numel * 4 - mine) + (receivers - 1) * mine
            received = sent
        worst = max(worst, sent / speed, received / speed)
    return worst


def lp_solve_ms(speeds: list[float], aux: list[bool], vector_bytes: int) -> float:
    """How long one member takes to solve this group's program (what a new group costs)."""
    from core.averaging.round.load_balancing import PeerCapacity, solve

    peers = [
        PeerCapacity(0.0 if a else 1.0, speed, speed, reduce_only=a)
        for speed, a in zip(speeds, aux, strict=True)
    ]
    solve(peers, vector_bytes)  # imports and first-call costs
    times = []
    for _ in range(5):
        started = time.perf_counter()
        solve(peers, vector_bytes)
        times.append(time.perf_counter() - started)
    return round(statistics.median(times) * 1000, 1)


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    trainer_speeds = [float(x) for x in args.speeds.split(",")]
    speeds = [s * args.unit for s in trainer_speeds] + [args.helper_speed * args.unit]
    aux = [False] * len(trainer_speeds) + [True]
    peers: list[Peer] = []
    for index, (speed, auxiliary) in enumerate(zip(speeds, aux, strict=True)):
        join = peers[0].address if peers else None
        peers.append(await start_peer(args, index, speed, auxiliary, join))
    await asyncio.sleep(1.0)
    result: dict[str, Any] = {
        "benchmark": "load_balancing",
        "implementation": "barnraise",
        "numel": args.numel,
        "chunk_kib": args.chunk_kib,
        "tensor_mb": round(args.numel * 4 / 2**20, 1),
        "link_speeds_MBps": [round(s / 1e6, 2) for s in speeds],
        "reduce_only": aux,
        "rounds": [],
    }
    try:
        for round_index in range(args.rounds):
            for mode in MODES:
                key = round_index * len(MODES) + MODES.index(mode)
                group = [p for p in peers if mode != "plain" or not p.aux]
                await asyncio.gather(
                    *(p.ask(op="mode", mode=mode, group=len(group)) for p in group)
                )
                await asyncio.gather(*(p.ask(op="load", round=key) for p in group))
                await asyncio.gather(*(p.ask(op="prepare", round=key) for p in group))
                t0 = time.perf_counter()
                outcomes = await asyncio.gather(*(p.ask(op="run", round=key) for p in group))
                took = time.perf_counter() - t0
                checks = await asyncio.gather(*(p.ask(op="check", round=key) for p in group))
                order = {m.rsplit("/", 1)[-1]: i for i, m in enumerate(outcomes[0]["members"])}
                parts = [outcomes[0]["parts"][order[p.peer_id]] for p in group]
                predicted = predicted_seconds(
                    [p.speed for p in group], [p.aux for p in group], parts, args.numel
                )
                entry = {
                    "round": round_index,
                    "mode": mode,
                    "allreduce_s": round(took, 3),
                    "parts_by_peer": parts,
                    "predicted_s": round(predicted, 3),
                    "reported_complete": all(o["complete"] for o in outcomes),
                    "max_abs_err_vs_mean": max(c.get("max_abs_err_vs_mean", 0.0) for c in checks),
                    "summaries": sorted({o["summary"] for o in outcomes}),
                }
                result["rounds"].append(entry)
                print(f"  round {round_index} {mode}: {took:.3f} s", file=sys.stderr, flush=True)
    finally:
        await stop_all(peers)
    rounds = result["rounds"]
    fields = (("balanced", "balanced_s"), ("equal", "equal_parts_s"), ("plain", "plain_s"))
    for mode, field in fields:
        mine = [r for r in rounds if r["mode"] == mode]
        result[field] = round(statistics.median(r["allreduce_s"] for r in mine), 3)
        result[f"{mode}_parts_by_peer"] = mine[-1]["parts_by_peer"]
        result[f"{mode}_predicted_s"] = mine[-1]["predicted_s"]
    result["speedup"] = round(result["equal_parts_s"] / result["balanced_s"], 3)
    result["predicted_speedup"] = round(
        result["equal_predicted_s"] / result["balanced_predicted_s"], 3
    )
    result["speedup_over_plain"] = round(result["plain_s"] / result["balanced_s"], 3)
    result["lp_solve_ms"] = lp_solve_ms(speeds, aux, args.numel * 4)
    result["averaging_complete"] = all(
        r["reported_complete"] and r["max_abs_err_vs_mean"] < 1e-4 for r in rounds
    )
    result["env"] = {"python": platform.python_version(), "cpus": os.cpu_count()}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--numel", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--speeds", default="4,2,1,1", help="trainer links, in units")
    parser.add_argument("--unit", type=float, default=2.5e6, help="bytes/s of the slowest link")
    parser.add_argument(
        "--helper-speed", type=float, default=8.0, help="the reduce-only helper's link, in units"
    )
    parser.add_argument(
        "--chunk-kib", type=int, default=128, help="all-reduce chunk, the same for every split"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--speed", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--aux", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--trainers", type=int, default=4, help=argparse.SUPPRESS)
    parser.add_argument("--join", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(worker(args))
        return
    precompile()
    emit(asyncio.run(bench(args)), args.json)


if __name__ == "__main__":
    main()
