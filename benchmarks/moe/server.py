"""Part ``server`` of ``benchmarks/moe/suite.py``: expert server throughput, ours beside hivemind's.

One server process hosts ``--server-experts`` experts of the ``ffn`` architecture (``LayerNorm(x +
W2·gelu(W1·x))``, ``hidden -> 4·hidden -> hidden``, Adam with lr 1e-3: ours from
``ExpertSpec(kind="ffn")``, hivemind's from ``Server.create(expert_cls="ffn")``, the same block).
``--server-clients`` trainer processes each call a random expert in a closed loop: forward with a
batch of ``--server-batch`` random inputs, then backward with the gradient of ``output.sum()``
(ones), which makes the server recompute the forward pass with gradients and take an optimizer step.

Every trainer is its own OS process with one torch thread, as in hivemind's own
``benchmark_throughput.py``: trainers are separate machines in a real swarm, so they must not share
one interpreter (and its GIL and event loop) with each other or with the server, and giving each its
own process costs both implementations the same. The server process keeps torch's default threads.

Timing, the same for both sides (this module drives both): start the server, start the trainers at
once, each makes ``--server-warmup`` calls and says it is ready; then all are told to run for
``--server-duration`` seconds. Each trainer reports every call's latency; throughput is the samples
of every completed forward+backward pair over the longest trainer's run time (the last calls end a
little after the deadline). The server's CPU time over that window is read from ``/proc`` for its
whole process tree (hivemind's includes its p2pd daemon and connection-handler processes).

Ours: ``python -m benchmarks.moe.server serve|client`` (``ExpertServer`` on a ``core.net.Host`` with
a ``TrainingBridge``; trainers call ``core.moe.remote.call_expert``). Hivemind's:
``.venv-hivemind/bin/python -m benchmarks.moe.hivemind_server serve|client`` (``hivemind.moe.Server`` and
``RemoteExpert``), skipped with ``--no-hivemind`` or when that interpreter is missing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.kit.harness import ROOT, as_module, commands, reply
from benchmarks.kit.measuring import cpu_snapshot, descendants, latency_ms

NAME = "server"
HELP = "expert server throughput (forward+backward), ours next to hivemind.moe.Server"
DEFAULTS: dict[str, Any] = {
    "server_experts": 16,
    "server_clients": 8,
    "server_hidden": 1024,
    "server_batch": 64,
    "server_duration": 30.0,
    "server_warmup": 3,
    "server_max_batch": None,  # 4 x batch, as hivemind's benchmark_throughput.py
    "server_max_wait": 0.01,
    "server_handlers": None,  # clients // 2, as hivemind's benchmark_throughput.py
    "server_repeats": 1,
    "server_torch_threads": 0,  # 0: torch's default (one per core)
    "server_seed": 0,
}
QUICK: dict[str, Any] = {
    "server_experts": 4,
    "server_clients": 2,
    "server_hidden": 64,
    "server_batch": 8,
    "server_duration": 2.0,
    "server_warmup": 1,
}
HIVEMIND_SERVER = ["-m", "benchmarks.moe.hivemind_server"]
"""Hivemind's side, run by ``--hivemind-python`` from the repository root as ours is."""
START_TIMEOUT = 180.0


def add_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("part server")
    group.add_argument("--server-experts", type=int, help="experts on the server")
    group.add_argument("--server-clients", type=int, help="trainer processes")
    group.add_argument("--server-hidden", type=int, help="the ffn expert's hidden size")
    group.add_argument("--server-batch", type=int, help="samples per call")
    group.add_argument("--server-duration", type=float, help="seconds of timed calls per side")
    group.add_argument("--server-warmup", type=int, help="untimed calls per trainer first")
    group.add_argument("--server-max-batch", type=int, help="largest batch a server runs")
    group.add_argument("--server-max-wait", type=float, help="our pools' longest wait for a batch")
    group.add_argument("--server-handlers", type=int, help="hivemind's connection handlers")
    group.add_argument(
        "--server-torch-threads",
        type=int,
        help="torch threads of both servers (0: torch's default)",
    )
    group.add_argument(
        "--server-repeats", type=int, help="runs of each side, alternating; the median is kept"
    )
    group.add_argument("--server-seed", type=int)


# ---- our server and trainer (worker processes) ------------------------------------------------------


async def serve(args: argparse.Namespace) -> None:
    import torch

    from core.moe.server.experts import ExpertSpec
    from core.moe.server.server import ExpertServer
    from core.net import Host, Identity
    from core.worker.bridge import TrainingBridge

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    spec = ExpertSpec(kind="ffn", hidden=args.hidden, optimizer="adam", max_batch=args.max_batch)
    backends = [spec.backend(f"expert.{i}") for i in range(args.experts)]
    host = Host(Identity.generate())
    await host.start()
    bridge = TrainingBridge("experts")
    server = ExpertServer(host, bridge, backends, max_wait=args.max_wait)
    await server.start()
    reply(
        {
            "address": str(host.addresses[0]),
            "pid": os.getpid(),
            "versions": {"torch": torch.__version__},
            "torch_threads": torch.get_num_threads(),
        }
    )
    async for command in commands():
        if command.get("op") == "stats":
            reply(pool_stats(server))
    await server.close()
    await bridge.aclose()
    await host.close()


def pool_stats(server: Any) -> dict[str, Any]:
    """Batches each method ran (fewer than calls when calls were batched together), and optimizer
    steps taken."""
    stats: dict[str, Any] = {}
    for method in ("forward", "backward"):
        batches = sum(p.batches for (_, m), p in server.pools.items() if m == method)
        stats[f"{method}_batches"] = batches
    updates = sum(backend.updates for backend in server.backends.values())
    stats["optimizer_steps"] = updates
    return stats


async def client(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(1)  # a trainer is another machine; here eight share two cores
    from core.moe.remote import call_expert
    from core.net import Host, Identity
    from core.net.host.address import PeerAddress

    host = Host(Identity.generate())
    await host.start()
    target = PeerAddress.parse(args.address)
    uids = [f"expert.{i}" for i in range(args.experts)]
    rng = random.Random(args.seed)
    inputs = torch.randn(
        args.batch, args.hidden, generator=torch.Generator().manual_seed(args.seed)
    )

    async def step() -> tuple[float, float]:
        uid = rng.choice(uids)
        started = time.perf_counter()
        (out,) = await call_expert(host, target, uid, "forward", [inputs])
        middle = time.perf_counter()
        grad = torch.ones_like(out)  # the gradient of out.sum()
        await call_expert(host, target, uid, "backward", [inputs, grad])
        return middle - started, time.perf_counter() - middle

    for _ in range(args.warmup):
        await step()
    reply({"ready": True})
    async for command in commands():
        if command.get("op") != "run":
            break
        forward, backward, errors = [], [], []
        started = time.perf_counter()
        deadline = started + float(command["duration"])
        while time.perf_counter() < deadline:
            try:
                f, b = await step()
            except Exception as exc:  # counted and reported, not hidden: a failed call is a result
                errors.append(f"{type(exc).__name__}: {exc}"[:200])
                continue
            forward.append(f)
            backward.append(b)
        reply(
            {
                "steps": len(forward),
                "samples": len(forward) * args.batch,
                "forward_s": forward,
                "backward_s": backward,
                "errors": errors[:5],
                "error_count": len(errors),
                "wall_s": time.perf_counter() - started,
            }
        )
    await host.close()


# ---- the driver -----------------------------------------------------------------------------------


class Worker:
    """A worker process of either implementation, spoken to in JSON lines over its pipes."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, argv: list[str]) -> Worker:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=ROOT,
            limit=1 << 24,
        )
        return cls(proc)

    async def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                await self.proc.wait()
                raise RuntimeError(f"a worker exited (status {self.proc.returncode})")
            if line.startswith(b"{"):  # libraries may print their own lines; ours are JSON
                return dict(json.loads(line))

    async def ask(self, **command: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(command) + "\n").encode())
        await self.proc.stdin.drain()
        return await self.read()

    async def stop(self, grace: float = 20.0) -> None:
        """Close its stdin (the signal to shut down cleanly); kill it, and what it started, if stuck."""
        if self.proc.returncode is not None:
            return
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), grace)
        except TimeoutError:
            for pid in [*descendants(self.proc.pid), self.proc.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            await self.proc.wait()


async def measure(
    args: argparse.Namespace, python: str, module: list[str], extra: list[str]
) -> dict[str, Any]:
    """Run one implementation's server and trainers as described in the module doc."""
    shape = [
        "--experts",
        str(args.server_experts),
        "--hidden",
        str(args.server_hidden),
        "--batch",
        str(args.server_batch),
        "--torch-threads",
        str(args.server_torch_threads),
    ]
    workers: list[Worker] = []
    started = time.perf_counter()
    server = await Worker.start([python, *module, "serve", *shape, *extra])
    workers.append(server)
    try:
        hello = await asyncio.wait_for(server.read(), START_TIMEOUT)
        address = hello["address"]
        where = address if isinstance(address, list) else [address]
        clients = [
            await Worker.start(
                [
                    python,
                    *module,
                    "client",
                    *shape,
                    "--warmup",
                    str(args.server_warmup),
                    "--seed",
                    str(args.server_seed + 1 + i),
                    "--peer-id",
                    str(hello.get("peer_id", "")),
                    "--address",
                    *where,
                ]
            )
            for i in range(args.server_clients)
        ]
        workers += clients
        await asyncio.wait_for(asyncio.gather(*(c.read() for c in clients)), START_TIMEOUT)
        setup_s = time.perf_counter() - started
        pids = [c.proc.pid for c in clients]
        before, t0 = cpu_snapshot(server.proc.pid, pids), time.perf_counter()
        answers = await asyncio.wait_for(
            asyncio.gather(*(c.ask(op="run", duration=args.server_duration) for c in clients)),
            args.server_duration + START_TIMEOUT,
        )
        window = time.perf_counter() - t0
        after = cpu_snapshot(server.proc.pid, pids)
        stats = await asyncio.wait_for(server.ask(op="stats"), 30)
    finally:
        await asyncio.gather(*(w.stop() for w in reversed(workers)), return_exceptions=True)
    forward = [s for a in answers for s in a["forward_s"]]
    backward = [s for a in answers for s in a["backward_s"]]
    steps = [f + b for a in answers for f, b in zip(a["forward_s"], a["backward_s"], strict=True)]
    samples = sum(a["samples"] for a in answers)
    wall = max(a["wall_s"] for a in answers)
    used = {
        part: after[part] - start  # type: ignore[operator]
        for part, start in before.items()
        if start is not None and after[part] is not None
    }
    server_cpu = round(used["server"], 2) if "server" in used else None
    cores = {part: round(seconds / window, 2) for part, seconds in used.items()}
    if {"machine", "server", "clients"} <= cores.keys():
        # other engineers' work, and this driver's: what shared the cores with the benchmark
        cores["everything_else"] = round(cores["machine"] - cores["server"] - cores["clients"], 2)
    result: dict[str, Any] = {
        "status": "ok",
        "samples_per_s": round(samples / wall, 1),
        "steps": sum(a["steps"] for a in answers),
        "samples": samples,
        "wall_s": round(wall, 2),
        "forward_latency": latency_ms(forward),
        "backward_latency": latency_ms(backward),
        "step_latency": latency_ms(steps),
        "errors": sum(a["error_count"] for a in answers),
        "error_examples": sorted({e for a in answers for e in a["errors"]})[:5],
        "server_cpu_s": server_cpu,
        "server_cpu_per_1k_samples_s": (
            round(1000 * server_cpu / samples, 3) if server_cpu is not None and samples else None
        ),
        "cpu_cores_busy": cores,
        "setup_s": round(setup_s, 1),
        "server_stats": stats,
        "versions": hello.get("versions"),
        "server_torch_threads": hello.get("torch_threads"),
    }
    return result


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median throughput (the lower middle one of an even count); a failed run
    when none succeeded."""
    ok = sorted((r for r in runs if r.get("status") == "ok"), key=lambda r: r["samples_per_s"])
    return dict(ok[(len(ok) - 1) // 2]) if ok else dict(runs[-1])


def hivemind_missing(args: argparse.Namespace) -> str | None:
    if args.no_hivemind:
        return "skipped (--no-hivemind)"
    if not Path(args.hivemind_python).exists():
        return f"{args.hivemind_python} is missing"
    return None


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The part's entry point: ours and hivemind's, ``--server-repeats`` times each, and the
    ratio of their median throughputs."""
    if args.server_max_batch is None:
        args.server_max_batch = 4 * args.server_batch
    if args.server_handlers is None:
        args.server_handlers = max(1, args.server_clients // 2)
    result: dict[str, Any] = {
        "settings": {
            "expert": "ffn",
            "experts": args.server_experts,
            "clients": args.server_clients,
            "hidden": args.server_hidden,
            "batch_per_call": args.server_batch,
            "max_batch": args.server_max_batch,
            "optimizer": "adam, lr 1e-3",
            "duration_s": args.server_duration,
            "warmup_calls_per_client": args.server_warmup,
            "clients_are": "separate OS processes, one torch thread each",
            "barnraise_max_wait_s": args.server_max_wait,
            "hivemind_connection_handlers": args.server_handlers,
            "repeats": args.server_repeats,
            "server_torch_threads": args.server_torch_threads or "torch's default",
        }
    }
    sides = {
        "barnraise": (
            sys.executable,
            as_module(__spec__),
            ["--max-batch", str(args.server_max_batch), "--max-wait", str(args.server_max_wait)],
        ),
        "hivemind": (
            args.hivemind_python,
            HIVEMIND_SERVER,
            ["--max-batch", str(args.server_max_batch), "--handlers", str(args.server_handlers)],
        ),
    }
    missing = hivemind_missing(args)
    if missing is not None:
        del sides["hivemind"]
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    for repeat in range(args.server_repeats):
        # alternate who goes first, so that load coming and going on a shared machine is shared
        order = list(sides) if repeat % 2 == 0 else list(reversed(sides))
        for side in order:
            print(f"  server: {side} ({repeat + 1}/{args.server_repeats})", file=sys.stderr)
            python, module, extra = sides[side]
            try:
                runs[side].append(asyncio.run(measure(args, python, module, extra)))
            except Exception as exc:  # recorded: the reference failing is a finding
                runs[side].append({"status": f"error: {type(exc).__name__}: {exc}"})
    for side, measured in runs.items():
        result[side] = median_run(measured)
        if len(measured) > 1:
            result[side]["runs"] = [
                {
                    "samples_per_s": m.get("samples_per_s"),
                    "other_cores_busy": m.get("cpu_cores_busy", {}).get("everything_else"),
                }
                for m in measured
            ]
    if missing is not None:
        result["hivemind"] = {"status": "not run", "reason": missing}
    ours = result["barnraise"].get("samples_per_s")
    theirs = result["hivemind"].get("samples_per_s")
    result["ratio_samples_per_s"] = round(ours / theirs, 2) if ours and theirs else None
    if args.server_repeats > 1 and "hivemind" in runs:
        result["ratio_per_repeat"] = [
            round(a["samples_per_s"] / b["samples_per_s"], 2)
            if a.get("samples_per_s") and b.get("samples_per_s")
            else None
            for a, b in zip(runs["barnraise"], runs["hivemind"], strict=True)
        ]
    result["goal"] = "barnraise samples/s >= 2 x hivemind"
    return result


def summarize(result: dict[str, Any]) -> list[str]:
    lines = []
    for side in ("barnraise", "hivemind"):
        figures = result.get(side, {})
        if figures.get("status") != "ok":
            lines.append(f"{side:>9}: {figures.get('status')} {figures.get('reason', '')}".rstrip())
            continue
        step = figures["step_latency"] or {}
        lines.append(
            f"{side:>9}: {figures['samples_per_s']} samples/s, forward+backward p50 "
            f"{step.get('p50_ms')} ms p99 {step.get('p99_ms')} ms, server cpu "
            f"{figures['server_cpu_s']} s, {figures['errors']} errors, cores busy "
            f"{figures['cpu_cores_busy']}"
        )
    lines.append(f"ratio ours/hivemind: {result.get('ratio_samples_per_s')} (goal >= 2)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description="worker processes of the server part")
    parser.add_argument("role", choices=["serve", "client"])
    parser.add_argument("--experts", type=int, required=True)
    parser.add_argument("--hidden", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--max-batch", type=int, default=256)
    parser.add_argument("--max-wait", type=float, default=0.01)
    parser.add_argument("--torch-threads", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--peer-id", default="")
    parser.add_argument("--address", nargs="*", default=[])
    args = parser.parse_args()
    if args.role == "client":
        args.address = args.address[0]
    asyncio.run(serve(args) if args.role == "serve" else client(args))


if __name__ == "__main__":
    main()
