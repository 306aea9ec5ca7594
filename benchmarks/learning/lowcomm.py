"""Low-communication training: dedloc (fp16) against diloco (exact) against diloco (top-k, 2-bit,
error feedback), at equal samples, on the demo's language model and real text.

    python -m benchmarks.learning.lowcomm --json docs/benchmarks/learning/lowcomm.json [--model llama-demo]

The task is a shipped preset's: ``--model demo`` (the masked ALBERT of
``resources/demo/project.toml``, 0.42 M parameters) or ``llama-demo`` (the causal Llama), with its
seeded initial weights, optimizer, learning-rate schedule (warm-up, then decay), microbatch size and
data. The text is the demo's: ``--corpus python-docs``, the prose of Python's documentation with
whole modules held out (a few thousand of the demo's 64-token sequences, so a run goes over it
several times), or ``packages``, with the installed packages' docstrings added (about 20 MB: a run
never repeats it; a few minutes to write the first time). The driver writes the shards and the
tokenizer once (into ``--data``, kept for reruns, or a temporary folder) and every peer reads them
from there. The bytes a round carries grow with the parameters, and the loss is a language model's
on text it has not seen: a toy's few parameters would let fixed costs (records, framing) dominate
the bytes, and its loss would say nothing of how a language model fares.

Each of ``--peers`` peers is its own OS process (Host, DHT node, averager, training thread, one
torch thread) on loopback. Every peer computes the same number of samples in each run
(``--samples`` per peer, in the manifest's microbatches), each in its own data order. dedloc steps
every ``--target`` samples of the whole swarm (the manifest's ``target_batch_size``) with the real
``DedlocOptimizer`` (gradients only: every peer starts from the same weights and applies the
same means, so no state averaging); diloco ends a round every ``--inner`` inner steps per peer with
the real ``DilocoOptimizer`` (the benchmark ends rounds by count, not by the clock, so that the
runs see equal samples; the inner schedule's clock moves on by ``--inner`` steps a round). Reported
per run: the held-out loss after the run (``[evaluation]``'s sequences, which no peer trains on;
for diloco the outer parameters every peer shares) beside the unigram floor (what a model that only
counts tokens scores: ``floor``, and each run's ``below_floor``); the chunk bytes each peer sent in
averaging rounds (what the codec puts on the wire: the averaging's ``bytes_sent``) and every byte
its Host sent (DHT records and framing too), per sample; the wall time.

diloco runs take DiLoCo's outer Nesterov step (``--outer-lr`` 0.7, ``--outer-momentum`` 0.9) when
exact, and plain SGD (``--sparse-outer-lr`` 1.0, no momentum) with top-k, whose error-feedback
residual already carries the momentum, as SparseLoCo found: with both, top-k overshoots. Top-k
keeps ``--residual-decay`` of its residual a round (the manifest's). Both modes clip gradients at
the manifest's ``clip_norm``. Each run's manifest is in its mode (``training.mode``), so diloco's
inner optimizer steps at the rate the diloco mode takes for one microbatch (each run's ``lr``);
``--lr`` replaces the manifest's ``lr`` that it is made from.

Goals: diloco with compression sends at most 1/500 of dedloc-fp16's chunk bytes per sample; its
held-out loss is within 3 % of dedloc's. The defaults (3 peers, 25600 samples each, rounds of 50
inner steps: 32 rounds, 300 dedloc steps) took 43 minutes for the three runs with ``demo`` on a
2-core machine busy with a test run beside them; ``llama-demo`` takes longer.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.kit.harness import (
    PeerProcess,
    as_module,
    commands,
    emit,
    precompile,
    reply,
    stop_all,
)
from core.project import Manifest, load_manifest
from core.util.process.resources import resource_path

NEVER = 10**9
MODELS = {"demo": "demo/project.toml", "llama-demo": "llama-demo/project.toml"}
RUNS = {
    "dedloc-fp16": ("dedloc", "fp16"),
    "diloco-exact": ("diloco", "none"),
    "diloco-topk2": ("diloco", "topk"),
}


def preset(model: str, lr: float | None = None, mode: str | None = None) -> Manifest:
    """The shipped preset's manifest, with ``lr`` for its learning rate and in training ``mode``
    (each when given): the recipe's optimizer takes the rate that mode steps at."""
    manifest = load_manifest(resource_path(MODELS[model]))
    changes: dict[str, Any] = {"lr": lr, "mode": mode}
    changes = {key: value for key, value in changes.items() if value is not None}
    if not changes:
        return manifest
    training = dataclasses.replace(manifest.training, **changes)
    return dataclasses.replace(manifest, training=training)


# ---- a peer (worker process) ---------------------------------------------------------------------


async def worker(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(1)
    from core.averaging import Averager, AveragerConfig, AveragingResult
    from core.codecs import active_codecs
    from core.codecs.topk import top_k
    from core.dht import DHTConfig, DHTNode, HostTransport
    from core.modes import active_modes
    from core.net import Host, Identity
    from core.training.dedloc.optimizer import DedlocConfig, DedlocOptimizer
    from core.training.diloco.optimizer import DilocoConfig, DilocoOptimizer
    from core.training.diloco.state import DilocoState
    from core.training.evaluation import load_held_out, measure
    from core.training.links import PeerLinks
    from core.training.peer.recipe import (
        build_model,
        data_stream,
        fetch_tokenizer,
        mlm_loss,
        training_state,
    )
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
    reply({"address": str(host.addresses[0])})
    incoming = commands()
    # every peer prepares at once (the model, the tokenizer, the data order's shuffle buffer), so
    # that none is still reading text when the others start training
    if (await anext(incoming, {"op": "stop"}))["op"] != "prepare":
        await _close(None, averager, bridge, dht, host)
        return
    manifest = preset(args.model, args.lr, mode)
    t = manifest.training
    data = Path(args.data)
    model = build_model(manifest)
    state = training_state(model, manifest)
    base_lr = active_modes().parse(t.mode).learning_rate(t)  # the mode's, before the schedule
    links = PeerLinks.create(averager, bridge)
    optimizer: DedlocOptimizer | DilocoOptimizer
    if mode == "dedloc":
        optimizer = DedlocOptimizer(
            state,
            links,
            DedlocConfig(
                target_batch_size=args.target, average_state_every=0,
                clip_norm=t.clip_norm or None, matchmaking_time=30.0,
            ),
        )  # fmt: skip
    else:
        # top-k's residual carries the momentum (the manifest requires outer_momentum 0 with it)
        lr, momentum = (
            (args.sparse_outer_lr, 0.0) if codec.sparse else (args.outer_lr, args.outer_momentum)
        )
        diloco = DilocoState(state, outer_lr=lr, outer_momentum=momentum,
                             overlap=args.overlap == "on", sparse=codec.sparse,
                             clip_norm=t.clip_norm or None,
                             residual_decay=args.residual_decay)  # fmt: skip
        # rounds end by count here, every ``--inner`` steps: the clock's estimate (speed times a
        # round of ``NEVER`` seconds) would send the inner schedule past its end at the first landing
        config = DilocoConfig(
            round_seconds=NEVER, matchmaking_time=30.0, steps_per_round=float(args.inner)
        )
        optimizer = DilocoOptimizer(diloco, links, config, codec=codec)
    tokenizer = fetch_tokenizer(manifest, str(data), data)
    held = load_held_out(manifest, tokenizer, data_base=str(data))
    stream = data_stream(manifest, tokenizer, data_base=str(data), seed=args.index + 1)
    first = [next(stream)]  # fills the shuffle buffer before the clock starts
    reply({"ready": True})
    if (await anext(incoming, {"op": "stop"}))["op"] != "train":
        await _close(optimizer, averager, bridge, dht, host)
        return
    await optimizer.start()
    started = time.monotonic()
    steps = args.samples // t.microbatch_size
    samples = 0

    def backward() -> tuple[float, int]:
        batch = first.pop() if first else next(stream)  # tokenized on the training thread
        loss = mlm_loss(model, batch)
        loss.backward()  # type: ignore[no-untyped-call]
        return float(loss.detach()), int(batch["input_ids"].size(0))

    for step in range(steps):
        loss, size = await bridge.run(backward)
        samples += size
        await optimizer.step(size, loss)
        if isinstance(optimizer, DilocoOptimizer) and (step + 1) % args.inner == 0:
            await optimizer.end_round()
    if isinstance(optimizer, DilocoOptimizer):
        await optimizer.settle()  # the last round's exchange lands before the loss is measured
    wall = time.monotonic() - started
    # diloco: the outer parameters, which every peer shares (not this peer's inner walk)
    measured = model if mode == "dedloc" else _outer_model(optimizer, model)
    held_out = await bridge.run(lambda: measure(measured, held.batches, causal=held.causal))
    reply(
        {
            "held_out_loss": held_out.loss,
            "held_out_accuracy": held_out.accuracy,
            "epochs": optimizer.epoch,
            "chunk_bytes": chunk_bytes[0],
            "host_bytes": host.traffic.sent,
            "samples": samples,
            "wall_s": wall,
            "parameters": sum(p.numel() for p in model.parameters()),
            "lr": base_lr,
        }
    )
    # stays in the swarm until the driver has every peer's answer: a slower peer may still need
    # it in a round
    async for _ in incoming:
        pass
    await _close(optimizer, averager, bridge, dht, host)


async def _close(optimizer: Any, averager: Any, bridge: Any, dht: Any, host: Any) -> None:
    from core.training.diloco.optimizer import DilocoOptimizer

    if optimizer is not None:
        if isinstance(optimizer, DilocoOptimizer):
            optimizer.interrupt()
        await optimizer.close()
    await averager.close()
    await bridge.aclose()
    await dht.close()
    await host.close()


def _outer_model(optimizer: Any, model: Any) -> Any:
    """A copy of ``model`` holding the outer parameters (the anchor)."""
    import copy

    import torch

    shared = copy.deepcopy(model)
    trained = [p for p in shared.parameters() if p.requires_grad]  # the anchor's order
    with torch.no_grad():
        for p, a in zip(trained, optimizer.diloco.anchor, strict=True):
            p.copy_(torch.from_numpy(a).reshape(p.shape))
    return shared


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


def floor_of(manifest: Manifest, data: Path) -> float:
    """The held-out set's unigram floor, as the backbone computes it."""
    from core.training.evaluation import load_held_out, project_floor
    from core.training.peer.recipe import fetch_tokenizer

    tokenizer = fetch_tokenizer(manifest, str(data), data)
    held = load_held_out(manifest, tokenizer, data_base=str(data))
    return project_floor(manifest, tokenizer, held, data_base=str(data))


async def one_run(args: argparse.Namespace, run: str, data: Path, floor: float) -> dict[str, Any]:
    base = [
        *as_module(__spec__),
        "--worker",
        "--run",
        run,
        "--peers",
        str(args.peers),
        "--data",
        str(data),
    ]
    for flag in (
        "model",
        "samples",
        "target",
        "inner",
        "density",
        "lr",
        "outer_lr",
        "outer_momentum",
        "sparse_outer_lr",
        "residual_decay",
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
        await asyncio.gather(*(p.ask(op="prepare") for p in peers))
        await asyncio.sleep(2.0)  # the DHT settles: every peer finds the others' records
        answers = await asyncio.gather(*(p.ask(op="train") for p in peers))
    finally:
        await stop_all(peers)
    samples = sum(a["samples"] for a in answers)
    losses = [a["held_out_loss"] for a in answers]
    # the worst peer's (None: one diverged)
    loss = None if None in losses else max(losses)
    return {
        "run": run,
        "held_out_loss": loss,
        "below_floor": None if loss is None else floor - loss,
        "held_out_loss_per_peer": [None if x is None else round(x, 5) for x in losses],
        "held_out_accuracy": min(a["held_out_accuracy"] for a in answers),
        "epochs": [a["epochs"] for a in answers],
        "samples": samples,
        "chunk_bytes_per_peer_per_sample": sum(a["chunk_bytes"] for a in answers) / samples,
        "host_bytes_per_peer_per_sample": sum(a["host_bytes"] for a in answers) / samples,
        "wall_s": max(a["wall_s"] for a in answers),
        "parameters": answers[0]["parameters"],
        "lr": answers[0]["lr"],
    }


async def bench(args: argparse.Namespace, manifest: Manifest) -> dict[str, Any]:
    from core.swarm.demo_data import prepare_demo_data

    with tempfile.TemporaryDirectory(prefix="lowcomm-") as tmp:
        data = args.data or Path(tmp) / "data"
        packages = args.corpus == "packages"
        await asyncio.to_thread(lambda: prepare_demo_data(manifest, data, packages=packages))
        floor = await asyncio.to_thread(floor_of, manifest, data)
        print(f"unigram floor of the held-out set: {floor:.4f} nats", flush=True)
        wanted = args.runs.split(",")
        runs = {run: await one_run(args, run, data, floor) for run in RUNS if run in wanted}
    head = {"benchmark": "lowcomm", "settings": _settings(args, manifest), "floor": floor}
    if len(runs) < len(RUNS):
        return {**head, "runs": runs}
    base, exact, sparse = (runs[r] for r in RUNS)

    def vs_dedloc(run: dict[str, Any], key: str) -> float | None:
        return run[key] / base[key] if base[key] else None

    chunks, hosts = "chunk_bytes_per_peer_per_sample", "host_bytes_per_peer_per_sample"
    ratio = vs_dedloc(sparse, chunks)
    losses = base["held_out_loss"], sparse["held_out_loss"]
    loss_gap = None if None in losses else losses[1] / losses[0] - 1
    return {
        **head,
        "runs": runs,
        "compressed_bytes_vs_dedloc": ratio,
        "compressed_host_bytes_vs_dedloc": vs_dedloc(sparse, hosts),
        "exact_bytes_vs_dedloc": vs_dedloc(exact, chunks),
        "compressed_loss_vs_dedloc": loss_gap,
        "goals": {
            "bytes_at_most_1_500": ratio is not None and ratio <= 1 / 500,
            "loss_within_3_percent": loss_gap is not None and loss_gap <= 0.03,
        },
    }


def _settings(args: argparse.Namespace, manifest: Manifest) -> dict[str, Any]:
    names = ("model", "corpus", "peers", "samples", "target", "inner", "density", "lr",
             "outer_lr", "outer_momentum", "sparse_outer_lr", "residual_decay",
             "overlap")  # fmt: skip
    t = manifest.training
    return {
        **{k: getattr(args, k) for k in names},
        "microbatch": t.microbatch_size,
        "optimizer": t.optimizer,
        "warmup_steps": t.warmup_steps,
        "total_steps": t.total_steps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--run", choices=sorted(RUNS), default="dedloc-fp16", help=argparse.SUPPRESS
    )
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--join", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--model", choices=sorted(MODELS), default="demo", help="the preset")
    parser.add_argument(
        "--corpus", choices=("python-docs", "packages"), default="python-docs",
        help="the demo's text, or with the installed packages' docstrings (minutes to write)",
    )  # fmt: skip
    parser.add_argument("--data", type=Path, default=None, help="keep the corpus here for reruns")
    parser.add_argument("--peers", type=int, default=3)
    parser.add_argument("--samples", type=int, default=25600, help="per peer, in each run")
    parser.add_argument(
        "--target", type=int, default=None, help="dedloc: samples per step (the manifest's)"
    )
    parser.add_argument("--inner", type=int, default=50, help="diloco: inner steps per round")
    parser.add_argument("--density", type=float, default=0.01, help="top-k: share sent")
    parser.add_argument(
        "--lr",
        type=float,
        default=None,
        help="dedloc's and the inner learning rate (the manifest's)",
    )
    parser.add_argument("--outer-lr", type=float, default=0.7, help="diloco: outer Nesterov lr")
    parser.add_argument("--outer-momentum", type=float, default=0.9, help="diloco: outer Nesterov")
    parser.add_argument(
        "--sparse-outer-lr", type=float, default=1.0, help="diloco top-k: outer lr (no momentum)"
    )
    parser.add_argument(
        "--residual-decay", type=float, default=None,
        help="diloco top-k: the residual kept a round (the manifest's)",
    )  # fmt: skip
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
    # the manifest's values, resolved once here: every worker gets them as flags
    manifest = preset(args.model)
    t = manifest.training
    args.lr = t.lr if args.lr is None else args.lr
    args.target = t.target_batch_size if args.target is None else args.target
    args.residual_decay = t.residual_decay if args.residual_decay is None else args.residual_decay
    precompile()
    result: dict[str, Any] = (
        {"benchmark": "lowcomm"} if args.skip_training else asyncio.run(bench(args, manifest))
    )
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
            if r["parameters"] == 10**9 and r["group"] == (groups or [4])[0]
        },
    }
    emit(result, None)
    if args.json is not None:
        args.json.write(__import__("json").dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
