"""The expert host (Learning@home's mixture-of-experts server) on a GPU, beside a plain PyTorch loop.

    python -m benchmarks.gpu.experts --json out.json                 # cuda when torch sees a GPU
    python -m benchmarks.gpu.experts --device cpu --dry-run --json out.json

What it measures. "ours" is the volunteer's expert host as the product runs it: an ``ExpertHost``
(``core.moe.server.runtime``, what ``barnraise experts`` and the engine run) listening on loopback,
built from a ``dmoe`` manifest whose grid holds ``--experts`` experts of the ``ffn`` architecture
(``LayerNorm(x + W2·gelu(W1·x))``, ``hidden -> 4·hidden -> hidden``, Adam with lr 1e-3) and whose
device is ``--device``. So the experts are placed where the product places them (the device chosen
by ``training_device`` on the training thread, then ``HostedExpert`` moves the module and later its
optimizer state there), and the run checks that it worked: after startup every parameter must be on
the device, and after the run every expert's Adam moments too (they exist only after the first
update; Adam's scalar step counters stay on the CPU, where torch keeps them). ``placement_ok`` in
the JSON says whether all of that held.

``--clients`` trainers, each with its own ``core.net.Host`` (its own TLS connection, as a trainer
on another machine has), call a random expert in a closed loop: forward on ``--batch`` random inputs
(``call_expert``), then backward with a gradient of ones, which makes the server recompute the
forward pass with gradients and take an optimizer step. Each trainer first calls every expert once
(warm-up: kernels, allocator, Adam's state), then all run for ``--duration`` seconds. Throughput is
the samples of every completed forward+backward pair over the longest trainer's run; latency is that
of one pair.

The trainers run in this process, as tasks on an event loop of their own in a second thread: the
server computes on its own training thread (``TrainingBridge``) and answers on its own loop, so the
trainers share no loop with it, only the interpreter's lock (released while OpenSSL encrypts and
torch computes) and, on a small machine, the cores. Separate trainer processes would spare the lock
too, at the price of the process machinery of ``benchmarks/moe/server.py``; a trainer's work is
framing, TLS and copies of its own calls, no more than the server's network work for them.

"plain" is what the same experts cost without a network or a server: the same ``ExpertSpec``
modules and optimizers on the same device, driven by one Python loop with its inputs already on the
device. Each pair picks a random expert, runs the forward pass without gradients, then does exactly
what ``ExpertBackend.backward`` does (fresh leaves, forward again with gradients, backward with ones,
optimizer step, gradients cleared), and synchronises the device after each of the two calls, as the
server's replies do when they copy their results to the host.

The goal: ``expert_host_ratio`` = ours / plain samples/s, at least 0.15 on CUDA at the default
sizes. Each pair of ours moves five batch x hidden float32 tensors over the Host's TLS streams (the
inputs to forward; the inputs and the gradient to backward; the output and the input gradient back):
20 KiB a sample at hidden 1024, 5 MiB a pair at batch 256. The plain loop moves none. One Host
stream carries about 1.6 GB/s on loopback (``benchmarks/net/transport.py``), so the network path alone
holds ours near 80 000 samples/s whatever the GPU. A pair's arithmetic is about 67 MFLOP a sample
(forward, then forward again and backward, through two hidden x 4·hidden layers), which a GPU
computing in float32 at 30-40 TFLOPS gets through at roughly 300 000-400 000 samples/s with Adam's
steps and the launches. So on loopback a perfect server reaches some 0.2-0.25 of the plain loop;
0.15 asks it to keep about three quarters of that, losing little to its own queues, copies to and
from the GPU, and the pause hooks on every module and parameter. Compute grows with hidden² and
traffic with hidden, so a wider expert raises the ceiling. On a CPU the event loops' TLS and copies
take the same cores as torch's compute, and the two sides run one after the other, so on a small
shared machine the CPU ratio moves with other programs' load; it is reported but does not test the
goal: only the CUDA figure does. ``training_thread_busy`` (the share of the timed window the
server's training thread spent computing) says which side limited ours: near 1, compute; well below,
the network path.

Also recorded: the device's name, torch's version, CUDA's peak allocated memory of each side, the
server's batches in the timed window, its optimizer steps (warm-up included), and the tensor bytes
it moved per second.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import random
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks.kit.harness import emit
from benchmarks.kit.measuring import latency_ms
from core.moe.remote import call_expert
from core.moe.server.events import ExpertsEvent
from core.moe.server.experts import ExpertSpec
from core.moe.server.hosted import HostedExpert, Served
from core.moe.server.runtime import ExpertHost, ExpertHostSettings
from core.net import Host, Identity
from core.net.host.address import PeerAddress
from core.project import DmoeManifest
from core.project.dmoe_sections import ExpertSection, GridSection, ServerSection, TrainerSection
from core.project.sections import ProjectSection

DEFAULTS: dict[str, Any] = {
    "experts": 4,
    "hidden": 1024,
    "batch": 256,
    "clients": 4,
    "duration": 10.0,
}
DRY_RUN: dict[str, Any] = {"experts": 2, "hidden": 64, "batch": 16, "clients": 2, "duration": 2.0}
GOAL_RATIO = 0.15
PRODUCT_MAX_BATCH = 256
"""The manifest's default ``expert.max_batch`` (raised to ``--batch`` when that is larger)."""
CALL_TIMEOUT = 120.0
"""Seconds one expert call may take before a trainer gives up (a stuck server fails the run)."""


# ---- ours: the expert host and its trainers -------------------------------------------------------


def manifest_for(args: argparse.Namespace) -> DmoeManifest:
    """A ``dmoe`` manifest with the product's defaults, sized by the arguments."""
    max_batch = max(PRODUCT_MAX_BATCH, args.batch)
    return DmoeManifest(
        project=ProjectSection(name="expert-gpu-benchmark", kind="dmoe"),
        grid=GridSection("ffn", (args.experts,)),
        expert=ExpertSection(kind="ffn", hidden=args.hidden, max_batch=max_batch),
        # room for every trainer's call at once: the run measures throughput, not "busy" answers
        server=ServerSection(
            max_queue=max(ServerSection.max_queue, max_batch, args.clients * args.batch),
            experts_per_server=args.experts,
        ),
        trainer=TrainerSection(k=1, k_min=1, beam_size=1, batch_size=min(32, max_batch)),
    )


def same_device(tensor: torch.Tensor, device: torch.device) -> bool:
    """Whether ``tensor`` is on ``device`` (``cuda`` without an index is the current GPU)."""
    if tensor.device.type != device.type:
        return False
    return device.index is None or tensor.device.index == device.index


def placement(experts: Sequence[HostedExpert], device: torch.device) -> dict[str, Any]:
    """Where the experts' parameters and optimizer state are."""
    params = [p for expert in experts for p in expert.module.parameters()]
    states: list[torch.Tensor] = []
    steps: list[torch.Tensor] = []
    with_state = 0
    for expert in experts:
        with_state += bool(expert.optimizer.state)
        for entry in expert.optimizer.state.values():
            for key, value in entry.items():
                if isinstance(value, torch.Tensor):
                    # Adam's scalar step counter lives on the CPU (HostedExpert.move_to agrees)
                    (steps if key == "step" and value.dim() == 0 else states).append(value)
    return {
        "parameters": len(params),
        "parameters_on_device": sum(same_device(p, device) for p in params),
        "experts_with_optimizer_state": with_state,
        "optimizer_state_tensors": len(states),
        "optimizer_state_on_device": sum(same_device(s, device) for s in states),
        "step_counters_on_cpu": sum(s.device.type == "cpu" for s in steps),
        "experts_say": sorted({str(expert.device) for expert in experts}),
    }


class Trainers:
    """``--clients`` trainers on a loop of their own, in the thread that calls ``run``."""

    def __init__(
        self,
        address: str,
        uids: list[str],
        args: argparse.Namespace,
        on_timed: Callable[[], None],
    ) -> None:
        self.address = address
        self.uids = uids
        self.args = args
        self.on_timed = on_timed
        self.stop = threading.Event()
        """Set by the server's side to end the trainers early (it is being cancelled)."""

    def run(self) -> dict[str, Any]:
        return asyncio.run(self._main())

    async def _main(self) -> dict[str, Any]:
        hosts: list[Host] = []
        try:
            for _ in range(self.args.clients):
                host = Host(Identity.generate())
                hosts.append(host)
                await host.start()
            target = PeerAddress.parse(self.address)
            clients = [
                Trainer(i, host, target, self.uids, self.args) for i, host in enumerate(hosts)
            ]
            await asyncio.gather(*(c.warm_up() for c in clients))
            self.on_timed()
            deadline = time.perf_counter() + self.args.duration
            runs = await asyncio.gather(*(c.timed(deadline, self.stop) for c in clients))
        finally:
            await asyncio.gather(*(host.close() for host in hosts), return_exceptions=True)
        pairs = [s for run in runs for s in run["pair_s"]]
        errors = [e for run in runs for e in run["errors"]]
        wall = max(run["wall_s"] for run in runs)
        samples = len(pairs) * self.args.batch
        return {
            "pairs": len(pairs),
            "samples": samples,
            "wall_s": round(wall, 3),
            "samples_per_s": round(samples / wall, 1) if wall > 0 else None,
            "pair_latency": latency_ms(pairs),
            "forward_latency": latency_ms([s for run in runs for s in run["forward_s"]]),
            "errors": len(errors),
            "error_examples": sorted(set(errors))[:5],
        }


class Trainer:
    """One trainer: its Host, its inputs, its own random choice of experts."""

    def __init__(
        self,
        index: int,
        host: Host,
        target: PeerAddress,
        uids: list[str],
        args: argparse.Namespace,
    ) -> None:
        self.index = index
        self.host = host
        self.target = target
        self.uids = uids
        self.rng = random.Random(index + 1)
        generator = torch.Generator().manual_seed(index + 1)
        self.inputs = torch.randn(args.batch, args.hidden, generator=generator)

    async def pair(self, uid: str) -> tuple[float, float]:
        """Forward, then backward with the gradient of ``output.sum()``; both durations."""
        started = time.perf_counter()
        (out,) = await call_expert(
            self.host, self.target, uid, "forward", [self.inputs], timeout=CALL_TIMEOUT
        )
        middle = time.perf_counter()
        grad = torch.ones_like(out)
        await call_expert(
            self.host, self.target, uid, "backward", [self.inputs, grad], timeout=CALL_TIMEOUT
        )
        return middle - started, time.perf_counter() - started

    async def warm_up(self) -> None:
        """Every expert once, starting from a different one per trainer (so that every expert has
        its kernels chosen and its optimizer state made before the clock starts)."""
        count = len(self.uids)
        for i in range(count):
            await self.pair(self.uids[(self.index + i) % count])

    async def timed(self, deadline: float, stop: threading.Event) -> dict[str, Any]:
        forward: list[float] = []
        pairs: list[float] = []
        errors: list[str] = []
        started = time.perf_counter()
        while time.perf_counter() < deadline and not stop.is_set():
            try:
                f, p = await self.pair(self.rng.choice(self.uids))
            except Exception as exc:  # counted and shown: a failed call is a result
                errors.append(f"{type(exc).__name__}: {exc}"[:200])
                continue
            forward.append(f)
            pairs.append(p)
        return {
            "forward_s": forward,
            "pair_s": pairs,
            "errors": errors,
            "wall_s": time.perf_counter() - started,
        }


async def run_ours(args: argparse.Namespace) -> tuple[dict[str, Any], ExpertSpec, list[str]]:
    """The expert host with its trainers, as the module doc says, closed whatever happens; its
    figures, the spec it built its experts from, and their uids."""
    events: list[ExpertsEvent] = []

    def on_event(event: ExpertsEvent) -> None:
        events.append(event)

    manifest = manifest_for(args)
    settings = ExpertHostSettings(manifest, uids=("ffn.*",), device=args.device)
    server = ExpertHost(settings, on_event)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    marks: dict[str, Any] = {}
    trainers: Trainers | None = None
    try:
        started = time.perf_counter()
        await server.start()
        startup_s = time.perf_counter() - started
        assert server.address is not None
        at_start = placement(server.experts, device)

        def on_timed() -> None:
            # called on the trainers' thread; the counters are at most one batch stale
            marks["served"] = dataclasses.replace(server.served)
            marks["t"] = time.perf_counter()

        trainers = Trainers(server.address, [e.uid for e in server.experts], args, on_timed)
        try:
            figures = await asyncio.to_thread(trainers.run)
        finally:
            trainers.stop.set()
        window = time.perf_counter() - marks["t"]
        before: Served = marks["served"]
        after = server.served
        at_end = placement(server.experts, device)
        figures.update(
            {
                "startup_s": round(startup_s, 2),
                "forward_batches": after.forward_batches - before.forward_batches,
                "backward_batches": after.backward_batches - before.backward_batches,
                "optimizer_steps_with_warmup": sum(e.updates for e in server.experts),
                "tensor_bytes_per_pair": 5 * args.batch * args.hidden * 4,
                "tensor_mb_per_s": round(
                    5 * args.batch * args.hidden * 4 * figures["pairs"] / figures["wall_s"] / 1e6, 1
                ),
                "training_thread_busy": round(
                    (after.compute_seconds - before.compute_seconds) / window, 3
                ),
                "peak_device_bytes": (
                    torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
                ),
                "placement_after_startup": at_start,
                "placement_after_run": at_end,
                "placement_ok": placement_ok(at_start, at_end, len(server.experts)),
                "max_batch": manifest.expert.max_batch,
                "max_wait_s": manifest.server.max_wait,
                "max_queue": manifest.server.max_queue,
            }
        )
        return figures, server.spec, [e.uid for e in server.experts]
    finally:
        await server.close(save=False)


def placement_ok(at_start: dict[str, Any], at_end: dict[str, Any], experts: int) -> bool:
    """Every parameter on the device from the start, and every expert's optimizer state (made by
    its first update) on it after the run."""
    return bool(
        at_start["parameters"] > 0
        and at_start["parameters_on_device"] == at_start["parameters"]
        and at_end["parameters_on_device"] == at_end["parameters"]
        and at_end["experts_with_optimizer_state"] == experts
        and at_end["optimizer_state_tensors"] > 0
        and at_end["optimizer_state_on_device"] == at_end["optimizer_state_tensors"]
    )


# ---- plain: the same experts in a bare loop -------------------------------------------------------


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_plain(args: argparse.Namespace, spec: ExpertSpec, uids: list[str]) -> dict[str, Any]:
    """The same work as the server's forward and backward calls, without network or server, on
    experts built from the host's own ``spec``."""
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    experts = []
    for uid in uids:
        module = spec.module(uid).to(device)
        experts.append((module, spec.optimizer_for(module)))
    inputs = torch.randn(args.batch, args.hidden, generator=torch.Generator().manual_seed(1))
    inputs = inputs.to(device)
    ones = torch.ones(args.batch, args.hidden, device=device)
    rng = random.Random(1)

    def pair(module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        with torch.no_grad():
            module(inputs)
        synchronize(device)  # the forward reply copies the output to the host
        # ExpertBackend.backward: recompute with gradients, input gradients, one optimizer step
        leaf = inputs.detach().requires_grad_(True)
        optimizer.zero_grad(set_to_none=True)
        with torch.enable_grad():
            torch.autograd.backward([module(leaf)], [ones])
        assert leaf.grad is not None
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        synchronize(device)  # the backward reply copies the input gradient to the host

    for _ in range(args.clients):  # as many warm-up pairs per expert as ours has
        for module, optimizer in experts:
            pair(module, optimizer)
    times: list[float] = []
    started = time.perf_counter()
    deadline = started + args.duration
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        pair(*rng.choice(experts))
        times.append(time.perf_counter() - t0)
    wall = time.perf_counter() - started
    samples = len(times) * args.batch
    result = {
        "pairs": len(times),
        "samples": samples,
        "wall_s": round(wall, 3),
        "samples_per_s": round(samples / wall, 1),
        "pair_latency": latency_ms(times),
        "peak_device_bytes": (
            torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
        ),
    }
    return result


# ---- the driver -----------------------------------------------------------------------------------


def goals(ours: dict[str, Any], plain: dict[str, Any], device: torch.device) -> dict[str, Any]:
    a, b = ours.get("samples_per_s"), plain.get("samples_per_s")
    ratio = round(a / b, 3) if a and b else None
    cuda = device.type == "cuda"
    note = (
        "expert host samples/s over a plain PyTorch loop of the same experts on the same GPU; "
        "each pair of ours moves five batch x hidden float32 tensors over TLS on loopback "
        "(about 1.6 GB/s a stream: near 0.2-0.25 of the plain loop at the default sizes for a "
        "perfect server) and copies four to and from the GPU, which the plain loop does not"
        if cuda
        else "not tested on a CPU: the event loops' TLS and copies take the same cores as "
        "torch's compute, so only the CUDA figure tests the goal"
    )
    return {
        "expert_host_ratio": {
            "value": ratio,
            "goal": GOAL_RATIO,
            "met": (ratio >= GOAL_RATIO if ratio is not None else False) if cuda else None,
            "note": note,
        },
        "placement_ok": {
            "value": ours.get("placement_ok"),
            "goal": True,
            "met": bool(ours.get("placement_ok")),
            "note": f"parameters and optimizer state of every hosted expert on {device}",
        },
    }


def table(ours: dict[str, Any], plain: dict[str, Any], ratio: float | None) -> None:
    print(
        f"{'side':>6} {'samples/s':>11} {'pairs':>7} {'p50 ms':>8} {'p99 ms':>8} {'peak MiB':>9}",
        file=sys.stderr,
    )
    for name, side in (("ours", ours), ("plain", plain)):
        latency = side.get("pair_latency") or {}
        peak = side.get("peak_device_bytes")
        print(
            f"{name:>6} {side.get('samples_per_s') or 0:>11.1f} {side.get('pairs', 0):>7} "
            f"{latency.get('p50_ms', '-'):>8} {latency.get('p99_ms', '-'):>8} "
            f"{'-' if peak is None else f'{peak / 2**20:.0f}':>9}",
            file=sys.stderr,
        )
    print(
        f"ratio ours/plain: {ratio} (goal >= {GOAL_RATIO} on CUDA); placement_ok: "
        f"{ours.get('placement_ok')}; errors: {ours.get('errors')}; training thread busy "
        f"{ours.get('training_thread_busy')}",
        file=sys.stderr,
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="", help="cpu, cuda or cuda:N (default: cuda if any)")
    parser.add_argument("--experts", type=int, help=f"experts hosted ({DEFAULTS['experts']})")
    parser.add_argument("--hidden", type=int, help=f"the ffn expert's width ({DEFAULTS['hidden']})")
    parser.add_argument("--batch", type=int, help=f"samples per call ({DEFAULTS['batch']})")
    parser.add_argument("--clients", type=int, help=f"trainers in flight ({DEFAULTS['clients']})")
    parser.add_argument(
        "--duration", type=float, help=f"timed seconds per side ({DEFAULTS['duration']})"
    )
    parser.add_argument("--json", type=Path, help="also write the result here")
    parser.add_argument(
        "--dry-run", action="store_true", help="tiny sizes, 2 s per side: does it all work"
    )
    args = parser.parse_args()
    for key, value in (DRY_RUN if args.dry_run else DEFAULTS).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if not args.device:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if not re.fullmatch(r"cpu|cuda(:\d+)?", args.device):
        parser.error(f"--device must be cpu, cuda or cuda:N, not {args.device!r}")
    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            parser.error(f"--device {args.device}: torch {torch.__version__} sees no CUDA GPU")
        index = torch.device(args.device).index
        if index is not None and index >= torch.cuda.device_count():
            parser.error(f"--device {args.device}: torch sees {torch.cuda.device_count()} GPU(s)")
    for key in ("experts", "hidden", "batch", "clients"):
        if getattr(args, key) < 1:
            parser.error(f"--{key} must be 1 or more")
    if args.experts > 4096:
        parser.error("--experts must be at most 4096 (the grid's widest dimension)")
    if args.duration <= 0:
        parser.error("--duration must be above 0")
    return args


def main() -> None:
    args = parse_args()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    started = time.perf_counter()
    print(f"ours: expert host on {device} ...", file=sys.stderr)
    ours, spec, uids = asyncio.run(run_ours(args))
    gc.collect()  # the host's experts leave the GPU before the plain loop's arrive
    if cuda:
        torch.cuda.empty_cache()
    print(f"plain: PyTorch loop on {device} ...", file=sys.stderr)
    plain = run_plain(args, spec, uids)
    result_goals = goals(ours, plain, device)
    table(ours, plain, result_goals["expert_host_ratio"]["value"])
    result = {
        "benchmark": "expert_gpu",
        "torch": torch.__version__,
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if cuda else None,
        "torch_threads": torch.get_num_threads(),
        "settings": {
            "expert": "ffn",
            "optimizer": "adam, lr 1e-3",
            "experts": args.experts,
            "hidden": args.hidden,
            "batch": args.batch,
            "clients": args.clients,
            "duration_s": args.duration,
            "warmup_pairs_per_client": args.experts,
            "dry_run": args.dry_run,
            "trainers_are": "tasks on one event loop in a second thread of this process",
        },
        "ours": ours,
        "plain": plain,
        "placement_ok": ours.get("placement_ok"),
        "goals": result_goals,
        "runtime_s": round(time.perf_counter() - started, 1),
    }
    emit(result, args.json)


if __name__ == "__main__":
    main()
