"""What robust aggregation costs: the all-reduce with the plain mean and with CenteredClip, side by side.

    python -m benchmarks.robust.aggregation --peers 4 --numel 10000000 --repeats 9 --json out.json

Peers run as in ``benchmarks/net/allreduce.py``: each its own OS process (DHT node, Host, Averager, one
BLAS thread), holding ``--numel`` random float32 values, all honest. Rounds alternate between the
mean (with the screening checks, as every reducer now runs them) and CenteredClip, ``--repeats``
rounds of each, so that both see the same machine, warm or busy; each round times the all-reduce
from the trigger until every peer has its result. ``ratio`` is CenteredClip's median over the mean's
(goal: 1.15 or less); ``ratio_paired_median`` is the median of each repeat's own ratio (its two
rounds ran back to back), which load that comes and goes on a shared machine moves less. Every
result is compared with the exact mean of the inputs: with honest peers CenteredClip clips nobody
and returns the mean, so ``rel_rms_err`` stays near 0 for both.

``--verified`` adds a third method to the alternation: CenteredClip with reducer verification on
(``VerificationConfig(enabled=True)``, its defaults: signed commitments and seals on every chunk, one
part spot-checked per round by the group), and ``ratio_verified``, its median over the mean's.

``--quick`` runs a small configuration (3 peers, 200,000 values, one round of each) in seconds, for
the test that checks this script's fields. ``--losses`` adds the loss figures of the Byzantine
training runs (``loss_figures``, from ``benchmarks/robust/byzantine_losses.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from dataclasses import replace
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

METHODS = ("mean", "centered_clip")
VERIFIED = "verified"
"""CenteredClip with reducer verification on (``--verified``)."""


# ---- a peer (worker process) ---------------------------------------------------------------------


async def worker(args: argparse.Namespace) -> None:
    from core.averaging import Averager, AveragerConfig
    from core.averaging.robust.aggregation import AggregationConfig, Method
    from core.averaging.round.checks import VerificationConfig
    from core.dht import DHTConfig, DHTNode, HostTransport
    from core.net import Host, Identity

    host = Host(Identity.generate())
    await host.start()
    dht = DHTNode(HostTransport(host), DHTConfig())
    await dht.start([args.join] if args.join else [])
    config = AveragerConfig(
        target_group_size=args.peers, min_group_size=args.peers, allreduce_timeout=120.0
    )
    averager = Averager(host, dht, "robust", config)
    reply({"address": str(host.addresses[0])})
    tensor: np.ndarray | None = None
    pending = None
    async for command in commands():
        op = command["op"]
        answer: dict[str, Any] = {}
        if op == "load":
            tensor = tensor_for(args.seed, command["round"], args.index, args.numel)
        elif op == "prepare":
            # the reducer reads the method when the round runs: every member sets the same one
            verified = command["method"] == VERIFIED
            method = Method.CENTERED_CLIP if verified else Method(command["method"])
            averager.config = replace(
                config,
                aggregation=AggregationConfig(method=method),
                verification=VerificationConfig(enabled=verified),
            )
            pending = await averager.prepare(f"round-{command['round']}", timeout=60)
            answer = {"matched": pending.size}
        elif op == "run":
            assert pending is not None
            assert tensor is not None
            cpu = time.process_time()
            result = await pending.run([tensor])
            answer = {
                "cpu_s": time.process_time() - cpu,
                "complete": result.complete,
                "findings": len(result.findings),
                "summary": result.summary(),
            }
        elif op == "check":
            assert tensor is not None
            inputs = [
                tensor_for(args.seed, command["round"], p, args.numel) for p in range(args.peers)
            ]
            reference = sum(inputs) / np.float32(args.peers)
            spread = float(np.sqrt(np.mean((inputs[args.index] - reference) ** 2)))
            error = float(np.sqrt(np.mean((tensor - reference) ** 2)))
            answer = {"rel_rms_err": error / max(spread, 1e-12)}
        else:
            break
        reply(answer)
    await averager.close()
    await dht.close()
    await host.close()


# ---- the driver ----------------------------------------------------------------------------------


async def start_peer(args: argparse.Namespace, index: int, join: str | None) -> PeerProcess:
    command = [*as_module(__spec__), "--worker", "--index", str(index), "--peers", str(args.peers)]
    command += ["--numel", str(args.numel), "--seed", str(args.seed)]
    if join:
        command += ["--join", join]
    return await PeerProcess.start(command)


async def one_round(peers: list[PeerProcess], round_index: int, method: str) -> dict[str, Any]:
    await asyncio.gather(*(p.ask(op="load", round=round_index) for p in peers))
    await asyncio.gather(*(p.ask(op="prepare", round=round_index, method=method) for p in peers))
    started = time.perf_counter()
    outcomes = await asyncio.gather(*(p.ask(op="run", round=round_index) for p in peers))
    seconds = time.perf_counter() - started
    checks = await asyncio.gather(*(p.ask(op="check", round=round_index) for p in peers))
    return {
        "round": round_index,
        "method": method,
        "allreduce_s": round(seconds, 4),
        "rel_rms_err": max(c["rel_rms_err"] for c in checks),
        "reported_complete": all(o["complete"] for o in outcomes),
        "findings": sum(o["findings"] for o in outcomes),
        "cpu_s_per_peer": [round(o["cpu_s"], 3) for o in outcomes],
        "summaries": sorted({o["summary"] for o in outcomes}),
    }


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {
        "benchmark": "robust",
        "peers": args.peers,
        "numel": args.numel,
        "repeats": args.repeats,
        "codec": "none",
        "rounds": [],
    }
    started = time.perf_counter()
    first = await start_peer(args, 0, None)
    others = await asyncio.gather(
        *(start_peer(args, i, first.address) for i in range(1, args.peers))
    )
    peers = [first, *others]
    result["setup_s"] = round(time.perf_counter() - started, 2)
    methods = (*METHODS, VERIFIED) if args.verified else METHODS
    try:
        await one_round(peers, 0, "mean")  # warm-up: connections, imports, first allocations
        for repeat in range(args.repeats):
            # alternate which goes first, so that neither always follows the other
            order = methods if repeat % 2 == 0 else methods[::-1]
            for method in order:
                row = await one_round(peers, len(result["rounds"]) + 1, method)
                result["rounds"].append(row)
                print(
                    f"  {method}: all-reduce {row['allreduce_s']:.3f} s",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        await stop_all(peers)
    for method in methods:
        rows = [r for r in result["rounds"] if r["method"] == method]
        result[method] = {
            "allreduce_s_median": round(statistics.median(r["allreduce_s"] for r in rows), 4),
            "allreduce_s_all": [r["allreduce_s"] for r in rows],
            "cpu_s_per_peer_median": round(
                statistics.median(c for r in rows for c in r["cpu_s_per_peer"]), 4
            ),
            "rel_rms_err_worst": max(r["rel_rms_err"] for r in rows),
            "complete": all(r["reported_complete"] for r in rows),
            "findings": sum(r["findings"] for r in rows),
        }
    mean, clip = result["mean"]["allreduce_s_median"], result["centered_clip"]["allreduce_s_median"]
    result["ratio"] = round(clip / mean, 3) if mean > 0 else None
    if args.verified:
        verified = result[VERIFIED]["allreduce_s_median"]
        result["ratio_verified"] = round(verified / mean, 3) if mean > 0 else None
    # each repeat's rounds ran back to back: their ratio is blind to load that drifts
    step = len(methods)
    pairs = [result["rounds"][i : i + step] for i in range(0, len(result["rounds"]), step)]
    paired = [
        next(r["allreduce_s"] for r in pair if r["method"] == "centered_clip")
        / next(r["allreduce_s"] for r in pair if r["method"] == "mean")
        for pair in pairs
    ]
    result["ratio_paired_median"] = round(statistics.median(paired), 3)
    result["goal_ratio"] = 1.15
    result["env"] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "numpy": np.__version__,
    }
    return result


def loss_figures(args: argparse.Namespace) -> dict[str, Any]:
    """The loss figures of the Byzantine training runs.

    They are computed by ``benchmarks/robust/byzantine_losses.py`` (four trainers, one misbehaving, each
    attack under the plain mean and under the defence); this is the one place that calls it.
    """
    from benchmarks.robust.byzantine_losses import loss_figures as run_scenarios

    figures: dict[str, Any] = run_scenarios(epochs=args.epochs)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--peers", type=int, default=4)
    parser.add_argument("--numel", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=9, help="rounds of each method")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="3 peers, 200,000 values, 1 repeat")
    parser.add_argument("--losses", action="store_true", help="add the Byzantine runs' losses")
    parser.add_argument(
        "--verified", action="store_true", help="also CenteredClip with reducer verification"
    )
    parser.add_argument("--epochs", type=int, default=30, help="epochs of each Byzantine run")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--join", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(worker(args))
        return
    if args.quick:
        args.peers, args.numel, args.repeats = 3, 200_000, 1
    # the peers stand for machines of their own but share this one's cores: one BLAS thread each
    # (CenteredClip's norms are BLAS dot products; no codec here needs torch)
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    precompile()
    result = asyncio.run(bench(args))
    if args.losses:
        result["losses"] = loss_figures(args)
    emit(result, args.json)


if __name__ == "__main__":
    main()
