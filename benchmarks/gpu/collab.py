"""A collaborative run on one GPU: how closely the CPU backbone's replica follows two trainers.

    python -m benchmarks.gpu.collab --json out.json                  # cuda if torch sees one
    python -m benchmarks.gpu.collab --device cpu --epochs 5 --timeout 300 --json out.json
    python -m benchmarks.gpu.collab --device cpu --dry-run --json out.json

What runs: the demo project (``resources/demo/project.toml``), its shards and tokenizer written to a
temporary folder and served over HTTP on loopback, and three project peers in this one process and
event loop: the backbone (a backbone on the CPU that writes a checkpoint every epoch) and two
trainers on ``--device`` (both on the same GPU with ``cuda``), each walking the shards in its own
order. They train until both trainers finished ``--epochs`` collaborative steps or ``--timeout``
seconds (data preparation included) passed; then every peer is stopped and closed, the server too,
and the temporary folder is removed. The trainers are started one after the other, each once the
previous one built its model: every peer seeds torch's global generator to build the project's
initial weights, and two models built at the same time in one process would draw from it in turn
and come out different.

What is measured: at each of a trainer's epoch events its parameters are copied to the CPU in
float32 (on the event loop, between microbatches: the step is done and nothing else touches them).
After the run each backbone checkpoint is loaded into a fresh model, and for every epoch for which
both exist the relative L2 distance ||backbone - trainer|| / ||trainer|| over all parameters is
computed for each trainer, and the same between the two trainers. An epoch ``e`` (what the events
count, from 0) ends with the step that brings the state to epoch ``e + 1``, the number a checkpoint
is named by. For scale, ``trainers_moved`` is how far each trainer got from the initial weights.
``backbone_checkpoints`` lists each checkpoint with the updates its optimizer applied (every step of
this run is one update, so a checkpoint of epoch N should hold N) and its largest distance to the
trainers both at the epoch it is named by and at the epoch its update count says: a checkpoint
that holds a later state than its name shows a step's distance at the first and 0 at the second.

Also reported per epoch: the collaboration's mean loss (the backbone's metrics: the trainers' summed
losses over their summed microbatches; the epoch event itself carries none), the samples the step
was taken on, the wall time from the previous epoch's end (for the first, from the second trainer's
ready: it includes fetching the tokenizer and starting the data streams), samples/s, each trainer's
own samples and averaging time; and for the run the steady samples/s (all epochs but the first),
torch's version, the GPU's name and the peak GPU memory (CUDA's allocated high-water mark of the
whole process: both trainers together).

What to expect, and the goal: the backbone never computes a gradient. In each gradient round it
reduces a share and receives the same averaged gradient as every trainer, and applies it with the
same optimizer, clipping and schedule to a replica that started from the same seeded weights; every
``average_state_every`` epochs (5 in the demo) the state round replaces the parameters and optimizer
statistics of all of them with the trainers' exact average (the backbone's weight is 0). So the
replica equals the trainers' state up to floating-point rounding. With everything on the CPU the
operations are identical and the distance is exactly 0 (measured at every epoch of 5-epoch runs and
of dry runs). On a GPU the trainers compute the same step with other kernels (other summation orders
in the clipping norm and in LAMB's trust ratios), which differ by a few float32 ulps per step: about
1e-7 of each update, while an update moves the model by about 3 times the learning rate (1.6e-3 at
the first warm-up step with a nonzero rate). After a few steps the distance should therefore stay
near 1e-8 or below (expected, not yet measured on a GPU), and an epoch that ends with a state round
brings it back to 0 when the checkpoint was written after that round.

The goal is 1e-4 at every epoch with a checkpoint: far above that rounding, and still 16 times below
what one step at the smallest nonzero rate moves the model, so a replica that missed a step, or
whose checkpoint is named one epoch off, fails it. (A tolerance like 0.05 would pass a replica
that never left the initial weights: five demo steps move the model by only 5e-3.) The trainers'
mutual distance is 0 when both run the same kernels on the same kind of device.

``--dry-run`` takes 2 epochs of 64 samples (4 microbatches of 16 per step, shared by the two
trainers). The demo's warm-up gives the first step a learning rate of 0, so only the second epoch
moves the model; its epochs are shorter than the second the backbone waits before it reports an
epoch's metrics (and writes the checkpoint), so its checkpoint of epoch 1 is often skipped and one
epoch is compared. It takes 12 to 17 s on two CPU cores, 4 of them preparing the data; the default
5 epochs of 256 samples about 30 s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from benchmarks.kit.harness import ROOT, emit
from core.data import ShardServer
from core.project import Manifest, ManifestError, load_manifest
from core.swarm.demo_data import prepare_demo_data
from core.training.checkpoints import CheckpointStore
from core.training.peer.project_peer import PeerSettings, ProjectPeer
from core.training.peer.recipe import build_model
from core.worker.events import PeerEpoch, PeerEvent, PeerMetrics, PeerReady

MANIFEST = ROOT / "resources" / "demo" / "project.toml"
TRAINERS = 2
GOAL = 1e-4
"""The largest relative distance between the backbone's replica and a trainer (see above)."""
DRY_EPOCHS = 2
DRY_TARGET_BATCH = 64
CHECKPOINT_WAIT = 30.0
"""Seconds the backbone gets, once the trainers stopped, for the last epoch's metrics and
checkpoint (written once the epoch's metrics are in, a short grace after the epoch ends)."""
CLOSE_WAIT = 20.0
"""Seconds a peer gets to return from ``run`` once told to stop."""

Parameters = dict[str, torch.Tensor]


def snapshot(model: torch.nn.Module) -> Parameters:
    """The model's parameters as CPU float32 copies, by name (tied weights once)."""
    return {
        name: p.detach().to("cpu", torch.float32, copy=True) for name, p in model.named_parameters()
    }


@dataclass(frozen=True)
class Replica:
    """What one of the backbone's checkpoints holds."""

    epoch: int
    """The epoch it is named by (the replica's, as the backbone saw it)."""
    steps: int | None
    """The updates its optimizer applied: the epoch too, in a replica saved between steps."""
    parameters: Parameters


def load_replica(manifest: Manifest, path: Path) -> Replica:
    """A backbone's checkpoint, loaded into a fresh model."""
    checkpoint = CheckpointStore.load(path)
    model = build_model(manifest)
    model.load_state_dict(checkpoint.model)
    states = checkpoint.optimizer.get("state", {}).values()
    steps = {int(s["step"]) for s in states if isinstance(s, dict) and "step" in s}
    return Replica(checkpoint.epoch, max(steps) if len(steps) == 1 else None, snapshot(model))


def relative_distance(a: Parameters, b: Parameters) -> float:
    """||a - b|| / ||b|| over all parameters (summed in float64: the differences can be tiny)."""
    diff = sum(float((a[k].double() - b[k].double()).square().sum()) for k in b)
    norm = sum(float(b[k].double().square().sum()) for k in b)
    return math.sqrt(diff / norm) if norm > 0 else math.inf


@dataclass
class Trainer:
    """One trainer and what its events told: a snapshot of its parameters after each step."""

    name: str
    ready: asyncio.Future[float]
    """Monotonic time of its ready event (its model is built)."""
    epochs: dict[int, PeerEpoch] = field(default_factory=dict)
    """Its epoch events, by the epoch finished."""
    ended_at: dict[int, float] = field(default_factory=dict)
    """Monotonic time of each of those events."""
    snapshots: dict[int, Parameters] = field(default_factory=dict)
    """Its parameters by the state's epoch after the step (``PeerEpoch.epoch + 1``)."""
    peer: ProjectPeer | None = None

    def on_event(self, event: PeerEvent) -> None:
        if isinstance(event, PeerReady) and not self.ready.done():
            self.ready.set_result(time.monotonic())
        elif isinstance(event, PeerEpoch):
            self.ended_at[event.epoch] = time.monotonic()
            self.epochs[event.epoch] = event
            trainer = self.peer.trainer if self.peer is not None else None
            if trainer is not None:
                self.snapshots[event.epoch + 1] = snapshot(trainer.model)


@dataclass
class Backbone:
    address: asyncio.Future[str]
    metrics: dict[int, PeerMetrics] = field(default_factory=dict)
    """The collaboration's metrics, by the epoch finished."""

    def on_event(self, event: PeerEvent) -> None:
        if isinstance(event, PeerReady) and not self.address.done():
            self.address.set_result(event.address)
        elif isinstance(event, PeerMetrics):
            self.metrics[event.epoch] = event


async def first_of(*futures: asyncio.Future[Any], timeout: float) -> None:
    """Wait until one of ``futures`` is done, or ``timeout`` seconds passed."""
    await asyncio.wait(futures, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)


@dataclass
class Run:
    trainers: list[Trainer]
    backbone: Backbone
    replicas: dict[int, Replica] = field(default_factory=dict)
    """The backbone's checkpoints, by their epoch."""
    timed_out: bool = False
    seconds: float = 0.0


async def collaborate(args: argparse.Namespace, manifest: Manifest, root: Path) -> Run:
    """Run the backbone and the trainers until ``args.epochs`` or the timeout; collect the
    backbone's checkpoints; stop and close everything."""
    started = time.monotonic()
    deadline = started + float(args.timeout)

    def left() -> float:
        return max(1.0, deadline - time.monotonic())

    data = root / "data"
    await asyncio.to_thread(prepare_demo_data, manifest, data)
    loop = asyncio.get_running_loop()
    run = Run(
        [Trainer(f"trainer-{i}", loop.create_future()) for i in range(TRAINERS)],
        Backbone(loop.create_future()),
    )
    server = ShardServer(data)
    base = await server.start()
    aux_dir = root / "backbone"
    aux = ProjectPeer(
        PeerSettings(
            manifest, work_dir=aux_dir, role="backbone", device="cpu", data_base=base,
            checkpoint_every=1, keep_checkpoints=args.epochs + 2,
        ),
        run.backbone.on_event,
    )  # fmt: skip
    stop = asyncio.Event()
    aux_task = asyncio.create_task(aux.run(stop), name="bench/aux")
    peers: list[ProjectPeer] = []
    tasks: list[asyncio.Task[None]] = []
    try:
        await first_of(aux_task, run.backbone.address, timeout=left())
        if aux_task.done():
            aux_task.result()  # the backbone failed to start: say why
        if not run.backbone.address.done():
            run.timed_out = True
            return run
        address = run.backbone.address.result()
        for index, trainer in enumerate(run.trainers):
            trainer.peer = peer = ProjectPeer(
                PeerSettings(
                    manifest, work_dir=root / trainer.name, role="trainer", device=args.device,
                    data_base=base, data_seed=index + 1, initial_peers=(address,),
                    until_epoch=args.epochs,
                ),
                trainer.on_event,
            )  # fmt: skip
            peers.append(peer)
            task = asyncio.create_task(peer.run(stop), name=f"bench/{trainer.name}")
            tasks.append(task)
            # one at a time: two models built at once would draw in turn from the seeded generator
            await first_of(task, trainer.ready, timeout=left())
            if task.done():
                task.result()
        done, pending = await asyncio.wait(tasks, timeout=left())
        run.timed_out = bool(pending)
        for task in done:
            task.result()  # a trainer that failed fails the benchmark
        store = CheckpointStore(aux_dir / "checkpoints")
        wait_until = min(deadline, time.monotonic() + CHECKPOINT_WAIT)
        while not run.timed_out and time.monotonic() < wait_until and not aux_task.done():
            last = args.epochs - 1
            if store.path_for(args.epochs).exists() and last in run.backbone.metrics:
                break
            await asyncio.sleep(0.2)
        if aux_task.done():
            aux_task.result()
        run.seconds = time.monotonic() - started
        for path in store.list():
            replica = await asyncio.to_thread(load_replica, manifest, path)
            run.replicas[replica.epoch] = replica
    finally:
        stop.set()
        for task in [*tasks, aux_task]:
            # their failures were told above; what is left here is the way out
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(task, CLOSE_WAIT)
        for peer in [*peers, aux]:
            await peer.close()
        await server.close()
    return run


def figures(manifest: Manifest, run: Run) -> list[dict[str, Any]]:
    """One row per epoch both trainers finished: distances, loss, wall time, samples/s."""
    trainers = run.trainers
    initial = snapshot(build_model(manifest))
    finished = sorted(set.intersection(*(set(t.epochs) for t in trainers)))
    previous = max((t.ready.result() for t in trainers if t.ready.done()), default=0.0)
    rows = []
    for epoch in finished:
        state = epoch + 1
        ended = max(t.ended_at[epoch] for t in trainers)
        wall, previous = ended - previous, ended
        samples = int(max(t.epochs[epoch].round_samples for t in trainers))
        snaps = [t.snapshots.get(state) for t in trainers]
        replica = run.replicas.get(state)
        metrics = run.backbone.metrics.get(epoch)
        rows.append(
            {
                "epoch": epoch,
                "state_epoch": state,
                "loss": None if metrics is None or metrics.loss is None else round(metrics.loss, 4),
                "samples": samples,
                "trainer_samples": [t.epochs[epoch].samples for t in trainers],
                "wall_s": round(wall, 3),
                "samples_per_s": round(samples / wall, 2) if wall > 0 else None,
                "averaging_s": [round(t.epochs[epoch].seconds, 3) for t in trainers],
                "group_size": [t.epochs[epoch].group_size for t in trainers],
                "backbone_distance": [
                    None
                    if s is None or replica is None
                    else relative_distance(replica.parameters, s)
                    for s in snaps
                ],
                "backbone_steps": None if replica is None else replica.steps,
                "trainer_distance": (
                    None
                    if snaps[0] is None or snaps[1] is None
                    else relative_distance(snaps[0], snaps[1])
                ),
                "trainers_moved": [
                    None if s is None else relative_distance(initial, s) for s in snaps
                ],
            }
        )
    return rows


def checkpoints(run: Run) -> list[dict[str, Any]]:
    """Each backbone checkpoint: its epoch, its optimizer's updates, and its largest distance to the
    trainers at the epoch it is named by and at the epoch its updates count."""

    def farthest(replica: Replica, epoch: int | None) -> float | None:
        snaps = [t.snapshots.get(epoch) for t in run.trainers] if epoch is not None else []
        if not snaps or any(s is None for s in snaps):
            return None
        return max(relative_distance(replica.parameters, s) for s in snaps if s is not None)

    return [
        {
            "epoch": epoch,
            "optimizer_steps": replica.steps,
            "distance_at_epoch": farthest(replica, epoch),
            "distance_at_steps": farthest(replica, replica.steps),
        }
        for epoch, replica in sorted(run.replicas.items())
    ]


def table(rows: list[dict[str, Any]]) -> None:
    def sci(value: float | None) -> str:
        return "-" if value is None else f"{value:.2e}"

    print(
        f"{'epoch':>5} {'loss':>7} {'wall s':>7} {'samples/s':>9} {'aux-t0':>9} {'aux-t1':>9} "
        f"{'t0-t1':>9} {'t0 moved':>9}",
        file=sys.stderr,
    )
    for r in rows:
        loss = "-" if r["loss"] is None else f"{r['loss']:.4f}"
        rate = "-" if r["samples_per_s"] is None else f"{r['samples_per_s']:.1f}"
        aux_t0, aux_t1 = r["backbone_distance"]
        print(
            f"{r['epoch']:>5} {loss:>7} {r['wall_s']:>7.2f} {rate:>9} {sci(aux_t0):>9} "
            f"{sci(aux_t1):>9} {sci(r['trainer_distance']):>9} {sci(r['trainers_moved'][0]):>9}",
            file=sys.stderr,
        )


def goals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    measured = [r for r in rows if all(d is not None for d in r["backbone_distance"])]
    value = max((max(r["backbone_distance"]) for r in measured), default=None)
    return {
        "backbone_distance": {
            "value": value,
            "epochs": [r["epoch"] for r in measured],
            "goal": GOAL,
            "met": None if value is None else value <= GOAL,
            "note": (
                "the largest ||backbone - trainer|| / ||trainer|| over every epoch with a backbone "
                "checkpoint, both trainers; the backbone applies the same averaged gradients with "
                "the same optimizer, so only float32 rounding between devices separates them "
                "(exactly 0 on a CPU, about 1e-8 expected on a GPU); 1e-4 is far above that and 16x "
                "below what one step at the smallest nonzero warm-up rate moves the model (1.6e-3), "
                "so a missed step or a checkpoint named one epoch off fails it"
            ),
        }
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--device",
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="the trainers' device: cpu, cuda or cuda:N (default: cuda if torch sees one)",
    )
    parser.add_argument("--epochs", type=int, default=5, help="collaborative steps to take")
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds for the whole run, data included"
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help=f"{DRY_EPOCHS} epochs of {DRY_TARGET_BATCH} samples: a quick check that it runs",
    )
    args = parser.parse_args()
    if not re.fullmatch(r"cpu|cuda(:\d+)?", args.device):
        parser.error(f"--device must be cpu, cuda or cuda:N, not {args.device!r}")
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: torch sees no CUDA device here")
    if args.epochs < 1:
        parser.error("--epochs must be 1 or more")
    if not args.timeout > 0:
        parser.error("--timeout must be more than 0")
    manifest = load_manifest(MANIFEST)
    if args.dry_run:
        args.epochs = DRY_EPOCHS
        try:
            manifest = manifest.with_training(target_batch_size=DRY_TARGET_BATCH)
        except ManifestError as error:
            parser.error(str(error))
    with tempfile.TemporaryDirectory(prefix="barnraise-gpu-collab-") as tmp:
        run = asyncio.run(collaborate(args, manifest, Path(tmp)))
    rows = figures(manifest, run)
    table(rows)
    steady = rows[1:]  # the first epoch also pays for the start (tokenizer, data, first kernels)
    steady_seconds = sum(r["wall_s"] for r in steady)
    result = {
        "benchmark": "gpu_collab",
        "torch": torch.__version__,
        "device": args.device,
        "gpu": torch.cuda.get_device_name(args.device) if cuda else None,
        "backbone_device": "cpu",
        "trainers": TRAINERS,
        "dry_run": args.dry_run,
        "epochs_asked": args.epochs,
        "epochs_finished": len(rows),
        "timed_out": run.timed_out,
        "target_batch_size": manifest.training.target_batch_size,
        "average_state_every": manifest.training.average_state_every,
        "seconds": round(run.seconds, 2),
        "samples_per_s": (
            round(sum(r["samples"] for r in steady) / steady_seconds, 2)
            if steady_seconds > 0
            else None
        ),
        "epoch_wall_s_median": (
            round(statistics.median(r["wall_s"] for r in steady), 3) if steady else None
        ),
        "peak_gpu_bytes": torch.cuda.max_memory_allocated(args.device) if cuda else None,
        "backbone_checkpoints": checkpoints(run),
        "epochs": rows,
        "goals": goals(rows),
    }
    emit(result, args.json)


if __name__ == "__main__":
    main()
