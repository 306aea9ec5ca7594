"""DiLoCo at swarm scale: more trainers than a group, slow devices, churn, one poisoner.

    python -m benchmarks.swarm.swarm_scale --json out.json                 # everything (about an hour)
    python -m benchmarks.swarm.swarm_scale --only bytes --sizes 8,16 --json out.json

Every trainer is its own Host, DHT node, averager, training thread and ``DilocoOptimizer`` on
loopback, in this one process, built by the diloco mode's own wiring from the demo manifest in
diloco mode with the averaging settings a manifest gets by default: groups of ``target_group_size``
16 (at least 2), CenteredClip with screening, matchmaking a third of a round; the backbone (a
``DilocoOptimizer`` in aux mode) joins every round. Rounds end on the shared clock
(``round_seconds``). The task: a small MLP learns a fixed noisy teacher function, each trainer on
its own seeded stream of examples; a microbatch "computes" for its device's time (a sleep on the
training thread, so that a slow device really has a microbatch in flight when its round ends); the
held-out loss is the backbone's outer parameters' on examples nobody trains on, after each round it
lands.

Scenarios:

- ``scale``: 64 trainers, device speeds spread 4x (the slowest microbatch takes more than a
  third of a round; the round is the manifest's default, 60 s, or ``--round-seconds``, and the
  microbatches scale with it), 10 % of them replaced every 10 rounds (half leave cleanly, half vanish),
  one of them poisoning (``--attack``: sign-flip x10 by default, or nan); and the same 64 trainers
  without churn or attacker (``clean``). Goals: >= 95 % of rounds land for >= 90 % of the honest
  trainers (of the rounds each was there for, past its first); every honest trainer that stayed
  has all of its samples credited or still waiting to land; the held-out loss at equal samples
  within 3 % of the clean run's; nobody honest accused (the evidence of either run).
- ``bytes``: 8, 16, 32 and 64 trainers at equal speed, in fp16 and in ``topk`` (1 %, 2 bits):
  the chunk bytes each member sends and receives a round (``AveragingResult``), and everything
  its Host sent (the DHT included), against the formula of ``expected_bytes``.
- ``billion``: the same formula for a 1 B-parameter pseudo-gradient (``encoded_size`` of the
  codecs, no model), at each size, with the upload time at 20 Mbit/s.
- ``byzantine``: four trainers, one of them attacking (scale, sign-flip, noise, nan), against
  the clean four: the held-out loss at equal samples within 5 %, and the members' evidence
  accusing the attacker and nobody else.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.kit.harness import ROOT, as_module
from core.averaging import Averager, AveragerConfig, AveragingResult
from core.averaging.robust.medians import lower_median
from core.codecs import FP16, Codec
from core.codecs.chunks import encoded_size
from core.codecs.topk import top_k
from core.dht import DHTConfig, DHTNode, HostTransport
from core.modes.clock import RoundClock
from core.net import Host, Identity, NetConfig
from core.net.host.address import PeerAddress
from core.project import Manifest, load_manifest
from core.swarm.byzantine import Attack, Misbehaviour
from core.swarm.demo_data import DEMO_MANIFEST
from core.training.credit.scores import WorkScores
from core.training.diloco.mode import MODE
from core.training.diloco.optimizer import DilocoOptimizer, Landing
from core.training.links import PeerLinks
from core.training.peer.recipe import averager_config
from core.training.state import TrainingState
from core.util.errors import BarnraiseError
from core.worker.bridge import TrainingBridge

DIM, HIDDEN = 64, 1024
"""The MLP: 64 inputs, 1024 hidden units, one output (67,585 parameters): tensors of many blocks
of 4096, so that a sparse codec's bytes are what they are for a large model."""
MICROBATCH = 32
INNER_LR = 2e-4
OUTER_LR, OUTER_MOMENTUM = 1.0, 0.0
"""On this task DiLoCo's outer Nesterov step (0.7, 0.9) swings the held-out loss by 2-5x from
round to round (its step lands a round late, on top of the next round's work); plain averaging
of the models falls smoothly, and is what ``topk`` uses anyway."""
ROUND_SECONDS = 20.0
"""A round's length in the scenarios other than ``scale`` (shorter than the manifest's 60 s, so
that they take minutes)."""
GROUP = 16
"""The manifest's default ``target_group_size``."""
STEP_SHARES = (0.0875, 0.35)
"""The fastest and slowest device's microbatch (4x), in rounds: the slowest takes more than a
third of a round (7 s of a round of 20), so its round ends with one in flight."""
CHURN_EVERY, CHURN_SHARE = 10, 0.1
WARM_UP = 2
"""Rounds after the start that the landing figures leave out: the first, which starts before
every peer's progress record has reached every other, and the next."""
START_AFTER = 1.0
"""Seconds into a round at which a swarm's trainers begin."""
REPLICAS = 5
"""Copies of each DHT record (20 by default). Here every peer's DHT node runs in this one process,
and each copy of the records every peer publishes every second costs this process's CPU: with 20,
48 peers took the event loop past its capacity and the rounds' own timing fell apart."""
START_AT_ONCE = 8
"""Trainers started together (one after another, 64 peers took minutes in this one process)."""
NET = NetConfig(dial_timeout=30.0, handshake_timeout=30.0, call_timeout=20.0, close_grace=0.2)


def microbatch_range(round_seconds: float) -> tuple[float, float]:
    """The fastest and slowest device's microbatch in rounds of ``round_seconds``."""
    fastest, slowest = STEP_SHARES
    return fastest * round_seconds, slowest * round_seconds


def manifest(codec: Codec, round_seconds: float = ROUND_SECONDS) -> Manifest:
    """The demo project in diloco mode, with the averaging settings a manifest gets by default
    (groups of 16, CenteredClip with screening) and ``codec``."""
    sparse = codec.sparse
    demo = load_manifest(DEMO_MANIFEST).with_training(
        mode="diloco",
        round_seconds=round_seconds,
        outer_lr=OUTER_LR if not sparse else 1.0,
        outer_momentum=OUTER_MOMENTUM if not sparse else 0.0,
    )
    return demo.with_averaging(codec="topk" if sparse else codec.name, density=0.01, bits=2)


def averaging(codec: Codec, role: str, round_seconds: float = ROUND_SECONDS) -> AveragerConfig:
    """What a peer of ``manifest(codec)`` averages with (``recipe.averager_config``)."""
    return averager_config(manifest(codec, round_seconds), role)


# ---- the task ------------------------------------------------------------------------------------


def teacher(seed: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Examples of one fixed noisy nonlinear function (the same teacher for every seed)."""
    fixed = torch.Generator().manual_seed(1234)
    w1 = torch.randn(DIM, HIDDEN, generator=fixed) / DIM**0.5
    w2 = torch.randn(HIDDEN, 1, generator=fixed) / HIDDEN**0.5
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(count, DIM, generator=generator)
    return x, torch.tanh(x @ w1) @ w2 + 0.05 * torch.randn(count, 1, generator=generator)


def fresh_model() -> torch.nn.Module:
    model = torch.nn.Sequential(
        torch.nn.Linear(DIM, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, 1)
    )
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_((torch.rand(p.shape, generator=generator) * 2 - 1) / p.shape[-1] ** 0.5)
    return model


HELD_OUT = teacher(10**6, 4096)


def held_out_loss(anchor: Sequence[np.ndarray]) -> float:
    model = fresh_model()
    with torch.no_grad():
        for p, a in zip(model.parameters(), anchor, strict=True):
            p.copy_(torch.from_numpy(a).reshape(p.shape))
        return float(torch.nn.functional.mse_loss(model(HELD_OUT[0]), HELD_OUT[1]))


# ---- one member ----------------------------------------------------------------------------------


@dataclass
class Member:
    name: str
    optimizer: DilocoOptimizer
    host: Host
    dht: DHTNode
    averager: Averager
    bridge: TrainingBridge
    model: torch.nn.Module
    step_seconds: float = 0.0
    honest: bool = True
    joined: int = 0
    """The backbone's epoch when it joined."""
    left: int | None = None
    computed: int = 0
    """Samples it computed."""
    loop: asyncio.Task[None] | None = None
    seed: int = 0
    weight_ratios: dict[str, float] = field(default_factory=dict)
    """An honest member's ``watch_weights``."""
    credit_claimed: int = 0
    """A misbehaving member's ``count_credit_claimed``."""
    claims: list[tuple[int, int]] = field(default_factory=list)
    """A misbehaving member's every (epoch, samples) landed claim."""
    computes: float = 1.0
    """The share of its microbatches a free rider computes (the rest it only counts)."""

    @property
    def address(self) -> str:
        return str(self.host.addresses[0])

    @property
    def credited(self) -> int:
        return sum(r.samples for r in self.optimizer.reports)


async def start_member(
    name: str,
    codec: Codec,
    join: str | None,
    *,
    aux: bool = False,
    step_seconds: float = 0.0,
    attack: Misbehaviour | None = None,
    started: bool = True,
    round_seconds: float = ROUND_SECONDS,
) -> Member:
    """A member on its own Host and DHT node; its rounds start now unless not ``started``."""
    host = Host(Identity.generate(), NET)
    await host.start()
    dht = DHTNode(HostTransport(host), DHTConfig(rpc_timeout=5.0, replicas=REPLICAS))
    await dht.start([join] if join else [])
    if join:
        await dht.wait_bootstrapped()
    role = "backbone" if aux else "trainer"
    averager = Averager(host, dht, "scale", averaging(codec, role, round_seconds))
    bridge = TrainingBridge(name)
    model = fresh_model()
    state = TrainingState(model, torch.optim.AdamW(model.parameters(), lr=INNER_LR))
    # the mode's own wiring, around this task's model and state
    # the backbone's key confirms the collaboration's state, as a project's manifest names it
    # (``access.backbone_keys``): the swarm is joined through the backbone, whose key the join
    # address names
    joined = PeerAddress.parse(join).peer_id if join else None
    confirmers = {str(host.peer_id)} if aux else ({str(joined)} if joined else set())
    links = PeerLinks.create(averager, bridge, frozenset(confirmers))
    optimizer = MODE.optimizer(manifest(codec, round_seconds), state, links, role)
    member = Member(name, optimizer, host, dht, averager, bridge, model, step_seconds)
    if attack is not None:
        optimizer.tamper = attack.gradient_attack()
        optimizer.claim = attack.claim
        member.computes = attack.computes
        member.honest = False
        count_credit_claimed(member)
    else:
        watch_weights(member)
    if started:
        await optimizer.start()
    return member


async def train(member: Member, seed: int) -> None:
    """Microbatches for ever: each computes for the device's time on the training thread."""
    x, y = teacher(seed, 1 << 16)
    at = 0

    def step(batch: tuple[torch.Tensor, torch.Tensor]) -> float:
        time.sleep(member.step_seconds)
        loss = torch.nn.functional.mse_loss(member.model(batch[0]), batch[1])
        loss.backward()  # type: ignore[no-untyped-call]
        return float(loss.detach())

    owed = 0.0  # a free rider's microbatches to compute, of those it counts
    while True:
        batch = (x[at : at + MICROBATCH], y[at : at + MICROBATCH])
        at = (at + MICROBATCH) % (x.shape[0] - MICROBATCH)
        owed += member.computes
        if owed >= 1.0:
            owed -= 1.0
            loss: float | None = await member.bridge.run(step, batch)
            member.computed += MICROBATCH
        else:  # counted, not computed: no gradient, so the inner step moves nothing
            await member.bridge.run(time.sleep, member.step_seconds)
            loss = None
        await member.optimizer.step(MICROBATCH, loss)


async def stop(member: Member, *, cleanly: bool) -> None:
    """A volunteer leaving: politely (its record withdrawn), or vanishing (a crash: nothing)."""
    if member.loop is not None:
        member.loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await member.loop
    member.optimizer.interrupt()
    if not cleanly:
        await member.host.close()  # gone: nothing it says on leaving reaches anyone
    await member.optimizer.close()
    await member.averager.close()
    await member.bridge.aclose()
    await member.dht.close()
    await member.host.close()


def misbehaviour_to(attack: Misbehaviour | None) -> dict[str, Any] | None:
    """As a crowd's order carries it."""
    if attack is None:
        return None
    return {
        "attack": attack.attack.value,
        "strength": attack.strength,
        "claim": attack.claim,
        "computes": attack.computes,
    }


def misbehaviour_from(order: dict[str, Any] | None) -> Misbehaviour | None:
    if order is None:
        return None
    return Misbehaviour(
        Attack.parse(order["attack"]),
        order["strength"],
        claim=order["claim"],
        computes=order["computes"],
    )


def watch_weights(member: Member) -> None:
    """Keep, for every sender of the honest member's rounds, the most its weight counted for in
    the member's part over the part's lower median claim."""
    observe = member.averager.observe

    def keep(result: AveragingResult) -> None:
        observe(result)
        if len(result.weights) >= 2:
            median = lower_median(list(result.weights.values()))
            for peer, claimed in result.weights.items():
                ratio, key = result.capped.get(peer, claimed) / median, str(peer)
                member.weight_ratios[key] = max(ratio, member.weight_ratios.get(key, 0.0))

    member.averager.observe = keep  # type: ignore[method-assign]


def count_credit_claimed(member: Member) -> None:
    """Add up every landed epoch the member's records claim (they keep only the last ones)."""
    landed = member.optimizer.landed
    add = landed.add

    def counted(epoch: int, samples: int) -> None:
        member.credit_claimed += samples
        member.claims.append((epoch, samples))
        add(epoch, samples)

    landed.add = counted  # type: ignore[method-assign]


# ---- a crowd of trainers, in one process ---------------------------------------------------------


def summary(member: Member) -> dict[str, Any]:
    """What the figures need of a trainer, as plain data (it may come from another process)."""
    sent, received = member.host.traffic.snapshot()
    return {
        "name": member.name,
        "peer": str(member.host.peer_id),
        "honest": member.honest,
        "joined": member.joined,
        "left": member.left,
        "computed": member.computed,
        "credited": member.credited,
        "waiting": member.optimizer.waiting_samples,
        "repairs": member.optimizer.repairs,
        "host_sent": sent,
        "host_received": received,
        "reports": [
            [r.epoch, r.samples, r.late, r.group_size, r.bytes_sent]
            for r in member.optimizer.reports
        ],
        "last_bytes_received": member.optimizer.last_bytes_received,
        "weight_ratios": member.weight_ratios,
        "credit_claimed": member.credit_claimed,
        "claims": member.claims
        if not member.honest
        else [(r.epoch, r.samples) for r in member.optimizer.reports if r.samples],
    }


@dataclass
class Crowd:
    """Trainers hosted by this process, joined to a swarm through ``join``."""

    codec: Codec
    join: str
    round_seconds: float = ROUND_SECONDS
    trainers: list[Member] = field(default_factory=list)
    gone: list[Member] = field(default_factory=list)

    async def add(
        self,
        name: str,
        seed: int,
        step_seconds: float,
        *,
        attack: Misbehaviour | None,
        epoch: int,
    ) -> None:
        """A trainer that neither takes part in rounds nor trains until ``begin``."""
        member = await start_member(name, self.codec, self.join, step_seconds=step_seconds,
                                    attack=attack, started=False,
                                    round_seconds=self.round_seconds)  # fmt: skip
        member.joined, member.seed = epoch, seed
        self.trainers.append(member)

    async def begin(self) -> None:
        """Every trainer not started yet: its rounds, then its training, all at once (trainers
        that start one by one spend their first rounds downloading the state to each other)."""
        waiting = [m for m in self.trainers if m.loop is None]
        await asyncio.gather(*(m.optimizer.start() for m in waiting))
        for member in waiting:
            member.loop = asyncio.create_task(train(member, member.seed))

    async def leave(self, count: int, epoch: int) -> None:
        """``count`` honest trainers go: half of them politely, half vanishing."""
        for i, member in enumerate([t for t in self.trainers if t.honest][:count]):
            member.left = epoch
            self.trainers.remove(member)
            self.gone.append(member)
            await stop(member, cleanly=i % 2 == 0)

    def summaries(self) -> list[dict[str, Any]]:
        return [summary(m) for m in [*self.trainers, *self.gone]]

    async def close(self) -> list[dict[str, Any]]:
        """Every trainer stops at once (one by one, each waits for its exchange in flight, while
        the others keep ending rounds: minutes at 64); their summaries once stopped."""
        await asyncio.gather(*(stop(member, cleanly=True) for member in self.trainers))
        summaries = self.summaries()
        self.trainers.clear()
        return summaries


async def serve_crowd(codec_name: str, join: str, round_seconds: float) -> None:
    """A worker process: a ``Crowd`` driven by JSON lines on stdin, each answered on stdout."""
    codec = FP16 if codec_name == "fp16" else top_k(0.01, 2)
    crowd = Crowd(codec, join, round_seconds)
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        order = json.loads(line)
        answer: Any = None
        if order["do"] == "add":
            attack = misbehaviour_from(order["attack"])
            await crowd.add(order["name"], order["seed"], order["step"], attack=attack,
                            epoch=order["epoch"])  # fmt: skip
        elif order["do"] == "begin":
            await crowd.begin()
        elif order["do"] == "leave":
            await crowd.leave(order["count"], order["epoch"])
        elif order["do"] == "summaries":
            answer = crowd.summaries()
        elif order["do"] == "close":  # after the rounds in flight landed (or not)
            answer = await crowd.close()
        sys.stdout.write(json.dumps({"answer": answer}) + "\n")
        sys.stdout.flush()
        if order["do"] == "close":
            return


ANSWER_BYTES = 1 << 26
"""The longest answer line a crowd's process may write: its members' summaries at closing, which
outgrew asyncio's default 64 KiB in a 12-round run of 64 trainers."""


class Worker:
    """A worker process hosting a crowd, driven from here."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.count = 0
        self._lock = asyncio.Lock()

    @classmethod
    async def start(cls, codec: Codec, join: str, round_seconds: float) -> Worker:
        process = await asyncio.create_subprocess_exec(
            sys.executable, *as_module(__spec__), "--crowd", "fp16" if not codec.sparse else "topk", join,
            str(round_seconds), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            cwd=ROOT, limit=ANSWER_BYTES,
        )  # fmt: skip
        return cls(process)

    async def ask(self, order: dict[str, Any]) -> Any:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        async with self._lock:
            self.process.stdin.write((json.dumps(order) + "\n").encode())
            await self.process.stdin.drain()
            line = await self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"a crowd's process ended (exit {self.process.returncode})")
        return json.loads(line)["answer"]

    async def close(self) -> list[dict[str, Any]]:
        try:
            return list(await self.ask({"do": "close"}))
        finally:
            with contextlib.suppress(ProcessLookupError):
                await asyncio.wait_for(self.process.wait(), 60)


# ---- a swarm -------------------------------------------------------------------------------------


@dataclass
class Swarm:
    codec: Codec
    backbone: Member
    workers: list[Worker]
    curve: list[tuple[int, float, float]] = field(default_factory=list)
    """(epoch, samples landed so far, held-out loss) after each round the backbone landed."""
    seeds: int = 0
    settled: int = 0
    """The first epoch counted for landing (after everyone started and ``WARM_UP`` rounds)."""
    members: list[dict[str, Any]] = field(default_factory=list)
    """Every trainer's ``summary``, once the swarm is closed."""
    accused: list[str] = field(default_factory=list)
    """Every peer the members' signed evidence accuses, as the backbone read it at the end."""
    findings: dict[str, int] = field(default_factory=dict)
    """How many of those accusations each statistic made (``norm_ratio``, ``opposed``…)."""
    first_accused_at: int | None = None
    """The earliest round any accusation was made in."""
    reports: list[tuple[str, str, str]] = field(default_factory=list)
    """Every accusation as (reporter, accused, statistic): an attacker may accuse anyone."""
    scores: WorkScores = field(default_factory=lambda: WorkScores(hold=0.0, newcomer_hold=0.0))
    """The backbone's rule of credit, fed with its rounds (``scored_credit``)."""

    def landed(self, landing: Landing) -> None:
        """A round the backbone took part in: what its part showed of each sender, scored."""
        alignments = landing.result.alignments
        if alignments:
            self.scores.observe(landing.epoch, {str(p): a for p, a in alignments.items()})

    async def add(self, step_seconds: float, attack: Misbehaviour | None = None) -> None:
        """A trainer in the least crowded worker; it starts with the next ``begin``."""
        self.seeds += 1
        worker = min(self.workers, key=lambda w: w.count)
        worker.count += 1
        await worker.ask({"do": "add", "name": f"t{self.seeds}", "seed": self.seeds,
                          "step": step_seconds, "attack": misbehaviour_to(attack),
                          "epoch": self.backbone.optimizer.epoch})  # fmt: skip

    async def begin(self) -> None:
        await asyncio.gather(*(w.ask({"do": "begin"}) for w in self.workers))

    async def replace_some(self, count: int, speeds: Sequence[float]) -> None:
        epoch = self.backbone.optimizer.epoch
        shares = [count // len(self.workers)] * len(self.workers)
        for i in range(count % len(self.workers)):
            shares[i] += 1
        for worker, share in zip(self.workers, shares, strict=True):
            await worker.ask({"do": "leave", "count": share, "epoch": epoch})
            worker.count -= share
        for i in range(count):
            await self.add(speeds[(self.seeds + i) % len(speeds)])
        await self.begin()

    def observe(self) -> None:
        """The backbone's rounds landed since the last look: their samples and held-out loss."""
        reports = self.backbone.optimizer.reports
        while len(self.curve) < len(reports):
            report = reports[len(self.curve)]
            landed = (self.curve[-1][1] if self.curve else 0.0) + report.round_samples
            loss = held_out_loss(self.backbone.optimizer.diloco.anchor)
            self.curve.append((report.epoch + 1, landed, loss))

    async def close(self) -> None:
        with contextlib.suppress(BarnraiseError):
            found = await self.backbone.optimizer.evidence.fetch()
            self.accused = sorted({str(item.evidence.accused) for item in found})
            statistics = [item.evidence.statistic for item in found]
            self.findings = {s: statistics.count(s) for s in sorted(set(statistics))}
            self.first_accused_at = min((item.evidence.epoch for item in found), default=None)
            self.reports = sorted(
                {
                    (str(e.reporter), str(e.accused), e.statistic)
                    for e in (i.evidence for i in found)
                }
            )
        for worker in self.workers:
            self.members.extend(await worker.close())
        await stop(self.backbone, cleanly=True)


async def run_swarm(
    trainers: int,
    codec: Codec,
    rounds: int,
    *,
    speeds: Sequence[float],
    attack: Misbehaviour | None = None,
    churn: bool = False,
    processes: int = 2,
    round_seconds: float = ROUND_SECONDS,
) -> Swarm:
    """A swarm of ``trainers`` in ``processes`` worker processes and the backbone here, for
    ``rounds`` rounds; closed (its trainers' summaries in ``members``) when this returns."""
    backbone = await start_member("backbone", codec, None, aux=True, round_seconds=round_seconds)
    workers = [await Worker.start(codec, backbone.address, round_seconds) for _ in range(processes)]
    swarm = Swarm(codec, backbone, workers)
    backbone.optimizer.on_landed = swarm.landed
    began = time.monotonic()
    for i in range(trainers):
        await swarm.add(speeds[i % len(speeds)], attack if i == trainers - 1 else None)
    # the first round a whole one, in every run: a run that began late in a round lands a first
    # round of a few samples, and every later round of it sits a fraction of a round apart from
    # another run's at equal samples
    await asyncio.sleep(RoundClock(round_seconds).until_end(time.time()) + START_AFTER)
    await swarm.begin()
    swarm.settled = backbone.optimizer.epoch + WARM_UP
    print(f"  {trainers} trainers started in {time.monotonic() - began:.0f} s", flush=True)
    churned = shown = 0
    try:
        while backbone.optimizer.epoch < rounds:
            await asyncio.sleep(1.0)
            swarm.observe()
            epoch = backbone.optimizer.epoch
            if churn and epoch >= (churned + 1) * CHURN_EVERY and epoch < rounds:
                churned += 1
                count = max(1, round(CHURN_SHARE * trainers))
                print(f"  round {epoch}: {count} trainers replaced", flush=True)
                await swarm.replace_some(count, speeds)
            while len(swarm.curve) > shown:
                e, landed, loss = swarm.curve[shown]
                print(f"  epoch {e:3d}  samples {landed:9.0f}  held-out {loss:.4f}", flush=True)
                shown += 1
        swarm.observe()
    finally:
        await swarm.close()
    return swarm


# ---- what a run shows ----------------------------------------------------------------------------


def scored_credit(swarm: Swarm, member: dict[str, Any]) -> int:
    """What the backbone's contribution scores credit of every claim the member's records made
    (asked after the run: no claim waits)."""
    return sum(
        swarm.scores.supported(member["peer"], epoch, samples, math.inf) or 0
        for epoch, samples in member["claims"]
    )


def landing(swarm: Swarm, last: int) -> dict[str, Any]:
    """Per honest trainer: the share of the rounds it was there for, from the settled one and
    its second (the first a newcomer spends loading the state), in which it landed; and by
    round, how many of the honest trainers there for it missed it (where the misses are)."""
    shares = []
    missed: dict[int, list[int]] = {}  # round: [missed, there]
    for member in swarm.members:
        if not member["honest"]:
            continue
        end = last if member["left"] is None else member["left"]
        there = range(max(member["joined"] + 1, swarm.settled), end)
        if len(there) < 3:
            continue
        landed = {r[0] for r in member["reports"]}
        shares.append(sum(1 for e in there if e in landed) / len(there))
        for epoch in there:
            counts = missed.setdefault(epoch, [0, 0])
            counts[0] += epoch not in landed
            counts[1] += 1
    good = sum(1 for s in shares if s >= 0.95)
    lateness = [r[2] for m in swarm.members for r in m["reports"] if m["honest"]]
    return {
        "honest_trainers_counted": len(shares),
        "share_landing_95_percent": good / len(shares) if shares else 0.0,
        "median_share_of_rounds_landed": statistics.median(shares) if shares else 0.0,
        "lowest_share_of_rounds_landed": min(shares) if shares else 0.0,
        "landed_rounds_late": sum(1 for late in lateness if late),
        "landed_rounds": len(lateness),
        "missed_by_round": {str(e): missed[e] for e in sorted(missed)},
    }


def credit(swarm: Swarm) -> dict[str, Any]:
    """Every honest trainer still there at the end: computed = credited + still waiting to land;
    those that left: the share of their samples credited (a crash loses its last round's)."""
    off = []
    stayed = [m for m in swarm.members if m["honest"] and m["left"] is None]
    for member in stayed:
        if member["credited"] + member["waiting"] != member["computed"]:
            off.append({k: member[k] for k in ("name", "computed", "credited", "waiting")})
    left = [m for m in swarm.members if m["honest"] and m["left"] is not None]
    return {
        "trainers_checked": len(stayed),
        "mismatched": off,
        "departed_credited_share": (
            sum(m["credited"] for m in left) / max(1, sum(m["computed"] for m in left))
            if left
            else None
        ),
    }


def at_samples(curve: list[tuple[int, float, float]], samples: float) -> float:
    """The held-out loss at ``samples`` landed (linear between the rounds around it)."""
    points = [(0.0, held_out_loss([p.detach().numpy() for p in fresh_model().parameters()]))]
    points += [(landed, loss) for _, landed, loss in curve]
    for (s0, l0), (s1, l1) in itertools.pairwise(points):
        if s0 <= samples <= s1:
            return l0 + (l1 - l0) * (samples - s0) / max(1e-9, s1 - s0)
    return math.nan


def compare(clean: Swarm, hard: Swarm) -> dict[str, Any]:
    """The hard run's held-out loss against the clean run's at equal samples: where the clean
    run first fell below a half, a quarter and an eighth of its first loss (the model learning),
    and at the most samples both landed."""
    end = min(clean.curve[-1][1], hard.curve[-1][1])
    start = at_samples(clean.curve, 0.0)
    marks = [
        next((landed for _, landed, loss in clean.curve if loss < start * share), end)
        for share in (0.5, 0.25, 0.125)
    ]
    marks = [*sorted({min(m, end) for m in marks}), end]
    rows = [
        {"samples": m, "clean": at_samples(clean.curve, m), "hard": at_samples(hard.curve, m)}
        for m in marks
    ]
    for row in rows:
        row["gap"] = row["hard"] / row["clean"] - 1.0
    # at equal rounds too: a diloco round moves the model by what each member's inner steps
    # went, whatever the number of members, so where the loss falls fast a run that lands fewer
    # samples a round (an attacker's left out, churn) is ahead at equal samples
    hard_at = {epoch: loss for epoch, _, loss in hard.curve}
    by_round = [
        {"epoch": epoch, "clean": loss, "hard": hard_at[epoch], "gap": hard_at[epoch] / loss - 1.0}
        for epoch, _, loss in clean.curve
        if epoch in hard_at
    ]
    return {
        "at_equal_samples": rows,
        "worst_gap": max(abs(r["gap"]) for r in rows),
        "at_equal_rounds": by_round,
        "worst_gap_at_equal_rounds": max((abs(r["gap"]) for r in by_round), default=math.nan),
    }


async def byzantine(args: argparse.Namespace) -> dict[str, Any]:
    """One of four trainers attacks: the held-out loss against the clean run's at equal samples,
    and whom the members' evidence accuses."""
    speeds = [microbatch_range(ROUND_SECONDS)[0]]
    print(f"byzantine: 4 trainers, {args.byzantine_rounds} rounds, clean", flush=True)
    clean = await run_swarm(4, FP16, args.byzantine_rounds, speeds=speeds, processes=1)
    # what two runs with nobody attacking differ by: the gaps below mean something only beyond it
    print("byzantine: 4 trainers, clean again", flush=True)
    again = await run_swarm(4, FP16, args.byzantine_rounds, speeds=speeds, processes=1)
    runs: dict[str, Any] = {
        "clean_curve": clean.curve,
        "clean_again": {"loss": compare(clean, again), "curve": again.curve},
        "attacks": {},
    }
    for attack in (Attack.SCALE, Attack.SIGN_FLIP, Attack.NOISE, Attack.NAN):
        print(f"byzantine: one trainer of four, {attack}", flush=True)
        hard = await run_swarm(4, FP16, args.byzantine_rounds, speeds=speeds,
                               attack=Misbehaviour(attack),
                               processes=1)  # fmt: skip
        attacker = next(m["peer"] for m in hard.members if not m["honest"])
        runs["attacks"][attack.value] = {
            "loss": compare(clean, hard),
            "curve": hard.curve,
            "accused": hard.accused,
            "findings": hard.findings,
            "attacker_accused_alone": hard.accused == [attacker],
        }
    runs["goals"] = {
        "within_5_percent": all(r["loss"]["worst_gap"] <= 0.05 for r in runs["attacks"].values()),
        "within_5_percent_at_equal_rounds": all(
            r["loss"]["worst_gap_at_equal_rounds"] <= 0.05 for r in runs["attacks"].values()
        ),
        # at equal samples an attacker screened out every round makes the run look better (three
        # members' rounds at three quarters of the samples): harm is a loss above the clean run's
        "never_5_percent_worse": all(
            max(r["gap"] for r in a["loss"]["at_equal_samples"]) <= 0.05
            for a in runs["attacks"].values()
        ),
        "attacker_named": all(r["attacker_accused_alone"] for r in runs["attacks"].values()),
    }
    return runs


async def scale(args: argparse.Namespace) -> dict[str, Any]:
    length = args.round_seconds or load_manifest(DEMO_MANIFEST).training.round_seconds
    speeds = list(np.geomspace(*microbatch_range(length), num=8))
    attack = Attack.parse(args.attack)
    print(f"clean: {args.trainers} trainers, {args.rounds} rounds of {length:g} s", flush=True)
    clean = await run_swarm(args.trainers, FP16, args.rounds, speeds=speeds, round_seconds=length)
    print(f"hard: churn, speeds spread 4x, one {attack} attacker", flush=True)
    hard = await run_swarm(args.trainers, FP16, args.rounds, speeds=speeds,
                           attack=Misbehaviour(attack),
                           churn=True, round_seconds=length)  # fmt: skip
    last = hard.backbone.optimizer.epoch
    figures = {
        "trainers": args.trainers,
        "rounds": args.rounds,
        "round_seconds": length,
        "step_seconds": [float(s) for s in speeds],
        "attack": attack.value,
        "landing": landing(hard, last),
        "credit": credit(hard),
        "loss": compare(clean, hard),
        "clean_curve": clean.curve,
        "hard_curve": hard.curve,
        "backbone_repairs": hard.backbone.optimizer.repairs,
        "trainer_repairs": sum(m["repairs"] for m in hard.members),
        "accused": hard.accused,
        "clean_accused": clean.accused,
        "honest_accused": honest_accused(clean, hard),
        "findings": hard.findings,
        "clean_findings": clean.findings,
        "clean_first_accused_at": clean.first_accused_at,
    }
    figures["goals"] = {
        "rounds_land_for_90_percent": figures["landing"]["share_landing_95_percent"] >= 0.9,
        "every_honest_sample_credited": not figures["credit"]["mismatched"],
        "held_out_within_3_percent": figures["loss"]["worst_gap"] <= 0.03,
        "held_out_within_3_percent_at_equal_rounds": (
            figures["loss"]["worst_gap_at_equal_rounds"] <= 0.03
        ),
        "no_honest_trainer_accused": not figures["honest_accused"],
    }
    return figures


def honest_accused(clean: Swarm, hard: Swarm) -> list[str]:
    """Whom the members' evidence accuses that attacked nobody: anyone in the clean run, anyone
    but the attacker in the attacked one (a screen that accuses honest members is a defect)."""
    attackers = {m["peer"] for m in hard.members if not m["honest"]}
    return sorted({*clean.accused, *(set(hard.accused) - attackers)})


# ---- bytes ---------------------------------------------------------------------------------------


def expected_bytes(sizes: Sequence[int], trainers: int, codec: Codec) -> dict[str, float]:
    """What one member sends (and receives) a round, from the codecs' sizes: with ``m`` groups
    of ``g`` (the backbone in one of them), its data to the other reducers ``(g-1)/g`` of a
    contribution ``c``, its slots' means back ``(g-1)/g`` of a mean ``b``; with several groups,
    in its slots' columns a group's mean out whole (``w``) and the column's mean back, each
    ``(m-1)/m`` of its slots, ``1/g`` of the vector."""
    members = trainers + 1
    groups = math.ceil(members / GROUP)
    g = members / groups

    def size(of: Codec) -> int:  # each tensor in its own blocks
        return sum(encoded_size(of.resolve(n), n) for n in sizes)

    c, b, w = size(codec), size(codec.for_sum(GROUP)), size(codec.for_whole_sum(GROUP))
    group = (g - 1) / g * (c + b)
    column = (groups - 1) / groups * (w + b) / g if groups > 1 else 0.0
    return {"groups": groups, "group_bytes": group, "column_bytes": column,
            "bytes": group + column}  # fmt: skip


async def measured_bytes(trainers: int, codec: Codec, rounds: int) -> dict[str, Any]:
    """What each trainer sent and received a round, once the swarm settled."""
    swarm = await run_swarm(
        trainers, codec, WARM_UP + rounds, speeds=[microbatch_range(ROUND_SECONDS)[0]]
    )
    chunk_out, chunk_in, host_out, host_in, groups = [], [], [], [], []
    for member in swarm.members:
        settled = [r for r in member["reports"] if r[0] >= swarm.settled and r[4]]
        if not settled:
            continue
        chunk_out.append(statistics.mean(r[4] for r in settled))
        groups.append(statistics.mean(r[3] for r in settled))
        chunk_in.append(member["last_bytes_received"])
        epochs = max(1, swarm.backbone.optimizer.epoch - member["joined"])
        host_out.append(member["host_sent"] / epochs)
        host_in.append(member["host_received"] / epochs)
    sizes = [p.numel() for p in fresh_model().parameters()]
    return {
        "trainers": trainers,
        "codec": codec.name,
        "parameters": sum(sizes),
        "group_size_seen": statistics.mean(groups) if groups else 0.0,
        "chunk_bytes_sent": statistics.mean(chunk_out) if chunk_out else 0.0,
        "chunk_bytes_received": statistics.mean(chunk_in) if chunk_in else 0.0,
        "host_bytes_sent": statistics.mean(host_out) if host_out else 0.0,
        "host_bytes_received": statistics.mean(host_in) if host_in else 0.0,
        "formula": expected_bytes(sizes, trainers, codec),
    }


async def byte_table(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for codec in (FP16, top_k(0.01, 2)):
        for size in args.sizes:
            print(f"bytes: {size} trainers, {codec.name}", flush=True)
            row = await measured_bytes(size, codec, args.byte_rounds)
            print(f"  sent {row['chunk_bytes_sent']:.0f} B a round (formula "
                  f"{row['formula']['bytes']:.0f}), received {row['chunk_bytes_received']:.0f}",
                  flush=True)  # fmt: skip
            rows.append(row)
    return rows


def billion(sizes: Sequence[int]) -> list[dict[str, Any]]:
    rows = []
    for codec in (FP16, top_k(0.01, 2)):
        for size in sizes:
            sent = expected_bytes([10**9], size, codec)
            rows.append({"trainers": size, "codec": codec.name, **sent,
                         "upload_seconds_at_20_mbit": sent["bytes"] * 8 / 20e6})  # fmt: skip
    return rows


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"benchmark": "swarm_scale"}
    if args.only in (None, "billion"):
        result["billion"] = billion(args.sizes)
    if args.only in (None, "bytes"):
        result["bytes"] = await byte_table(args)
    if args.only in (None, "byzantine"):
        result["byzantine"] = await byzantine(args)
    if args.only in (None, "scale"):
        result["scale"] = await scale(args)
    return result


def main() -> None:
    if sys.argv[1:2] == ["--crowd"]:  # a worker process of run_swarm
        torch.set_num_threads(1)
        asyncio.run(serve_crowd(sys.argv[2], sys.argv[3], float(sys.argv[4])))
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", choices=("scale", "bytes", "billion", "byzantine"))
    parser.add_argument("--byzantine-rounds", type=int, default=12)
    parser.add_argument("--trainers", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument(
        "--round-seconds",
        type=float,
        default=None,
        help="the scale scenario's round (default: the manifest's, 60 s); microbatches scale",
    )
    parser.add_argument("--attack", default="sign-flip", help="sign-flip or nan")
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")],
                        default=[8, 16, 32, 64])  # fmt: skip
    parser.add_argument("--byte-rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    result = asyncio.run(main_async(args))
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
