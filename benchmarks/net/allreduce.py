"""All-reduce benchmark, with hivemind's reference figures taken in the same run.

    python -m benchmarks.net.allreduce --peers 4 --numel 10000000 --rounds 3 --compression none \
        --json out.json

Every peer is its own OS process (a DHT node, a Host and an Averager) holding one float32 tensor of
``--numel`` random values. The peers share this machine's cores where real peers would each have their
own, so each uses one torch thread. Each round is timed in two phases, as
``../shared/bench/hivemind_ref.py avg`` does: matchmaking (until every peer has its group), then the
all-reduce (from the trigger until every peer has its result). Each peer then compares its result with
the exact mean of all peers' inputs: ``rel_rms_err`` is 0 for an exact average and about 1 when nothing
was averaged. ``averaging_complete`` needs both a small error on every peer and every peer's own report
of a complete round.

Unless ``--no-hivemind`` is given, the reference harness runs next with the same arguments in
``.venv-hivemind``, and ``comparison`` holds the ratios (goal: one third or less).
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
    add_reference_options,
    as_module,
    commands,
    emit,
    precompile,
    reply,
    run_reference,
    side_by_side,
    stop_all,
    tensor_for,
)
from core.codecs import active_codecs

# ---- a peer (worker process) ---------------------------------------------------------------------


async def worker(args: argparse.Namespace) -> None:
    import torch

    # Each peer process stands for a machine of its own, but four of them share this machine's two
    # cores: one torch thread each keeps their codec kernels from fighting over the cores.
    torch.set_num_threads(1)
    from core.averaging import Averager, AveragerConfig
    from core.dht import DHTConfig, DHTNode, HostTransport
    from core.net import Host, Identity

    host = Host(Identity.generate())
    await host.start()
    dht = DHTNode(HostTransport(host), DHTConfig())
    await dht.start([args.join] if args.join else [])
    config = AveragerConfig(
        target_group_size=args.peers,
        min_group_size=args.peers,
        codec=active_codecs().parse(args.compression),
        allreduce_timeout=120.0,
    )
    averager = Averager(host, dht, "bench", config)
    reply({"address": str(host.addresses[0])})
    tensor: np.ndarray | None = None
    pending = None
    async for command in commands():
        op = command["op"]
        answer: dict[str, Any] = {}
        if op == "load":  # before the timed part, as the reference harness does
            tensor = tensor_for(args.seed, command["round"], args.index, args.numel)
        elif op == "prepare":
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
                "summary": result.summary(),
                "group_size": len(result.members),
            }
        elif op == "check":  # after the timed part: compare with the exact mean of all inputs
            assert tensor is not None
            reference = sum(
                tensor_for(args.seed, command["round"], p, args.numel) for p in range(args.peers)
            ) / np.float32(args.peers)
            before = tensor_for(args.seed, command["round"], args.index, args.numel)
            spread = float(np.sqrt(np.mean((before - reference) ** 2)))
            error = float(np.sqrt(np.mean((tensor - reference) ** 2)))
            answer = {
                "rel_rms_err": error / max(spread, 1e-12),
                "max_abs_err_vs_mean": float(np.max(np.abs(tensor - reference))),
            }
        else:
            break
        reply(answer)
    await averager.close()
    await dht.close()
    await host.close()


# ---- the driver ----------------------------------------------------------------------------------


async def start_peer(args: argparse.Namespace, index: int, join: str | None) -> PeerProcess:
    command = [
        *as_module(__spec__),
        "--worker",
        "--index",
        str(index),
        "--peers",
        str(args.peers),
        "--numel",
        str(args.numel),
        "--compression",
        args.compression,
        "--seed",
        str(args.seed),
    ]
    if join:
        command += ["--join", join]
    return await PeerProcess.start(command)


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {
        "benchmark": "avg",
        "implementation": "barnraise",
        "peers": args.peers,
        "numel": args.numel,
        "dtype": "float32",
        "tensor_mb": round(args.numel * 4 / 2**20, 1),
        "compression": args.compression,
        "rounds": [],
    }
    started = time.perf_counter()
    peers = [await start_peer(args, 0, None)]
    for index in range(1, args.peers):
        peers.append(await start_peer(args, index, peers[0].address))
    result["setup_s"] = round(time.perf_counter() - started, 2)
    await asyncio.sleep(1.0)
    try:
        for round_index in range(args.rounds):
            await asyncio.gather(*(p.ask(op="load", round=round_index) for p in peers))
            t0 = time.perf_counter()
            matched = await asyncio.gather(*(p.ask(op="prepare", round=round_index) for p in peers))
            t1 = time.perf_counter()
            outcomes = await asyncio.gather(*(p.ask(op="run", round=round_index) for p in peers))
            t2 = time.perf_counter()
            checks = await asyncio.gather(*(p.ask(op="check", round=round_index) for p in peers))
            result["rounds"].append(
                {
                    "round": round_index,
                    "matchmaking_s": round(t1 - t0, 3),
                    "allreduce_s": round(t2 - t1, 3),
                    "total_s": round(t2 - t0, 3),
                    "group_sizes": [m["matched"] for m in matched],
                    "rel_rms_err": max(c["rel_rms_err"] for c in checks),
                    "max_abs_err_vs_mean": max(c["max_abs_err_vs_mean"] for c in checks),
                    "reported_complete": all(o["complete"] for o in outcomes),
                    "cpu_s_per_peer": [round(o["cpu_s"], 3) for o in outcomes],
                    "summaries": sorted({o["summary"] for o in outcomes}),
                }
            )
            print(
                f"  round {round_index}: matchmaking {t1 - t0:.3f} s, all-reduce {t2 - t1:.3f} s",
                file=sys.stderr,
                flush=True,
            )
    finally:
        await stop_all(peers)
    rounds = result["rounds"]
    worst = max(r["rel_rms_err"] for r in rounds)
    result["averaging_complete"] = worst < 0.25 and all(r["reported_complete"] for r in rounds)
    result["allreduce_s_median"] = round(statistics.median(r["allreduce_s"] for r in rounds), 3)
    result["matchmaking_s_median"] = round(statistics.median(r["matchmaking_s"] for r in rounds), 3)
    per_peer_mb = 2 * (args.peers - 1) / args.peers * args.numel * 4 / 2**20
    result["per_peer_traffic_mb_uncompressed"] = round(per_peer_mb, 1)
    result["effective_per_peer_MBps"] = round(per_peer_mb / result["allreduce_s_median"], 1)
    result["env"] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "numpy": np.__version__,
    }
    return result


def bench_hivemind(args: argparse.Namespace) -> dict[str, Any] | None:
    if args.compression not in ("none", "fp16", "uint8"):
        return None  # the reference has no blockwise codec
    argv = ["avg", "--peers", str(args.peers), "--numel", str(args.numel)]
    argv += ["--rounds", str(args.rounds), "--compression", args.compression]
    return run_reference(args.hivemind_python, args.hivemind_ref, argv)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--peers", type=int, default=4)
    parser.add_argument("--numel", type=int, default=10_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    # every codec that encodes by itself (``auto`` picks among them per tensor)
    concrete = sorted(codec.name for codec in active_codecs().concrete)
    parser.add_argument("--compression", choices=concrete, default="none")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    add_reference_options(parser)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--join", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(worker(args))
        return
    precompile()
    result = asyncio.run(bench(args))
    if not args.no_hivemind:
        reference = bench_hivemind(args)
        result["hivemind"] = reference
        if reference is not None:
            result["comparison"] = {
                field: side_by_side(result[field], reference.get(field))
                for field in ("allreduce_s_median", "matchmaking_s_median")
            }
    emit(result, args.json)


if __name__ == "__main__":
    main()
