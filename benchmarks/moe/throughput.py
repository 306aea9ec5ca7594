"""Part ``throughput`` of ``benchmarks/moe/suite.py``: Learning@home, Section 4.1, at laptop scale.

The paper builds a model of many identical feed-forward blocks spread over 4 GPUs, adds an
exponential delay after each block's computation, and compares training throughput (Figure 4) of
Learning@home (64 trainers sending requests to the runtimes) with model-parallel training, which
collapses as the delay grows, and with the no-delay model-parallel "upper bound".

Here: ``--throughput-blocks`` (16) blocks ``ExpertSpec(kind="ffn", hidden=H)`` (``LayerNorm(x +
W2·gelu(W1·x))``, H -> 4H -> H, Adam; H = ``--throughput-hidden``, 512), dealt round-robin to
``--throughput-servers`` (4) real ``ExpertServer``s on loopback Hosts in this process
(``loopback_experts``), each with its own compute thread (the paper's one GPU per runtime). A batch
of ``--throughput-batch`` (64) random inputs goes forward through every block in turn (one expert
call each) and then backward through them in reverse with the gradient of ``output.sum()`` (one
call each; the server recomputes the block's forward, returns the input gradient and updates the
block with Adam): 2 x blocks sequential calls per batch, as in the paper where every block is a
remote expert.

Latency: ``ServerFaults`` at every server delays each request (forward and backward) by an
exponential draw with mean ``--throughput-latencies`` (0, 50, 100, 200 ms), in the request's
handler, so the delay holds back only that call, never the server's compute thread (the paper adds
it after each block's computation; either way each block pass of a batch pays one delay, and the
device stays free meanwhile).

Modes, per latency:

- ``learning_at_home``: ``--throughput-trainers`` (64) trainers (coroutines on one Host, each with
  one batch in flight) send their batches through the chain concurrently; the servers batch what
  they receive (up to 4 batches per computation, no batching wait, a queue with room for every
  trainer). After ``--throughput-warmup`` completed batches (by default one per trainer: the
  trainers start together and their first batches finish in one wave, which is no steady state),
  the time until ``--throughput-repeats`` x ``--throughput-window`` more have completed is cut
  into ``--throughput-repeats`` equal slices, and the work done in each is counted in block calls
  completed, each 1 / (2 x blocks) of a batch: samples/s per slice. Counting only finished batches
  per slice would measure where the waves fall: the trainers start together and stay bunched, so
  whole batches finish in waves with seconds between them. ``finished_batches_samples_per_s``
  counts finished batches over the whole timed span, as a check.
- ``model_parallel``: the same chain on the same servers, one batch at a time, forward then
  backward, paying every block's delay in sequence (no pipelining): ``--throughput-repeats``
  repeats of ``--throughput-mp-batches`` batches, samples/s per repeat. At 0 ms this is the
  no-delay model-parallel "upper bound" of the brief; the paper's upper bound was pipelined
  (GPipe-like), which is what ``learning_at_home`` at 0 ms does (many batches in the chain at once).
- ``local`` (once): the same blocks computed in this process with no network, one batch at a time:
  what one core computes, the ceiling of ``model_parallel`` here.

Reported: samples/s mean ± standard deviation over the repeats, per mode and latency, and the
realised per-request delay. The paper times 10 batches, 5 times; here the windows are smaller and
fewer to fit a few minutes: 3 slices of about 40 batches for Learning@home, 3 repeats of one
batch for model parallel. Everything runs on this machine's two CPU cores with torch limited to
one thread per computation (four server threads share the two cores), so absolute figures are CPU
figures; the comparison between modes under latency is the point.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.kit.plot_png import attach_plot, plot_path
from benchmarks.moe.loopback_experts import LoopbackSwarm

NAME = "throughput"
HELP = "Learning@home 4.1: samples/s of 64 async trainers vs model-parallel under block latency"
DEFAULTS: dict[str, Any] = {
    "throughput_blocks": 16,
    "throughput_hidden": 512,
    "throughput_batch": 64,
    "throughput_servers": 4,
    "throughput_latencies": "0,50,100,200",
    "throughput_trainers": 64,
    "throughput_warmup": 64,
    "throughput_window": 40,
    "throughput_mp_batches": 1,
    "throughput_repeats": 3,
    "throughput_seed": 0,
    "throughput_plot": None,  # next to --json: <stem>.throughput.png
}
QUICK: dict[str, Any] = {
    "throughput_blocks": 4,
    "throughput_hidden": 64,
    "throughput_batch": 16,
    "throughput_servers": 2,
    "throughput_latencies": "0,20",
    "throughput_trainers": 8,
    "throughput_warmup": 8,
    "throughput_window": 6,
    "throughput_mp_batches": 1,
    "throughput_repeats": 2,
}
CALL_TIMEOUT = 60.0


def add_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("part throughput")
    group.add_argument("--throughput-blocks", type=int, help="feed-forward blocks in the chain")
    group.add_argument("--throughput-hidden", type=int, help="block width H (H -> 4H -> H)")
    group.add_argument("--throughput-batch", type=int, help="samples per batch")
    group.add_argument("--throughput-servers", type=int, help="expert servers holding the blocks")
    group.add_argument(
        "--throughput-latencies", help="comma-separated mean delays per block call, ms"
    )
    group.add_argument("--throughput-trainers", type=int, help="Learning@home batches in flight")
    group.add_argument("--throughput-warmup", type=int, help="Learning@home batches before timing")
    group.add_argument(
        "--throughput-window", type=int, help="Learning@home batches per timed window"
    )
    group.add_argument(
        "--throughput-mp-batches", type=int, help="model-parallel batches per repeat"
    )
    group.add_argument("--throughput-repeats", type=int, help="timed windows / repeats per mode")
    group.add_argument("--throughput-seed", type=int)
    group.add_argument("--throughput-plot", type=Path, help="PNG of samples/s against latency")


class Chain:
    """The blocks' uids and servers, and one batch's trip through them on ``host``."""

    def __init__(self, host: Any, uids: list[str], addresses: dict[str, str], hidden: int) -> None:
        self.host = host
        self.uids = uids
        self.addresses = addresses
        self.hidden = hidden
        self.calls_done: list[float] = []
        """When each block call of any batch completed (``time.perf_counter``)."""

    async def call(self, uid: str, method: str, tensors: list[Any]) -> Any:
        from core.moe.remote import call_expert

        outputs = await call_expert(
            self.host,
            self.addresses[uid],
            uid,
            method,
            tensors,
            timeout=CALL_TIMEOUT,
            reply_shapes=[[int(tensors[0].shape[0]), self.hidden]],
        )
        self.calls_done.append(time.perf_counter())
        return outputs[0]

    async def train_batch(self, inputs: Any) -> None:
        """Forward through every block, then backward in reverse with d(output.sum())."""
        import torch

        saved = []
        x = inputs
        for uid in self.uids:
            saved.append(x)
            x = await self.call(uid, "forward", [x])
        grad = torch.ones_like(x)
        for uid, block_input in zip(reversed(self.uids), reversed(saved), strict=True):
            grad = await self.call(uid, "backward", [block_input, grad])


def stats(values: list[float]) -> dict[str, Any]:
    return {
        "mean": round(statistics.mean(values), 2),
        "std": round(statistics.stdev(values), 2) if len(values) > 1 else 0.0,
        "values": [round(v, 2) for v in values],
    }


async def learning_at_home(args: argparse.Namespace, chain: Chain) -> dict[str, Any]:
    """``trainers`` batches in flight; after ``warmup`` completions, until ``window * repeats``
    more, samples/s in each of ``repeats`` equal slices of that time."""
    import torch

    warmup, window, repeats = (
        args.throughput_warmup,
        args.throughput_window,
        args.throughput_repeats,
    )
    needed = warmup + window * repeats
    done: list[float] = []
    finished = asyncio.Event()
    errors: list[str] = []

    async def trainer(index: int) -> None:
        generator = torch.Generator().manual_seed(args.throughput_seed * 1000 + index)
        while True:
            inputs = torch.randn(args.throughput_batch, chain.hidden, generator=generator)
            try:
                await chain.train_batch(inputs)
            except Exception as exc:  # counted: a failed batch is not throughput
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            done.append(time.perf_counter())
            if len(done) >= needed:
                finished.set()

    started = time.perf_counter()
    chain.calls_done.clear()
    tasks = [asyncio.ensure_future(trainer(i)) for i in range(args.throughput_trainers)]
    try:
        await finished.wait()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    # equal slices of time after the warm-up; the work done in a slice is counted in block calls,
    # each 1 / (2 x blocks) of a batch: whole batches finish in waves (the trainers start together
    # and stay bunched), so counting only finished batches per slice measures where the waves fall
    start, end = done[warmup - 1], done[-1]
    span = (end - start) / repeats
    calls_per_batch = 2 * len(chain.uids)
    rates = []
    for r in range(repeats):
        low, high = start + r * span, start + (r + 1) * span
        calls = sum(1 for t in chain.calls_done if low < t <= high)
        rates.append(calls / calls_per_batch * args.throughput_batch / span)
    return {
        "samples_per_s": stats(rates),
        "finished_batches_samples_per_s": round(
            (len(done) - warmup) * args.throughput_batch / (end - start), 2
        ),
        "batches_timed": len(done) - warmup,
        "timed_s": round(end - start, 2),
        "warmup_batches": warmup,
        "warmup_s": round(start - started, 2),
        "completions_s": [round(t - started, 3) for t in done],
        "errors": len(errors),
        "first_errors": errors[:3],
    }


async def model_parallel(args: argparse.Namespace, chain: Chain) -> dict[str, Any]:
    """One batch at a time through the chain; samples/s per repeat of ``mp_batches`` batches."""
    import torch

    generator = torch.Generator().manual_seed(args.throughput_seed)
    rates = []
    for _ in range(args.throughput_repeats):
        started = time.perf_counter()
        for _ in range(args.throughput_mp_batches):
            inputs = torch.randn(args.throughput_batch, chain.hidden, generator=generator)
            await chain.train_batch(inputs)
        elapsed = time.perf_counter() - started
        rates.append(args.throughput_mp_batches * args.throughput_batch / elapsed)
    return {
        "samples_per_s": stats(rates),
        "batches_timed": args.throughput_mp_batches * args.throughput_repeats,
    }


def local(args: argparse.Namespace) -> dict[str, Any]:
    """The same blocks' forward and backward in this thread, no network: one core's compute."""
    import torch

    spec = block_spec(args)
    backends = [spec.backend(f"local.{i}") for i in range(args.throughput_blocks)]
    generator = torch.Generator().manual_seed(args.throughput_seed)

    def batch() -> None:
        x = torch.randn(args.throughput_batch, args.throughput_hidden, generator=generator)
        saved = []
        for backend in backends:
            saved.append(x)
            x = backend.forward([x])[0]
        grad = torch.ones_like(x)
        for backend, block_input in zip(reversed(backends), reversed(saved), strict=True):
            grad = backend.backward([block_input], [grad])[0]

    batch()  # warm-up
    rates = []
    for _ in range(args.throughput_repeats):
        started = time.perf_counter()
        for _ in range(args.throughput_mp_batches):
            batch()
        rates.append(
            args.throughput_mp_batches * args.throughput_batch / (time.perf_counter() - started)
        )
    return {"samples_per_s": stats(rates)}


def block_spec(args: argparse.Namespace) -> Any:
    from core.moe.server.experts import ExpertSpec

    return ExpertSpec(
        kind="ffn", hidden=args.throughput_hidden, max_batch=4 * args.throughput_batch
    )


async def measure_latency(args: argparse.Namespace, latency_ms: float) -> dict[str, Any]:
    """Both modes on one swarm whose servers delay every request by ``latency_ms`` on average."""
    import torch

    from core.moe.grid import ExpertGrid

    grid = ExpertGrid("tput", (args.throughput_blocks,))
    spec = block_spec(args)
    swarm = await LoopbackSwarm.start(
        [(grid, spec.backend)],
        servers=args.throughput_servers,
        workers=1,
        mean_latency=latency_ms / 1000,
        seed=args.throughput_seed,
        max_wait=0.0,  # take what is queued at once: a lone model-parallel call never waits
        # room for every trainer's call at one block: the trainers start together, and a "busy"
        # refusal would cost a batch instead of measuring the server
        max_queue=args.throughput_trainers * args.throughput_batch,
    )
    try:
        chain = Chain(swarm.client, list(grid.all_uids()), swarm.addresses, args.throughput_hidden)
        # connections open and every block runs once before timing
        await chain.train_batch(torch.zeros(args.throughput_batch, args.throughput_hidden))
        mp = await model_parallel(args, chain)
        lah = await learning_at_home(args, chain)
        return {
            "latency_ms": latency_ms,
            "model_parallel": mp,
            "learning_at_home": lah,
            "injected": swarm.fault_counts(),
        }
    finally:
        await swarm.close()


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The part's entry point: the local reference, then both modes at every latency, the plot."""
    import torch

    latencies = [float(x) for x in str(args.throughput_latencies).split(",") if x.strip()]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # four server threads on two cores: one thread per computation
    try:
        print("  throughput: local", file=sys.stderr, flush=True)
        reference = local(args)
        rows = []
        for latency in latencies:
            print(f"  throughput: {latency:g} ms", file=sys.stderr, flush=True)
            rows.append(asyncio.run(measure_latency(args, latency)))
    finally:
        torch.set_num_threads(threads)
    upper = rows[0]["model_parallel"]["samples_per_s"]["mean"] if latencies[0] == 0 else None
    result: dict[str, Any] = {
        "paper": "Learning@home (Ryabinin and Gusev 2020), Section 4.1, Figure 4 (feed-forward)",
        "unit": "samples/s (batches/s x batch size), mean and std over repeats",
        "settings": {
            "blocks": args.throughput_blocks,
            "block": f"ffn {args.throughput_hidden} -> {4 * args.throughput_hidden} -> "
            f"{args.throughput_hidden}, Adam on the servers",
            "batch": args.throughput_batch,
            "servers": args.throughput_servers,
            "trainers": args.throughput_trainers,
            "calls_per_batch": 2 * args.throughput_blocks,
            "warmup_batches": args.throughput_warmup,
            "window_batches": args.throughput_window,
            "mp_batches_per_repeat": args.throughput_mp_batches,
            "repeats": args.throughput_repeats,
            "torch_threads": 1,
            "latency": "exponential per block request (forward and backward), at the server",
        },
        "local": reference,
        "model_parallel_upper_bound": upper,
        "latencies": rows,
    }
    path = plot_path(args.throughput_plot, getattr(args, "json", None), "throughput")
    return attach_plot(result, path, write_plot)


def write_plot(result: dict[str, Any], path: Path) -> None:
    """Samples/s against the mean block latency, one line per mode, ± std as bars."""
    from benchmarks.kit.plot_png import Panel, Series, render_panels

    rows = result["latencies"]
    series = []
    for mode, label in (
        ("learning_at_home", "Learning@home"),
        ("model_parallel", "model parallel"),
    ):
        series.append(
            Series(
                f"{label}",
                [(r["latency_ms"], r[mode]["samples_per_s"]["mean"]) for r in rows],
                markers=True,
                errors=[r[mode]["samples_per_s"]["std"] for r in rows],
            )
        )
    ceiling = result["local"]["samples_per_s"]["mean"]
    xs = [r["latency_ms"] for r in rows]
    series.append(
        Series(
            "local compute, 1 core, no network",
            [(min(xs), ceiling), (max(xs), ceiling)],
            color="#888888",
            dashed=True,
        )
    )
    top = max(
        y + e
        for s in series
        for (_, y), e in zip(s.points, s.errors or [0.0] * len(s.points), strict=True)
    )
    panel = Panel(
        title=f"{result['settings']['blocks']} ffn blocks, batch {result['settings']['batch']}, "
        f"{result['settings']['trainers']} trainers",
        x_label="mean latency per block call (ms)",
        y_label="samples/s",
        series=series,
        y_range=(0.0, top * 1.1),
    )
    render_panels(
        [panel],
        columns=1,
        path=path,
        title="Learning@home 4.1 at small scale: throughput under latency (mean ± std over "
        f"{result['settings']['repeats']} time slices or repeats)",
        panel_size=(640, 420),
        shared_legend=True,
    )


def summarize(section: dict[str, Any]) -> list[str]:
    local_sps = section["local"]["samples_per_s"]
    lines = [
        f"local compute (no network, one core): {local_sps['mean']} ± {local_sps['std']} samples/s",
        f"plot: {section.get('plot') or 'not written: ' + str(section.get('plot_error'))}",
    ]
    for row in section["latencies"]:
        lah = row["learning_at_home"]["samples_per_s"]
        mp = row["model_parallel"]["samples_per_s"]
        lines.append(
            f"{row['latency_ms']:>5g} ms: Learning@home {lah['mean']} ± {lah['std']} (finished "
            f"batches {row['learning_at_home']['finished_batches_samples_per_s']}), "
            f"model parallel {mp['mean']} ± {mp['std']} samples/s "
            f"(realised delay {row['injected']['mean_latency_ms']} ms, "
            f"{row['learning_at_home']['errors']} failed batches)"
        )
    return lines
