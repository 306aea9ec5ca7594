"""All-reduce benchmark, with hivemind's reference figures taken in the same run.

    python benchmarks/allreduce.py --peers 4 --numel 10000000 --rounds 3 --compression none --json out.json

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
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

COMPRESSION = {"none": "NONE", "fp16": "FP16", "uint8": "UINT8", "blockwise8": "BLOCKWISE8"}


def tensor_for(seed: int, round_index: int, peer: int, numel: int) -> np.ndarray:
    return np.random.default_rng([seed, round_index, peer]).standard_normal(numel, dtype=np.float32)


# ---- a peer (worker process) ---------------------------------------------------------------------


async def worker(args: argparse.Namespace) -> None:
    import torch

    # Each peer process stands for a machine of its own, but four of them share this machine's two
    # cores: one torch thread each keeps their codec kernels from fighting over the cores.
    torch.set_num_threads(1)
    from core.averaging import Averager, AveragerConfig, Codec
    from core.dht import DHTConfig, DHTNode, HostTransport
    from core.net import Host, Identity

    host = Host(Identity.generate())
    await host.start()
    dht = DHTNode(HostTransport(host), DHTConfig())
    await dht.start([args.join] if args.join else [])
    config = AveragerConfig(
        target_group_size=args.peers,
        min_group_size=args.peers,
        codec=Codec[COMPRESSION[args.compression]],
        allreduce_timeout=120.0,
    )
    averager = Averager(host, dht, "bench", config)
    print(json.dumps({"address": str(host.addresses[0])}), flush=True)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    tensor: np.ndarray | None = None
    pending = None
    while line := await reader.readline():
        command = json.loads(line)
        op = command["op"]
        if op == "load":  # before the timed part, as the reference harness does
            tensor = tensor_for(args.seed, command["round"], args.index, args.numel)
            reply = {}
        elif op == "prepare":
            pending = await averager.prepare(f"round-{command['round']}", timeout=60)
            reply: dict[str, Any] = {"matched": pending.size}
        elif op == "run":
            assert pending is not None
            assert tensor is not None
            cpu = time.process_time()
            result = await pending.run([tensor])
            reply = {
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
            reply = {
                "rel_rms_err": error / max(spread, 1e-12),
                "max_abs_err_vs_mean": float(np.max(np.abs(tensor - reference))),
            }
        else:
            break
        print(json.dumps(reply), flush=True)
    await averager.close()
    await dht.close()
    await host.close()


# ---- the driver ----------------------------------------------------------------------------------


class Peer:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def ask(self, **command: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write((json.dumps(command) + "\n").encode())
        line = await self.proc.stdout.readline()
        if not line:
            raise RuntimeError("a peer exited")
        return dict(json.loads(line))


async def start_peer(args: argparse.Namespace, index: int, join: str | None) -> tuple[Peer, str]:
    command = [
        sys.executable,
        __file__,
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
    proc = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
        limit=1 << 20,
    )
    assert proc.stdout is not None
    hello = json.loads(await proc.stdout.readline())
    return Peer(proc), str(hello["address"])


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
    peers: list[Peer] = []
    started = time.perf_counter()
    first, address = await start_peer(args, 0, None)
    peers.append(first)
    for index in range(1, args.peers):
        peer, _ = await start_peer(args, index, address)
        peers.append(peer)
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
        for peer in peers:
            if peer.proc.stdin is not None:
                peer.proc.stdin.close()
        await asyncio.gather(*(p.proc.wait() for p in peers))
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
    python, harness = Path(args.hivemind_python), Path(args.hivemind_ref)
    if args.compression not in ("none", "fp16", "uint8"):
        return None
    if not python.exists() or not harness.exists():
        print(f"hivemind reference skipped: {python} or {harness} is missing", file=sys.stderr)
        return None
    out = ROOT / ".hivemind-avg.json"
    command = [
        str(python),
        str(harness),
        "--json",
        str(out),
        "avg",
        "--peers",
        str(args.peers),
        "--numel",
        str(args.numel),
        "--rounds",
        str(args.rounds),
        "--compression",
        args.compression,
    ]
    try:
        subprocess.run(command, check=False, capture_output=True, timeout=900)
        return dict(json.loads(out.read_text()))
    except (subprocess.TimeoutExpired, OSError, ValueError) as exc:
        print(f"hivemind reference failed: {exc}", file=sys.stderr)
        return None
    finally:
        out.unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--peers", type=int, default=4)
    parser.add_argument("--numel", type=int, default=10_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compression", choices=sorted(COMPRESSION), default="none")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--no-hivemind", action="store_true")
    parser.add_argument(
        "--hivemind-python", default=str(ROOT / ".venv-hivemind" / "bin" / "python")
    )
    parser.add_argument(
        "--hivemind-ref", default=str(ROOT.parent / "shared" / "bench" / "hivemind_ref.py")
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--join", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(worker(args))
        return
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "core")], check=True)
    result = asyncio.run(bench(args))
    if not args.no_hivemind:
        reference = bench_hivemind(args)
        result["hivemind"] = reference
        if reference is not None:
            result["comparison"] = {
                field: {
                    "barnraise": result[field],
                    "hivemind": reference.get(field),
                    "ratio": round(result[field] / reference[field], 3)
                    if reference.get(field)
                    else None,
                }
                for field in ("allreduce_s_median", "matchmaking_s_median")
            }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
