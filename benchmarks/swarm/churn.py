"""Churn soak and benchmark: the collaboration outlives its volunteers.

    python -m benchmarks.swarm.churn --minutes 10 --json out.json

A backbone (``barnraise backbone``) and up to ``--trainers`` trainers (``barnraise peer``), each its own
process on loopback with the demo project, its shards served over HTTP. For ``--minutes`` the
trainers leave (SIGTERM or SIGKILL, at random) and join at random, with a ``--gap`` in the middle
when none is running. Recorded and checked (``checks``, each true or false):

- ``epoch_sizes``: every collaborative step was taken on 1.0-1.2x the target batch (the samples the
  gradient round averaged over, ``round_samples`` of the trainers' epoch events);
- ``epochs_continuous``: no trainer ever went back, and every newcomer's first epoch comes after
  every epoch finished before it started, across the gap too (it continues from the newest state,
  never from an older one or the initial weights);
- ``loss_continuous``: the first loss after the gap is not above the last one before it by more
  than the noise (three standard deviations of the epoch-to-epoch changes, at least 0.05);
- ``waits``: no trainer waited more than 30 s for the state (its ``waiting`` events);
- ``nobody_accused``: every trainer is honest, so the backbone's log names no accusation (its
  ``evidence:`` lines, one per accused peer and round);
- ``backbone_memory_flat``: the backbone's resident memory in the last quarter of the run is within
  20% (and 40 MB) of the second quarter's. Two things cost a step once, each landing wherever it
  does (early on a quiet machine, later beside busy loops): its first held-out evaluation (about
  130-190 MB: the held-out text, its tokenizer, the evaluation thread's allocations) and its first
  work check that recomputes a microbatch (about 80-150 MB: a copy of the model and its autograd
  buffers). So the quarters are taken of the longest stretch of samples between those steps.

Then (unless ``--no-baseline``) the same swarm runs as long without churn, for samples/s side by
side; and (unless ``--no-newcomer``) the time from a newcomer's start to its first sample counted
by the collaboration (its progress record shows samples at the current epoch), with the demo model
(a state of about 2 MB) and a larger one (about 100 MB). The test suite runs a 2-minute version.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import math
import os
import platform
import random
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from benchmarks.kit.harness import emit
from core.data import ShardServer
from core.project import load_manifest
from core.swarm.children import ChildProcess, spawn_command
from core.swarm.demo_data import DEMO_MANIFEST, prepare_demo_data
from core.training.credit.metrics import MetricsLog
from core.training.peer.roles import CHECKS_LOG
from core.worker.events import (
    PeerEpoch,
    PeerEvaluation,
    PeerEvent,
    PeerMetrics,
    PeerReady,
    PeerWaiting,
)

MAX_WAIT = 30.0
"""Seconds a trainer may wait for the state once a donor is up."""
CREDIT_SETTLE = 5.0
"""Seconds the backbone runs on after the last trainer stopped, to credit their last epochs."""


@dataclass
class Trainer:
    name: str
    child: ChildProcess
    started: float
    peer: str | None = None
    epochs: list[PeerEpoch] = field(default_factory=list)
    epoch_at: list[float] = field(default_factory=list)
    """When each of ``epochs`` was reported (seconds into the run)."""
    waits: list[float] = field(default_factory=list)
    waiting_since: float | None = None
    first_epoch_after: float | None = None
    how_stopped: str | None = None
    stopped_at: float | None = None
    """When it was told to stop (seconds into the run)."""


class Swarm:
    """The backbone and the trainers of one run, and everything they said."""

    def __init__(self, base: str, work: Path, target: int, manifest: Path) -> None:
        self.base, self.work, self.target, self.manifest = base, work, target, manifest
        self.aux: ChildProcess | None = None
        self.address = ""
        self.trainers: list[Trainer] = []
        self.metrics: list[tuple[float, PeerMetrics]] = []
        self.memory: list[tuple[float, float]] = []
        self.evaluations: list[tuple[float, float]] = []
        """(started, ended) of the backbone's held-out evaluations, seconds into the run."""
        self.started = time.monotonic()
        self.started_wall = time.time()
        """The same moment by the wall clock, which the backbone's check records use."""
        self._readers: list[asyncio.Task[None]] = []
        self._count = 0

    def common(self, threads: int = 1) -> list[str]:
        return [
            "--manifest", str(self.manifest), "--data-base", self.base, "--threads", str(threads),
            "--host", "127.0.0.1", "--port", "0", "--target-batch-size", str(self.target),
        ]  # fmt: skip

    def now(self) -> float:
        return time.monotonic() - self.started

    async def start_backbone(self) -> None:
        args = ["backbone", *self.common(), "--work-dir", str(self.work / "backbone")]
        self.aux = await spawn_command(
            "backbone", [*args, "--checkpoint-every", "5"], self.work / "backbone.log"
        )
        ready = await asyncio.wait_for(self.aux.event(), 180)
        if not isinstance(ready, PeerReady):
            raise RuntimeError(f"the backbone did not start (see {self.work / 'aux.log'})")
        self.address = ready.address
        self._readers.append(asyncio.create_task(self._read_backbone(self.aux)))

    async def _read_backbone(self, child: ChildProcess) -> None:
        while (event := await child.event()) is not None:
            if isinstance(event, PeerMetrics):
                self.metrics.append((self.now(), event))
            elif isinstance(event, PeerEvaluation):
                ended = self.now()
                self.evaluations.append((ended - event.seconds, ended))

    async def sample_memory(self, every: float = 2.0) -> None:
        assert self.aux is not None
        process = psutil.Process(self.aux.proc.pid)
        while True:
            with contextlib.suppress(psutil.Error):
                self.memory.append((self.now(), process.memory_info().rss / 1e6))
            await asyncio.sleep(every)

    async def start_trainer(self) -> Trainer:
        self._count += 1
        name = f"p{self._count}"
        args = [
            "peer",
            *self.common(),
            "--initial-peers",
            self.address,
            "--data-seed",
            str(self._count),
        ]
        child = await spawn_command(
            name, [*args, "--work-dir", str(self.work / name)], self.work / f"{name}.log"
        )
        trainer = Trainer(name, child, self.now())
        self.trainers.append(trainer)
        self._readers.append(asyncio.create_task(self._read_trainer(trainer)))
        return trainer

    async def _read_trainer(self, trainer: Trainer) -> None:
        while (event := await trainer.child.event()) is not None:
            self._note(trainer, event)
        if trainer.waiting_since is not None:  # it left while waiting: that wait counts too
            trainer.waits.append(self.now() - trainer.waiting_since)
            trainer.waiting_since = None

    def _note(self, trainer: Trainer, event: PeerEvent) -> None:
        now = self.now()
        if isinstance(event, PeerReady):
            trainer.peer = event.address.rsplit("/", 1)[-1]
        elif isinstance(event, PeerEpoch):
            trainer.epochs.append(event)
            trainer.epoch_at.append(now)
            if trainer.first_epoch_after is None:
                trainer.first_epoch_after = now - trainer.started
        elif isinstance(event, PeerWaiting):
            if event.reason is not None and trainer.waiting_since is None:
                trainer.waiting_since = now
            elif event.reason is None and trainer.waiting_since is not None:
                trainer.waits.append(now - trainer.waiting_since)
                trainer.waiting_since = None

    def live(self) -> list[Trainer]:
        return [
            t for t in self.trainers if t.child.proc.returncode is None and t.how_stopped is None
        ]

    async def stop_trainer(self, trainer: Trainer, how: str) -> None:
        trainer.how_stopped = how
        trainer.stopped_at = self.now()
        if how == "SIGKILL":
            with contextlib.suppress(ProcessLookupError):
                trainer.child.proc.send_signal(signal.SIGKILL)
            await trainer.child.proc.wait()
        else:
            await trainer.child.stop()

    async def close(self) -> None:
        await asyncio.gather(*(t.child.stop() for t in self.trainers))
        if self.aux is not None:
            # the trainers' last records (they left) list their last epochs: the backbone reports
            # them a grace after it reads them
            await asyncio.sleep(CREDIT_SETTLE)
            await self.aux.stop()
        for task in self._readers:
            task.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)


async def churn(
    swarm: Swarm, seconds: float, most: int, gap: float, rng: random.Random
) -> dict[str, Any]:
    """Trainers leave and join at random for ``seconds``, none running for ``gap`` in the middle."""
    gap_start = (seconds - gap) / 2
    for _ in range(min(2, most)):
        await swarm.start_trainer()
    events = []
    gap_done = False
    end = swarm.now() + seconds
    started_at = swarm.now()
    while swarm.now() < end:
        elapsed = swarm.now() - started_at
        if not gap_done and elapsed >= gap_start:
            for trainer in swarm.live():
                how = rng.choice(["SIGTERM", "SIGKILL"])
                await swarm.stop_trainer(trainer, how)
                events.append((round(swarm.now(), 1), how, trainer.name))
            events.append((round(swarm.now(), 1), "gap", f"{gap:g} s"))
            await asyncio.sleep(gap)
            for _ in range(min(2, most)):
                trainer = await swarm.start_trainer()
                events.append((round(swarm.now(), 1), "join", trainer.name))
            gap_done = True
            continue
        await asyncio.sleep(rng.uniform(6.0, 14.0))
        if not gap_done and swarm.now() - started_at >= gap_start:
            continue
        live = swarm.live()
        if len(live) < most and (len(live) <= 1 or rng.random() < 0.5):
            trainer = await swarm.start_trainer()
            events.append((round(swarm.now(), 1), "join", trainer.name))
        elif len(live) > 1:
            victim = rng.choice(live)
            how = rng.choice(["SIGTERM", "SIGKILL"])
            await swarm.stop_trainer(victim, how)
            events.append((round(swarm.now(), 1), how, victim.name))
    return {"gap_started_at": round(started_at + gap_start, 1), "events": events}


def one_time_steps(swarm: Swarm) -> list[tuple[float, float]]:
    """(started, ended), seconds into the run, of what costs the backbone a step of memory once:
    its first held-out evaluation and its first work check that recomputed a microbatch."""
    steps = swarm.evaluations[:1]
    log = swarm.work / "backbone" / CHECKS_LOG
    recomputed = [r for r in MetricsLog(log).records() if r.get("compute", 0) > 0]
    if recomputed:
        first = min(recomputed, key=lambda r: float(r["time"]))
        ended = float(first["time"]) - swarm.started_wall
        steps.append((ended - float(first["seconds"]), ended))
    return steps


def settled_memory(swarm: Swarm) -> list[tuple[float, float]]:
    """The memory samples of the longest stretch between the backbone's one-time steps (before
    the first, between two, or after the last; the later of two as long): a step taken once is
    not growth."""
    bounds = [-math.inf]
    for started, ended in sorted(one_time_steps(swarm)):
        bounds += [started - 1, ended + 2]
    bounds.append(math.inf)
    stretches = [
        [(at, mb) for at, mb in swarm.memory if low < at < high]
        for low, high in itertools.pairwise(bounds)
    ][::2]
    return max(reversed(stretches), key=len)


def verdicts(swarm: Swarm, gap_at: float, gap: float) -> tuple[dict[str, bool], dict[str, Any]]:
    target = swarm.target
    by_epoch: dict[int, float] = {}
    for trainer in swarm.trainers:
        for event in trainer.epochs:
            if event.round_samples > 0:
                by_epoch[event.epoch] = max(by_epoch.get(event.epoch, 0.0), event.round_samples)
    ratios = {epoch: round(samples / target, 3) for epoch, samples in sorted(by_epoch.items())}
    # continuous: no trainer ever goes back, and every newcomer (across the gap too) goes on
    # after every epoch finished before it started, never from an older state
    reported = sorted(
        (at, e.epoch) for t in swarm.trainers for at, e in zip(t.epoch_at, t.epochs, strict=True)
    )
    monotonic = all(
        all(a.epoch < b.epoch for a, b in itertools.pairwise(t.epochs)) for t in swarm.trainers
    )
    rollbacks = []
    for t in swarm.trainers:
        earlier = [epoch for at, epoch in reported if at < t.started]
        if t.epochs and earlier and t.epochs[0].epoch <= max(earlier):
            rollbacks.append((t.name, t.epochs[0].epoch, max(earlier)))
    # epochs nobody reported: a trainer stopped or killed between its step and its report leaves
    # none (the collaboration stepped: epochs only ever grow by a step); reported, not judged
    finished = sorted({e for _, e in reported} | {m.epoch for _, m in swarm.metrics})
    missing = sorted(set(range(finished[0], finished[-1] + 1)) - set(finished)) if finished else []
    contiguous = bool(finished) and not rollbacks
    losses = [(at, m.epoch, m.loss) for at, m in swarm.metrics if m.loss is not None]
    before = [(e, loss) for at, e, loss in losses if at < gap_at]
    after = [(e, loss) for at, e, loss in losses if at > gap_at + gap]
    changes = [b[1] - a[1] for a, b in itertools.pairwise(before)]
    noise = max(0.05, 3 * statistics.pstdev(changes)) if len(changes) >= 2 else 0.05
    jump = after[0][1] - before[-1][1] if before and after else None
    waits = [w for t in swarm.trainers for w in t.waits]
    memory = [mb for _, mb in settled_memory(swarm)]
    quarter = max(1, len(memory) // 4)
    second = statistics.median(memory[quarter : 2 * quarter]) if len(memory) >= 4 else None
    last = statistics.median(memory[-quarter:]) if memory else None
    credit = credit_by_trainer(swarm)
    accusations = accusation_lines(swarm)
    checks = {
        "epochs_all_reported": bool(finished) and not missing,
        "credit_exact": bool(credit) and all(c["exact"] for c in credit.values()),
        "epoch_sizes": bool(ratios) and all(1.0 <= r <= 1.2 for r in ratios.values()),
        "epochs_continuous": contiguous and monotonic,
        "loss_continuous": jump is not None and jump <= noise,
        "waits": all(w <= MAX_WAIT for w in waits),
        "nobody_accused": not accusations,
        "backbone_memory_flat": second is not None
        and last is not None
        and last <= max(second * 1.2, second + 40),
    }
    figures = {
        "epochs": [finished[0], finished[-1]] if finished else None,
        "epochs_unreported": missing,
        "credit": credit,
        # what checks that found their trainer killed held (``held_by_a_check_it_missed``), and
        # what newcomers that left before their first check wait for (``waits_for_a_first_check``)
        "credit_held_by_missed_checks": sum(c["held"] for c in credit.values()),
        "credited_from_rounds": sum(1 for line in _metrics_lines(swarm) if line.get("late")),
        "accusations": accusations[:20],
        "rollbacks": rollbacks,
        "epoch_size_ratios": ratios,
        "epoch_size_ratio_range": [min(ratios.values()), max(ratios.values())] if ratios else None,
        "loss_before_gap": before[-1] if before else None,
        "loss_after_gap": after[0] if after else None,
        "loss_jump": None if jump is None else round(jump, 4),
        "loss_noise": round(noise, 4),
        "waits_s": sorted(round(w, 1) for w in waits),
        "first_epoch_after_start_s": sorted(
            round(t.first_epoch_after, 1) for t in swarm.trainers if t.first_epoch_after is not None
        ),
        "backbone_rss_mb": {
            "first": swarm.memory[0][1] if swarm.memory else None,
            "second_quarter_median": second,
            "last_quarter_median": last,
            "max": max(mb for _, mb in swarm.memory) if swarm.memory else None,
            "judged_from_s": round(settled_memory(swarm)[0][0], 1) if memory else None,
            "evaluations_s": [[round(a, 1), round(b, 1)] for a, b in swarm.evaluations],
            "one_time_steps_s": [[round(a, 1), round(b, 1)] for a, b in one_time_steps(swarm)],
            # [seconds into the run, MB], to place a rise against the epochs' and evaluations' times
            "timeline": [[round(at, 1), round(mb, 1)] for at, mb in swarm.memory],
        },
        "metrics_at_s": [[round(at, 1), m.epoch] for at, m in swarm.metrics],
        "trainers_started": len(swarm.trainers),
        "epochs_by_trainer": {t.name: [e.epoch for e in t.epochs] for t in swarm.trainers},
        "metrics_epochs": [m.epoch for _, m in swarm.metrics],
    }
    return checks, figures


def accusation_lines(swarm: Swarm) -> list[str]:
    """The backbone's log lines that name an accused peer (``moderation.evidence.accusations``)."""
    log = swarm.work / "backbone.log"
    if not log.exists():
        return []
    text = log.read_text(errors="replace")
    return [line.strip() for line in text.splitlines() if "evidence: peer" in line]


def _metrics_lines(swarm: Swarm) -> list[dict[str, Any]]:
    return MetricsLog(swarm.work / "backbone" / "metrics.jsonl").records()


def credit_by_trainer(swarm: Swarm) -> dict[str, dict[str, Any]]:
    """Per trainer: the samples of the epochs it printed as stepped in, and what the backbone's
    metrics credited its peer (late credit added, withdrawn credit taken off). Exact for a trainer
    that stopped on SIGTERM or ran to the end. A SIGKILLed one may have landed an epoch it never
    printed, which the backbone still credits (from its records or its round's weights): up to one
    epoch over. It may also be credited less by what a check drawn of its work held because the
    check found it gone (``held``, ``held_by_a_check_it_missed``), and a newcomer that left before
    any check of it could be made is credited nothing yet (``waits_for_a_first_check``): that is
    the rule, reported and not counted inexact. An inexact trainer's entry says why, epoch by
    epoch."""
    credited: dict[str, dict[int, int]] = {}
    for line in _metrics_lines(swarm):
        sign = -1 if line.get("withdrawn") else 1
        for peer, samples in (line.get("contributions") or {}).items():
            by_epoch = credited.setdefault(peer, {})
            epoch = int(line.get("epoch", -1))
            by_epoch[epoch] = by_epoch.get(epoch, 0) + sign * int(samples)
    checks = MetricsLog(swarm.work / "backbone" / CHECKS_LOG).records()
    found: dict[str, dict[str, Any]] = {}
    for t in swarm.trainers:
        if t.peer is None:
            continue
        processed = sum(e.samples for e in t.epochs)
        mine = credited.get(t.peer, {})
        got = sum(mine.values())
        largest = max((e.samples for e in t.epochs), default=0)
        unseen = t.how_stopped == "SIGKILL" and 0 < got - processed <= max(largest, swarm.target)
        theirs = [r for r in checks if r.get("peer") == t.peer]
        held = held_by_a_check_it_missed(swarm, t, mine, theirs) or waits_for_a_first_check(
            swarm, t, mine, theirs
        )
        exact = got == processed or unseen or (held > 0 and got == processed - held)
        found[t.name] = {"stepped": processed, "credited": got, "held": held,
                         "how_stopped": t.how_stopped, "exact": exact}  # fmt: skip
        if not exact:
            found[t.name]["why"] = _credit_story(swarm, t, mine, theirs)
    return found


def held_by_a_check_it_missed(
    swarm: Swarm, trainer: Trainer, credited: Mapping[int, int], checks: list[dict[str, Any]]
) -> int:
    """Samples of a SIGKILLed trainer's epochs left unpaid because a check drawn of its work came
    after it was killed: a check that cannot reach its peer holds the peer's claims since the last
    check it passed, and voids them when it expires (``core.training.credit.checks.standing``),
    since a cheat could hide from the checks of its faked epochs the same way. What a volunteer
    whose computer goes off in the seconds of a drawn check loses. 0 unless every epoch credited
    short comes after the last check of the trainer that passed, and a check of an epoch it stepped
    found it unreachable once it was killed (``checks``: the backbone's records of its checks)."""
    if trainer.how_stopped != "SIGKILL" or trainer.stopped_at is None:
        return 0
    stepped = {e.epoch: e.samples for e in trainer.epochs}
    short = {e: n - credited.get(e, 0) for e, n in stepped.items() if credited.get(e, 0) < n}
    passed = max((int(r["epoch"]) for r in checks if r["verdict"] == "passed"), default=-1)
    missed = any(
        r["verdict"] == "unreached"
        and r["epoch"] in stepped
        and r["time"] - swarm.started_wall >= trainer.stopped_at
        for r in checks
    )
    if not short or not missed or min(short) <= passed:
        return 0
    return sum(short.values())


def waits_for_a_first_check(
    swarm: Swarm, trainer: Trainer, credited: Mapping[int, int], checks: list[dict[str, Any]]
) -> int:
    """Samples of a newcomer that left before any check of it could be made: its claims wait for
    a first check that passes (``core.training.credit.checks.standing``), paid if it comes back
    under the same identity. 0 unless it stopped, was credited nothing, no check of it passed,
    and the backbone said why none was made of it (it missed the newcomer's rounds, or the
    newcomers' checks were over their share of its time)."""
    if trainer.stopped_at is None or trainer.peer is None or sum(credited.values()) != 0:
        return 0
    if any(r["verdict"] == "passed" for r in checks):
        return 0
    log = swarm.work / "backbone.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    short = trainer.peer[:12]
    lines = text.splitlines()
    waited = any(f"newcomer {short} waits" in line for line in lines)

    def explained(epoch: int) -> bool:
        return waited or any(
            (short in line and f"epoch {epoch} not checked" in line)
            or f"round {epoch}: no group formed" in line
            for line in lines
        )

    unexplained = [e.epoch for e in trainer.epochs if not explained(e.epoch)]
    return 0 if unexplained else sum(e.samples for e in trainer.epochs)


def _credit_story(
    swarm: Swarm, trainer: Trainer, credited: dict[int, int], checks: list[dict[str, Any]]
) -> dict[str, Any]:
    """What the backbone saw of ``trainer``'s credit (``checks``: its check records): for a
    failure read in CI."""
    assert trainer.peer is not None
    log = swarm.work / "backbone.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    short = trainer.peer[:12]
    # the backbone's lines of the rounds it stepped in too (a round it missed names nobody)
    rounds = tuple(f"round {e.epoch}:" for e in trainer.epochs)
    return {
        "stepped_by_epoch": {e.epoch: e.samples for e in trainer.epochs},
        "stepped_at_s": [round(at, 1) for at in trainer.epoch_at],
        "credited_by_epoch": dict(sorted(credited.items())),
        "checks": [
            [round(r["time"] - swarm.started_wall, 1), r["epoch"], r["verdict"], r["reason"][:120]]
            for r in checks
        ],
        # its lines, less the presence's redials of a peer that left (they crowd out the rest)
        "backbone_log": [
            line.strip()[-200:]
            for line in text.splitlines()
            if (short in line or any(r in line for r in rounds)) and "core.net.presence" not in line
        ][-12:],
    }


def samples_per_second(swarm: Swarm, since: float) -> float:
    """Samples of the collaborative steps per second, from the backbone's metrics after ``since``."""
    points = [(at, m) for at, m in swarm.metrics if at >= since]
    if len(points) < 2:
        return 0.0
    samples = sum(m.samples for _, m in points[1:])
    return round(samples / (points[-1][0] - points[0][0]), 1)


async def soak(args: argparse.Namespace, base: str, work: Path) -> dict[str, Any]:
    swarm = Swarm(base, work / "soak", args.target_batch_size, DEMO_MANIFEST)
    try:
        await swarm.start_backbone()
        sampler = asyncio.create_task(swarm.sample_memory())
        began = swarm.now()
        plan = await churn(
            swarm, args.minutes * 60, args.trainers, args.gap, random.Random(args.seed)
        )
        sampler.cancel()
    finally:
        await swarm.close()
    checks, figures = verdicts(swarm, plan["gap_started_at"], args.gap)
    figures["samples_per_s_under_churn"] = samples_per_second(swarm, began)
    return {"checks": checks, **figures, "churn": plan["events"]}


async def steady(args: argparse.Namespace, base: str, work: Path) -> dict[str, Any]:
    """The same swarm without churn: every trainer runs the whole time."""
    swarm = Swarm(base, work / "steady", args.target_batch_size, DEMO_MANIFEST)
    try:
        await swarm.start_backbone()
        for _ in range(args.trainers):
            await swarm.start_trainer()
        began = swarm.now()
        await asyncio.sleep(args.baseline_minutes * 60)
    finally:
        await swarm.close()
    return {"samples_per_s": samples_per_second(swarm, began), "trainers": args.trainers}


def bigger_manifest(work: Path) -> Path:
    """The demo project with a model whose shared state is about 100 MB (parameters and LAMB's two
    statistics, float32)."""
    text = DEMO_MANIFEST.read_text()
    for key, value in (
        ("embedding_size", 128), ("hidden_size", 768), ("num_heads", 12),
        ("intermediate_size", 3072), ("num_layers", 2),
    ):  # fmt: skip
        lines = [line for line in text.splitlines() if line.startswith(f"{key} =")]
        text = text.replace(lines[0], f"{key} = {value}")
    path = work / "large.toml"  # its data paths resolve against --data-base, wherever it lies
    path.write_text(text)
    return path


async def newcomer(base: str, work: Path, manifest: Path) -> dict[str, Any]:
    """Seconds from a newcomer's start until the collaboration counts its first samples."""
    from core.dht import DHTConfig, DHTNode, HostTransport
    from core.net import Host, Identity, NetConfig
    from core.training.progress import ProgressBoard

    swarm = Swarm(base, work, 32, manifest)
    host = Host(Identity.generate(), NetConfig())
    dht = DHTNode(HostTransport(host), DHTConfig(client_mode=True))
    try:
        await swarm.start_backbone()
        first = await swarm.start_trainer()
        while len(first.epochs) < 2:  # the backbone's replica has moved past the initial weights
            await asyncio.sleep(0.5)
            if first.child.proc.returncode is not None:
                raise RuntimeError(f"the first trainer exited (see {work})")
        await host.start([])
        await dht.start([swarm.address])
        board = ProgressBoard(dht, load_manifest(manifest).project.name)
        started = swarm.now()
        late = await swarm.start_trainer()
        while True:
            await asyncio.sleep(0.1)
            if late.peer is None:
                continue
            epoch = max((e.epoch for e in first.epochs), default=0)
            mine = [r for r in await board.fetch() if r.peer == late.peer]
            if mine and mine[0].samples > 0 and mine[0].epoch >= epoch:
                counted = swarm.now() - started
                break
            if swarm.now() - started > 600:
                raise RuntimeError("the newcomer never contributed")
        state_mb = await asyncio.to_thread(_state_megabytes, manifest)
        return {"counted_after_s": round(counted, 1), "state_mb": state_mb, "waits_s": late.waits}
    finally:
        await dht.close()
        await host.close()
        await swarm.close()


def _state_megabytes(manifest: Path) -> float:
    from core.training.peer.recipe import build_model, build_optimizer
    from core.training.state import TrainingState

    loaded = load_manifest(manifest)
    model = build_model(loaded)
    state = TrainingState(model, build_optimizer(model, loaded))
    return round(sum(t.numel() * t.element_size() for t in state.averaged_tensors()) / 1e6, 1)


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    manifest = load_manifest(DEMO_MANIFEST)
    result: dict[str, Any] = {"benchmark": "churn"}
    with tempfile.TemporaryDirectory(prefix="barnraise-churn-") as tmp:
        work = (args.work_dir or Path(tmp)).absolute()  # the peers run in their log folders
        data = args.data or work / "data"
        if args.data is None:
            await asyncio.to_thread(prepare_demo_data, manifest, data)
        server = ShardServer(data)
        base = await server.start()
        try:
            result["soak"] = await soak(args, base, work)
            print(f"  soak: {result['soak']['checks']}", file=sys.stderr, flush=True)
            if not args.no_baseline:
                result["steady"] = await steady(args, base, work)
                churned = result["soak"]["samples_per_s_under_churn"]
                steady_rate = result["steady"]["samples_per_s"]
                result["churn_to_steady_ratio"] = (
                    round(churned / steady_rate, 3) if steady_rate else None
                )
            if not args.no_newcomer:
                result["newcomer_2mb"] = await newcomer(base, work / "new-small", DEMO_MANIFEST)
                large = bigger_manifest(work)
                result["newcomer_100mb"] = await newcomer(base, work / "new-large", large)
        finally:
            await server.close()
    result["settings"] = {
        "minutes": args.minutes, "trainers": args.trainers, "gap_s": args.gap,
        "target_batch_size": args.target_batch_size, "seed": args.seed,
    }  # fmt: skip
    result["env"] = {"python": platform.python_version(), "cpus": os.cpu_count()}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--trainers", type=int, default=6)
    parser.add_argument("--gap", type=float, default=60.0, help="seconds with no trainer, mid-run")
    parser.add_argument("--target-batch-size", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--baseline-minutes", type=float, default=None, help="default: half of --minutes"
    )
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--no-newcomer", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--data", type=Path, help="the demo's shards and tokenizer, made already")
    parser.add_argument(
        "--work-dir", type=Path, help="keep the peers' logs here (default: a temporary folder)"
    )
    args = parser.parse_args()
    if args.baseline_minutes is None:
        args.baseline_minutes = args.minutes / 2
    emit(asyncio.run(bench(args)), args.json)


if __name__ == "__main__":
    main()
