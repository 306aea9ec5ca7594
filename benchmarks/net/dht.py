"""DHT benchmark, with hivemind's reference figures taken in the same run.

    python -m benchmarks.net.dht --nodes 20 --ops 100 --json out.json

Every node is its own OS process started from the CLI as in production (``barnraise dht --stdio-api``),
bootstrapped from up to three random earlier nodes. Then, as ``../shared/bench/hivemind_ref.py dht``
does: K sequential stores from random nodes, K sequential gets from other nodes, K gets with
``latest=True`` from random nodes, then K stores and K gets issued all at once. Each operation is timed
from the moment its command is written to the node until its answer is read.

Unless ``--no-hivemind`` is given, the reference harness then runs with the same N and K in the hivemind
virtual environment (``.venv-hivemind``; see ``../shared/bench/README.md``), and the JSON gets a
``comparison`` block with the ratio of every headline row (below 0.5 meets the goal). Our own figures
use the reference's field names at the top level.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.kit.harness import (
    ROOT,
    add_reference_options,
    emit,
    precompile,
    run_reference,
    side_by_side,
)

HEADLINE_ROWS = [
    ("node_start_ms", "mean_ms"),
    ("sequential.store", "mean_ms"),
    ("sequential.get", "mean_ms"),
    ("sequential.get_latest", "mean_ms"),
    ("concurrent.store", "wall_s"),
    ("concurrent.get", "wall_s"),
]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summarize(latencies: list[float]) -> dict[str, Any]:
    return {
        "n": len(latencies),
        "total_s": round(sum(latencies), 4),
        "mean_ms": round(1000 * statistics.mean(latencies), 2),
        "p50_ms": round(1000 * pct(latencies, 0.5), 2),
        "p95_ms": round(1000 * pct(latencies, 0.95), 2),
        "max_ms": round(1000 * max(latencies), 2),
    }


def cli_command() -> list[str]:
    script = shutil.which("barnraise", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "core"]


class NodeProcess:
    """One ``barnraise dht --stdio-api`` process and the answers it owes us."""

    def __init__(self, proc: asyncio.subprocess.Process, address: str) -> None:
        self.proc = proc
        self.address = address
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._next = 0
        self._reader = asyncio.ensure_future(self._read())

    @classmethod
    async def start(cls, initial: list[str]) -> tuple[NodeProcess, float]:
        started = time.perf_counter()
        args = ["dht", "--new-identity", "--host", "127.0.0.1", "--port", "0", "--stdio-api"]
        if initial:
            args += ["--initial-peers", *initial]
        proc = await asyncio.create_subprocess_exec(
            *cli_command(),
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=ROOT,
            limit=16 * 1024 * 1024,
        )
        assert proc.stdout is not None
        line = await proc.stdout.readline()
        if not line:
            raise RuntimeError("a DHT node exited before printing its address")
        return cls(proc, line.decode().strip()), time.perf_counter() - started

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            reply = json.loads(line)
            future = self._waiting.pop(reply["id"], None)
            if future is not None and not future.done():
                future.set_result(reply)

    async def call(self, **command: Any) -> Any:
        self._next += 1
        future = asyncio.get_running_loop().create_future()
        self._waiting[self._next] = future
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"id": self._next, **command}) + "\n").encode())
        reply = await future
        if not reply["ok"]:
            raise RuntimeError(reply["error"])
        return reply["result"]

    async def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 10)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        self._reader.cancel()


async def timed(node: NodeProcess, **command: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    result = await node.call(**command)
    return result, time.perf_counter() - start


async def bench_barnraise(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    nodes: list[NodeProcess] = []
    result: dict[str, Any] = {
        "benchmark": "dht",
        "implementation": "barnraise",
        "nodes": args.nodes,
        "ops": args.ops,
        "bootstrap_peers": args.bootstrap_peers,
    }
    try:
        build = time.perf_counter()
        startup = []
        for _ in range(args.nodes):
            initial = [n.address for n in rng.sample(nodes, min(args.bootstrap_peers, len(nodes)))]
            node, took = await NodeProcess.start(initial)
            nodes.append(node)
            startup.append(took)
        result["build_s"] = round(time.perf_counter() - build, 2)
        result["node_start_ms"] = summarize(startup)
        await asyncio.sleep(args.settle)
        expiration = time.time() + 600

        def pick_pair() -> tuple[NodeProcess, NodeProcess]:
            a, b = rng.sample(range(len(nodes)), 2)
            return nodes[a], nodes[b]

        keys = [f"bench_{uuid.uuid4().hex}" for _ in range(args.ops)]
        values = {k: uuid.uuid4().hex for k in keys}
        pairs = [pick_pair() for _ in keys]
        store_lat, store_ok = [], 0
        started = time.perf_counter()
        for key, (storer, _) in zip(keys, pairs, strict=True):
            ok, took = await timed(
                storer, op="store", key=key, value=values[key], expiration=expiration
            )
            store_ok += bool(ok)
            store_lat.append(took)
        seq_store_wall = time.perf_counter() - started
        get_lat, get_ok = [], 0
        started = time.perf_counter()
        for key, (_, getter) in zip(keys, pairs, strict=True):
            found, took = await timed(getter, op="get", key=key, latest=False)
            get_lat.append(took)
            get_ok += found is not None and found["value"] == values[key]
        seq_get_wall = time.perf_counter() - started
        latest_lat, latest_ok = [], 0
        for key in keys:
            getter = nodes[rng.randrange(len(nodes))]
            found, took = await timed(getter, op="get", key=key, latest=True)
            latest_lat.append(took)
            latest_ok += found is not None and found["value"] == values[key]
        result["sequential"] = {
            "store": {"wall_s": round(seq_store_wall, 3), "ok": store_ok, **summarize(store_lat)},
            "get": {"wall_s": round(seq_get_wall, 3), "ok": get_ok, **summarize(get_lat)},
            "get_latest": {"ok": latest_ok, **summarize(latest_lat)},
        }

        keys2 = [f"bench_c_{uuid.uuid4().hex}" for _ in range(args.ops)]
        values2 = {k: uuid.uuid4().hex for k in keys2}
        pairs2 = [pick_pair() for _ in keys2]
        started = time.perf_counter()
        stored = await asyncio.gather(
            *(
                s.call(op="store", key=k, value=values2[k], expiration=expiration)
                for k, (s, _) in zip(keys2, pairs2, strict=True)
            )
        )
        c_store_wall = time.perf_counter() - started
        started = time.perf_counter()
        found_all = await asyncio.gather(
            *(
                g.call(op="get", key=k, latest=False)
                for k, (_, g) in zip(keys2, pairs2, strict=True)
            )
        )
        c_get_wall = time.perf_counter() - started
        c_get_ok = sum(
            v is not None and v["value"] == values2[k]
            for k, v in zip(keys2, found_all, strict=True)
        )
        result["concurrent"] = {
            "store": {
                "wall_s": round(c_store_wall, 3),
                "ok": sum(bool(x) for x in stored),
                "ops_per_s": round(args.ops / c_store_wall, 1),
            },
            "get": {
                "wall_s": round(c_get_wall, 3),
                "ok": c_get_ok,
                "ops_per_s": round(args.ops / c_get_wall, 1),
            },
        }
    finally:
        started = time.perf_counter()
        await asyncio.gather(*(node.stop() for node in nodes), return_exceptions=True)
        result["shutdown_s"] = round(time.perf_counter() - started, 2)
    result["env"] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
    }
    return result


def bench_hivemind(args: argparse.Namespace) -> dict[str, Any] | None:
    argv = ["dht", "--nodes", str(args.nodes), "--ops", str(args.ops)]
    argv += ["--bootstrap-peers", str(args.bootstrap_peers)]
    return run_reference(args.hivemind_python, args.hivemind_ref, argv)


def lookup(result: dict[str, Any], path: str, field: str) -> float | None:
    node: Any = result
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    value = node.get(field) if isinstance(node, dict) else None
    return float(value) if isinstance(value, int | float) else None


def compare(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    table = {}
    for path, field in HEADLINE_ROWS:
        table[f"{path}.{field}"] = side_by_side(
            lookup(ours, path, field), lookup(theirs, path, field)
        )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--ops", type=int, default=100)
    parser.add_argument("--bootstrap-peers", type=int, default=3)
    parser.add_argument("--settle", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    add_reference_options(parser)
    args = parser.parse_args()
    # every node is a fresh process: give it compiled bytecode, as an installed package has
    precompile()
    result = asyncio.run(bench_barnraise(args))
    if not args.no_hivemind:
        reference = bench_hivemind(args)
        result["hivemind"] = reference
        if reference is not None:
            result["comparison"] = compare(result, reference)
    emit(result, args.json)


if __name__ == "__main__":
    main()
