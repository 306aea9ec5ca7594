"""Low-communication training: dedloc (fp16) against diloco (exact) against diloco (top-k, 2-bit,
error feedback), at equal samples.

    python benchmarks/lowcomm.py --json docs/benchmarks/lowcomm.json

Each of ``--peers`` peers is its own OS process (Host, DHT node, averager, training thread) on
loopback, training one model: an MLP classifier of a fixed random teacher's labels. Every peer
computes the same number of samples in each run (``--samples`` per peer, in microbatches of
``--microbatch``). dedloc steps every ``--target`` samples of the whole swarm with the real
``CollaborativeOptimizer``; diloco ends a round every ``--inner`` inner steps per peer with the
real ``DilocoOptimizer`` (the benchmark ends rounds by count, not by the clock, so that the runs
see equal samples). Reported per run: the loss on 4096 samples no peer trains on, after the run;
the chunk bytes each peer sent in averaging rounds (what the codec puts on the wire: the
averaging's ``bytes_sent``) and every byte its Host sent (DHT records and framing too), per
sample; the wall time.

diloco runs take DiLoCo's outer Nesterov step (``--outer-lr`` 0.7, ``--outer-momentum`` 0.9) when
exact, and plain SGD (``--sparse-outer-lr`` 1.0, no momentum) with top-k, whose error-feedback
residual already carries the momentum, as SparseLoCo found: with both, top-k overshoots.

Goals: diloco with compression sends at most 1/500 of dedloc-fp16's chunk bytes per sample; its
held-out loss is within 3 % of dedloc's. The task is small (a synthetic teacher, not text), so
the loss figure says that the algorithm and the wire work, not how a language model fares.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from harness import ROOT, PeerProcess, commands, emit, precompile, reply, stop_all

sys.path.insert(0, str(ROOT))

NEVER = 10**9
INPUTS, HIDDEN, CLASSES = 32, 128, 8
RUNS = {
    "dedloc-fp16": ("dedloc", "fp16"),
    "diloco-exact": ("diloco", "none"),
    "diloco-topk2": ("diloco", "topk"),
}


def task(seed: int, count: int) -> Any:
    """``count`` samples of the teacher's task; seed 0 is the held-out set."""
    import torch

    teacher = torch.Generator().manual_seed(1234)
    w1 = torch.randn(INPUTS, 64, generator=teacher)
    w2 = torch.randn(64, CLASSES, generator=teacher)
    g = torch.Generator().manual_seed(10_000 + seed)
    x = torch.randn(count, INPUTS, generator=g)
    return x, (torch.tanh(x @ w1) @ w2).argmax(dim=1)


def model() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(INPUTS, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, CLASSES),
    )


# ---- a peer (worker process) ---------------------------------------------------------------------


async def worker(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(1)
    from core.averaging import Averager, AveragerConfig, AveragingResult
    from core.codecs import active_codecs
    from core.codecs.topk import top_k
    from core.dht import DHTConfig, DHTNode, HostTransport
    from core.net import Host, Identity
    from core.training.dedloc.optimizer import CollaborativeConfig, CollaborativeOptimizer
    from core.training.diloco.optimizer import DilocoConfig, DilocoOptimizer
    from core.training.diloco.state import DilocoState
    from core.training.links import PeerLinks
    from core.training.state import TrainingState
    from core.worker.bridge import TrainingBridge

    mode, codec_name = RUNS[args.run]
    codec = top_k(args.density, 2) if codec_name == "topk" else active_codecs().parse(codec_name)
    host = Host(Identity.generate())
    await host.start()
    dht = DHTNode(HostTransport(host), DHTConfig())
    await dht.start([args.join] if args.join else [])
    config = AveragerConfig(
        target_group_size=args.peers,
        min_group_size=args.peers,
        max_matchmaking_time=30.0,
        codec=codec,
        allreduce_timeout=120.0,
    )
    averager = Averager(host, dht, "lowcomm", config)
    chunk_bytes = [0]
    observe = averager.observe

    def counted(result: AveragingResult) -> None:
        chunk_bytes[0] += result.bytes_sent
        observe(result)

    averager.observe = counted  # type: ignore[method-assign]
    bridge = TrainingBridge()
    net = model()
    state = TrainingState(net, torch.optim.AdamW(net.parameters(), lr=args.lr))
    links = PeerLinks.create(averager, bridge)
    optimizer: CollaborativeOptimizer | DilocoOptimizer
    if mode == "dedloc":
        optimizer = CollaborativeOptimizer(
            state,
            links,
            CollaborativeConfig(
                target_batch_size=args.target, average_state_every=0, matchmaking_time=30.0
            ),
        )
    else:
        # top-k's residual carries the momentum (the manifest requires outer_momentum 0 with it)
        lr, momentum = (
            (args.sparse_outer_lr, 0.0) if codec.sparse else (args.outer_lr, args.outer_momentum)
        )
        diloco = DilocoState(state, outer_lr=lr, outer_momentum=momentum,
                             overlap=args.overlap == "on", sparse=codec.sparse,
                             clip_norm=None)  # fmt: skip
        optimizer = DilocoOptimizer(
            diloco, links, DilocoConfig(round_seconds=NEVER, matchmaking_time=30.0), codec=codec
        )
    reply({"address": str(host.addresses[0])})
    async for command in commands():
        if command["op"] != "train":
            break
        await optimizer.start()
        x, y = task(args.index + 1, args.samples)
        started = time.monotonic()
        steps = args.samples // args.microbatch
        for step in range(steps):
            batch = slice(step * args.microbatch, (step + 1) * args.microbatch)

            def backward(batch: slice = batch, x: Any = x, y: Any = y) -> float:
                loss = torch.nn.functional.cross_entropy(net(x[batch]), y[batch])
                loss.backward()  # type: ignore[no-untyped-call]
                return float(loss.detach())

            loss = await bridge.run(backward)
            await optimizer.step(args.microbatch, loss)
            if isinstance(optimizer, DilocoOptimizer) and (step + 1) % args.inner == 0:
                await optimizer.end_round()
        if isinstance(optimizer, DilocoOptimizer) and optimizer._exchange is not None:
            await asyncio.gather(optimizer._exchange, return_exceptions=True)
            # the last round landed on top of nothing: the model is the anchor
        wall = time.monotonic() - started
        hx, hy = task(0, 4096)
        with torch.no_grad():
            if isinstance(optimizer, DilocoOptimizer):
                held = _anchor_loss(optimizer, net, hx, hy)
            else:
                held = float(torch.nn.functional.cross_entropy(net(hx), hy))
        reply(
            {
                "held_out_loss": held,
                "epochs": optimizer.epoch,
                "chunk_bytes": chunk_bytes[0],
                "host_bytes": host.traffic.sent,
                "samples": steps * args.microbatch,
                "wall_s": wall,
                "parameters": sum(p.numel() for p in net.parameters()),
            }
        )
        break
    optimizer.interrupt() if isinstance(optimizer, DilocoOptimizer) else None
    await optimizer.close()
    await averager.close()
    await bridge.aclose()
    await dht.close()
    await host.close()


def _anchor_loss(optimizer: Any, net: Any, hx: Any, hy: Any) -> float:
    """The loss of the outer parameters, which every peer shares (not this peer's inner walk)."""
    import copy

    import torch

    shared = copy.deepcopy(net)
    with torch.no_grad():
        for p, a in zip(shared.parameters(), optimizer.diloco.anchor, strict=True):
            p.copy_(torch.from_numpy(a).reshape(p.shape))
    return float(torch.nn.functional.cross_entropy(shared(hx), hy))


# ---- what one round sends, from the codec's output ------------------------------------------------

CHUNK = 1 << 20
"""Values per chunk: fine enough that every member's part is a quarter of the chunks."""


def round_bytes(parameters: int, peers: int, density: float, bits: int) -> dict[str, Any]:
    """Encode a pseudo-gradient of ``parameters`` random values chunk by chunk, as a round does:
    a member sends (peers-1)/peers of it to the reducers, and sends its part's mean (the sum of
    ``peers`` sparse chunks, in the codec that carries it back) to the other peers-1. The bytes
    are what the encoder produced, added up; the time is that upload at 20 Mbit/s.

    Also a member that reduces nothing (a client-mode home, or any home when the load balancer
    gives every part to the backbone): it sends its whole sparse vector once, and receives every
    part's mean (counted from our part's means, times ``peers``)."""
    import numpy as np

    from core.codecs.chunks import decode, encode
    from core.codecs.topk import top_k

    codec = top_k(density, bits)
    back = codec.for_sum(peers)
    rng = np.random.default_rng(0)
    sent = returned = own_part = 0
    for index, done in enumerate(range(0, parameters, CHUNK)):
        count = min(CHUNK, parameters - done)
        if index % peers:  # another member's part: our chunk goes to it
            sent += len(encode(codec, rng.standard_normal(count, dtype=np.float32)))
            continue
        # our part: the mean of every member's sparse chunk goes back to the peers - 1 others
        mean = np.zeros(count, dtype=np.float32)
        for member in range(peers):
            data = encode(codec, rng.standard_normal(count, dtype=np.float32))
            own_part += len(data) if member == 0 else 0
            mean += decode(codec, data, count) / peers
        returned += len(encode(back, mean)) * (peers - 1)
    per_member = sent + returned
    upload = per_member * 8 / 20e6
    whole = sent + own_part
    return {
        "parameters": parameters,
        "density": density,
        "bits": bits,
        "group": peers,
        "bytes_to_reducers": sent,
        "bytes_of_means_sent_back": returned,
        "bytes_one_member_sends": per_member,
        "upload_seconds_at_20_mbit": upload,
        "reducing_nothing": {
            "bytes_sent": whole,
            "upload_seconds_at_20_mbit": whole * 8 / 20e6,
            "bytes_received": returned // (peers - 1) * peers if peers > 1 else 0,
        },
        "fp16_dedloc_step_bytes": int(parameters * 2 * 2 * (peers - 1) / peers),
    }


# ---- the driver ----------------------------------------------------------------------------------


async def one_run(args: argparse.Namespace, run: str) -> dict[str, Any]:
    base = [__file__, "--worker", "--run", run, "--peers", str(args.peers)]
    for flag in (
        "samples",
        "microbatch",
        "target",
        "inner",
        "density",
        "lr",
        "outer_lr",
        "outer_momentum",
        "sparse_outer_lr",
        "overlap",
    ):
        base += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    peers: list[PeerProcess] = []
    try:
        first = await PeerProcess.start([*base, "--index", "0"])
        peers.append(first)
        for index in range(1, args.peers):
            peers.append(
                await PeerProcess.start([*base, "--index", str(index), "--join", first.address])
            )
        await asyncio.sleep(2.0)  # the DHT settles: every peer finds the others' records
        answers = await asyncio.gather(*(p.ask(op="train") for p in peers))
    finally:
        await stop_all(peers)
    samples = sum(a["samples"] for a in answers)
    return {
        "run": run,
        "held_out_loss": max(a["held_out_loss"] for a in answers),
        "held_out_loss_per_peer": [round(a["held_out_loss"], 5) for a in answers],
        "epochs": [a["epochs"] for a in answers],
        "chunk_bytes_per_peer_per_sample": sum(a["chunk_bytes"] for a in answers) / samples,
        "host_bytes_per_peer_per_sample": sum(a["host_bytes"] for a in answers) / samples,
        "wall_s": max(a["wall_s"] for a in answers),
        "parameters": answers[0]["parameters"],
    }


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    runs = {run: await one_run(args, run) for run in RUNS if run in args.runs.split(",")}
    if len(runs) < len(RUNS):
        return {"benchmark": "lowcomm", "settings": _settings(args), "runs": runs}
    base, exact, sparse = (runs[r] for r in RUNS)
    key = "chunk_bytes_per_peer_per_sample"
    ratio = sparse[key] / base[key] if base[key] else None
    loss_gap = sparse["held_out_loss"] / base["held_out_loss"] - 1
    return {
        "benchmark": "lowcomm",
        "settings": _settings(args),
        "runs": runs,
        "compressed_bytes_vs_dedloc": ratio,
        "exact_bytes_vs_dedloc": exact[key] / base[key] if base[key] else None,
        "compressed_loss_vs_dedloc": loss_gap,
        "goals": {
            "bytes_at_most_1_500": ratio is not None and ratio <= 1 / 500,
            "loss_within_3_percent": loss_gap <= 0.03,
        },
    }


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    names = ("peers", "samples", "microbatch", "target", "inner", "density", "lr", "outer_lr",
             "outer_momentum", "sparse_outer_lr", "overlap")  # fmt: skip
    return {k: getattr(args, k) for k in names}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--run", choices=sorted(RUNS), default="dedloc-fp16", help=argparse.SUPPRESS
    )
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--join", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--peers", type=int, default=4)
    parser.add_argument("--samples", type=int, default=25600, help="per peer, in each run")
    parser.add_argument("--microbatch", type=int, default=32)
    parser.add_argument("--target", type=int, default=512, help="dedloc: samples per step")
    parser.add_argument("--inner", type=int, default=100, help="diloco: inner steps per round")
    parser.add_argument("--density", type=float, default=0.01, help="top-k: share sent")
    parser.add_argument("--lr", type=float, default=2e-3, help="AdamW (dedloc's and inner)")
    parser.add_argument("--outer-lr", type=float, default=0.7, help="diloco: outer Nesterov lr")
    parser.add_argument("--outer-momentum", type=float, default=0.9, help="diloco: outer Nesterov")
    parser.add_argument(
        "--sparse-outer-lr", type=float, default=1.0, help="diloco top-k: outer lr (no momentum)"
    )
    parser.add_argument("--overlap", choices=("on", "off"), default="on", help="diloco: overlap")
    parser.add_argument("--runs", default=",".join(RUNS), help="which runs (comma-separated)")
    parser.add_argument(
        "--round-bytes",
        default="1e9",
        help="model sizes (comma-separated) whose round is encoded for real to count its bytes; "
        "'' skips it (7e9 takes about 10 minutes)",
    )
    parser.add_argument(
        "--round-groups", default="4", help="group sizes (comma-separated) for --round-bytes"
    )
    parser.add_argument("--skip-training", action="store_true", help="only --round-bytes")
    parser.add_argument("--json", type=argparse.FileType("w"), default=None)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(worker(args))
        return
    precompile()
    result = {"benchmark": "lowcomm"} if args.skip_training else asyncio.run(bench(args))
    sizes = [int(float(size)) for size in args.round_bytes.split(",") if size]
    groups = [int(group) for group in args.round_groups.split(",") if group]
    rounds = [
        round_bytes(size, group, args.density, 2) for size in sizes for group in groups or [4]
    ]
    result["round_bytes"] = rounds
    result["goals"] = {
        **result.get("goals", {}),
        **{
            f"round_of_{r['parameters']:.0e}_at_20_mbit_within_30_s": r["upload_seconds_at_20_mbit"]
            <= 30
            for r in rounds
            if r["parameters"] == 10**9 and r["group"] == args.peers
        },
    }
    emit(result, None)
    if args.json is not None:
        args.json.write(__import__("json").dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
