"""A stranger against the collaboration's state: what fresh identities can make a diloco swarm do
once its epoch and state are the ones the backbone's key confirmed.

    python -m benchmarks.robust.anchored --json docs/benchmarks/robust/anchored.json   # ~10 minutes
    python -m benchmarks.robust.anchored --only poison,away --json out.json

A backbone whose key every peer pins (a manifest's ``access.backbone_keys``) and four trainers
land diloco rounds on loopback, in this one process: each its own Host, DHT node, averager,
training thread and ``DilocoOptimizer``, built by the diloco mode's own wiring from the demo
manifest in diloco mode (its averaging: CenteredClip, screening, weights bounded at 4x the median
claim). The task is ``swarm_scale``'s (a small MLP learns a noisy teacher function; the held-out
loss is the backbone's outer parameters'). Every trainer takes ``--steps`` inner steps a round and
the benchmark ends the rounds itself, so that every scenario computes exactly the same work as the
clean run it is compared with, in the same invocation.

Scenarios, each a fresh swarm:

- ``clean``: nobody attacks (the reference).
- ``poison``: a fifth member trains honestly for two rounds, then serves a poisoned outer state
  (its anchor x1000) announced one epoch past the confirmed one, renewed every round, while three
  fresh identities' records announce that epoch with its digest. Then a newcomer joins while the
  same member serves the poison under the confirmed state's name. Goals: no honest peer, backbone
  or newcomer ever holds the poisoned digest, the loss within 5 % of the clean run, the donor
  accused (``unconfirmed_epoch`` and ``state_mismatch``).
- ``future``: records from fresh identities announcing later epochs: one identity 5 ahead, 16
  identities 1 to 16 ahead, one renewed 1,000 ahead. Goals: at least 90 % of the rounds land, no
  round end spends time catching up (the time each peer's round end took, its longest, beside the
  matchmaking window a round has, and the longest wait from the round ends to the landing, beside
  twice that window: matchmaking, then the all-reduce), the loss within 5 %.
- ``tiny``: as many members as honest ones, each claiming a thousandth of its samples, sending
  either copies of an honest member's update (the same data as trainer 0) or small noise (a
  hundredth of an honest update's norm, dragging a counted median of norms down). Goals: the loss
  within 5 %, no honest member accused nor screened out of more values than in the clean run
  (which leaves one honest overshoot out, by its direction, without accusing it).
- ``inflated``: the other side of the same medians: members claiming 100 times their samples
  and sending their update x1000 (what a median of norms set by their claims would let through):
  three beside the four honest members from the start, and four joining after two confirmed
  rounds. Goals: the loss within 5 %, every one of them accused, no honest member accused nor
  left out of more values than in the clean run (which leaves an honest overshoot out, by its
  direction, without accusing it). Measured beside them, not a goal: four from the collaboration's first
  round, before any confirmation lists a member (from claims alone they are the typical ones).
- ``away``: the backbone stops after two rounds; the trainers land ten without it (their quorum
  confirms them), a newcomer joins meanwhile; the backbone comes back from its stale state (a fresh
  model: what a backbone whose checkpoints are ten rounds old holds). Goals: the rounds keep
  landing, the newcomer and the backbone load the members' confirmed state, and rounds land with
  everyone after.
- ``join``: newcomers join a swarm whose backbone confirms and one that names no confirming key
  (every swarm before), alternately: the seconds each takes to start, its download included.
  Goal: within 10 % of the swarm without confirmations, every newcomer on the backbone's state.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.kit.harness import emit
from benchmarks.swarm import swarm_scale
from core.averaging import Averager
from core.codecs import FP16
from core.dht import DHTConfig, DHTNode, HostTransport
from core.net import Host, Identity
from core.project import Manifest
from core.swarm.byzantine import Attack, Misbehaviour
from core.training.diloco.mode import MODE
from core.training.diloco.optimizer import DilocoOptimizer, Landing
from core.training.links import PeerLinks
from core.training.participation import STATE_MISMATCH, UNCONFIRMED_EPOCH
from core.training.peer.recipe import averager_config
from core.training.progress import PeerProgress, ProgressBoard
from core.training.state import TrainingState
from core.worker.bridge import TrainingBridge

PREFIX = "scale"
TRAINERS = 4
NEVER = 86400.0
"""The manifest's longest round: the benchmark ends rounds itself, the clock never does."""
WINDOW = 10.0
"""Seconds a round's matchmaking waits for the members it planned (the manifest's third of a
round of 30 s): a round end's deadline."""
SCENARIOS = ("clean", "poison", "future", "tiny", "inflated", "away", "join")
INFLATED = ("fewer_from_the_start", "as_many_after_two_rounds", "as_many_from_the_first_round")
"""The ``inflated`` runs; the last is measured, not a goal."""


def manifest() -> Manifest:
    return swarm_scale.manifest(FP16).with_training(round_seconds=NEVER)


@dataclass
class Peer:
    name: str
    optimizer: DilocoOptimizer
    host: Host
    dht: DHTNode
    averager: Averager
    bridge: TrainingBridge
    model: torch.nn.Module
    seed: int
    data: tuple[torch.Tensor, torch.Tensor] = field(init=False)
    at: int = 0
    stopped: bool = False

    def __post_init__(self) -> None:
        self.data = swarm_scale.teacher(self.seed, 1 << 15)

    @property
    def address(self) -> str:
        return str(self.host.addresses[0])

    @property
    def id(self) -> str:
        return str(self.host.peer_id)


class Swarm:
    """The peers of one scenario, and the keys they pin."""

    def __init__(self, key: Identity, *, keyed: bool = True) -> None:
        self.key = key
        self.keys = frozenset({str(key.peer_id)}) if keyed else frozenset()
        self.peers: list[Peer] = []
        self.boards: list[tuple[DHTNode, Host]] = []

    @property
    def join(self) -> str | None:
        live = [p for p in self.peers if not p.stopped]
        return live[0].address if live else None

    async def start(
        self, name: str, *, backbone: bool = False, seed: int = 0, key: Identity | None = None
    ) -> Peer:
        host = Host(key or Identity.generate(), swarm_scale.NET)
        await host.start()
        join = self.join
        dht = DHTNode(
            HostTransport(host), DHTConfig(rpc_timeout=5.0, replicas=swarm_scale.REPLICAS)
        )
        await dht.start([join] if join else [])
        if join:
            await dht.wait_bootstrapped()
        role = "backbone" if backbone else "trainer"
        project = manifest()
        config = replace(
            averager_config(project, role),
            min_matchmaking_time=WINDOW / 2,
            max_matchmaking_time=WINDOW,
        )
        averager = Averager(host, dht, PREFIX, config)
        bridge = TrainingBridge(name)
        model = swarm_scale.fresh_model()
        state = TrainingState(model, torch.optim.AdamW(model.parameters(), lr=swarm_scale.INNER_LR))
        links = PeerLinks.create(averager, bridge, self.keys)
        optimizer = MODE.optimizer(project, state, links, role)
        # the records read as often as in a round of a few seconds (``reads_every``)
        optimizer.config = replace(optimizer.config, matchmaking_time=WINDOW, refresh_interval=5.0)
        peer = Peer(name, optimizer, host, dht, averager, bridge, model, seed)
        self.peers.append(peer)
        await optimizer.start()
        return peer

    async def identities(self, count: int) -> list[DHTNode]:
        """Fresh identities, each a DHT node of its own (what a record costs)."""
        nodes = []
        for _ in range(count):
            host = Host(Identity.generate(), swarm_scale.NET)
            await host.start()
            dht = DHTNode(
                HostTransport(host), DHTConfig(rpc_timeout=5.0, replicas=swarm_scale.REPLICAS)
            )
            join = self.join
            await dht.start([join] if join else [])
            self.boards.append((dht, host))
            nodes.append(dht)
        return nodes

    async def stop(self, peer: Peer) -> None:
        if peer.stopped:
            return
        peer.stopped = True
        peer.optimizer.interrupt()
        await peer.optimizer.close()
        await peer.averager.close()
        await peer.bridge.aclose()
        await peer.dht.close()
        await peer.host.close()

    async def close(self) -> None:
        for peer in reversed(self.peers):
            await self.stop(peer)
        for dht, host in self.boards:
            await dht.close()
            await host.close()


async def train(peer: Peer, steps: int) -> None:
    def step(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
        loss = torch.nn.functional.mse_loss(peer.model(batch[0]), batch[1])
        loss.backward()  # type: ignore[no-untyped-call]

    x, y = peer.data
    size = swarm_scale.MICROBATCH
    for _ in range(steps):
        batch = (x[peer.at : peer.at + size], y[peer.at : peer.at + size])
        peer.at = (peer.at + size) % (x.shape[0] - size)
        await peer.bridge.run(step, batch)
        await peer.optimizer.step(size, None)


async def round_of(peers: list[Peer], steps: int) -> dict[str, float]:
    """One round: every trainer's inner steps, then every round end at once, the exchanges
    awaited; the seconds each peer's round end took (before its exchange went out)."""
    trainers = [p for p in peers if p.optimizer.config.role != "backbone"]
    await asyncio.gather(*(train(p, steps) for p in trainers))
    took: dict[str, float] = {}

    async def end(peer: Peer) -> None:
        started = time.monotonic()
        await peer.optimizer.end_round()
        took[peer.name] = time.monotonic() - started

    await asyncio.gather(*(end(p) for p in peers))
    ended = time.monotonic()
    await asyncio.gather(*(p.optimizer.settle() for p in peers))
    took["landing"] = time.monotonic() - ended
    return took


async def seen(peers: list[Peer], count: int, seconds: float = 30.0) -> None:
    """Every peer read ``count`` records (who to expect in a round)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        await asyncio.gather(*(p.optimizer._refresh() for p in peers))
        if all(len(p.optimizer.view().peers) >= count for p in peers):
            return
        await asyncio.sleep(0.2)


def held_out(peer: Peer) -> float:
    return swarm_scale.held_out_loss(peer.optimizer.diloco.anchor)


async def accused(peer: Peer, statistic: str) -> set[str]:
    found = await peer.optimizer.evidence.fetch()
    return {str(r.evidence.accused) for r in found if r.evidence.statistic == statistic}


async def accused_eventually(peer: Peer, statistic: str, wanted: set[str]) -> set[str]:
    names: set[str] = set()
    for _ in range(50):
        names = await accused(peer, statistic)
        if wanted <= names:
            break
        await asyncio.sleep(0.2)
    return names


def catches(peers: Iterable[Peer]) -> list[float]:
    """Counts each peer's catching up, and its seconds: a spy on ``Mending.catch_up``."""
    times: list[float] = []
    for peer in peers:
        mending = peer.optimizer.mending
        real = mending.catch_up

        async def spy(limit: float | None = None, real: Any = real) -> bool:
            started = time.monotonic()
            try:
                caught: bool = await real(limit)
                return caught
            finally:
                times.append(time.monotonic() - started)

        mending.catch_up = spy  # type: ignore[method-assign]
    return times


class Announcer:
    """Fresh identities renewing records that announce ``epoch()`` (and ``anchor``) every second."""

    def __init__(self, nodes: list[DHTNode], epoch: Callable[[int], int], anchor: str = "") -> None:
        self.boards = [(ProgressBoard(dht, PREFIX), dht) for dht in nodes]
        self.epoch = epoch
        self.anchor = anchor
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.gather(
                *(self._publish(i, board, dht) for i, (board, dht) in enumerate(self.boards)),
                return_exceptions=True,
            )
            await asyncio.sleep(1.0)

    async def _publish(self, i: int, board: ProgressBoard, dht: DHTNode) -> None:
        record = PeerProgress(
            str(dht.peer_id), self.epoch(i), 400, 80.0, time.time(), anchor=self.anchor
        )
        await board.publish(record)

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def swarm_of(
    trainers: int = TRAINERS, *, keyed: bool = True
) -> tuple[Swarm, Peer, list[Peer]]:
    swarm = Swarm(Identity.generate(), keyed=keyed)
    backbone = await swarm.start("backbone", backbone=True, key=swarm.key)
    members = [await swarm.start(f"t{i}", seed=i + 1) for i in range(trainers)]
    await seen([backbone, *members], trainers + 1)
    return swarm, backbone, members


def gap(loss: float, clean: float) -> float:
    return abs(loss - clean) / clean


# ---- scenarios -----------------------------------------------------------------------------------


async def clean(rounds: int, steps: int) -> dict[str, Any]:
    swarm, backbone, members = await swarm_of()
    left_out: dict[str, int] = {}
    why: dict[str, list[str]] = {}
    for member in members:
        watch_left_out(member, left_out, why)
    try:
        landed = 0
        for _ in range(rounds):
            before = backbone.optimizer.epoch
            await round_of([backbone, *members], steps)
            landed += backbone.optimizer.epoch > before
        return {
            "rounds": rounds,
            "landed": landed,
            "held_out": held_out(backbone),
            "honest_values_left_out": left_out,
            "why_left_out": why,
        }
    finally:
        await swarm.close()


def poison_anchor(peer: Peer, epoch: int, *, keep_name: bool) -> None:
    diloco = peer.optimizer.diloco
    for values in diloco.anchor:
        np.multiply(values, np.float32(1000.0), out=values)
    diloco.state.epoch = epoch
    if not keep_name:
        diloco.digest = diloco.anchor_digest()


async def poison(rounds: int, steps: int, clean_loss: float) -> dict[str, Any]:
    swarm, backbone, members = await swarm_of()
    attacker = await swarm.start("attacker", seed=99)
    honest = [backbone, *members]
    announcer: Announcer | None = None
    try:
        await seen([*honest, attacker], len(honest) + 1)
        for _ in range(2):
            await round_of([*honest, attacker], steps)
        await attacker.bridge.run(
            lambda: poison_anchor(attacker, backbone.optimizer.epoch + 1, keep_name=False)
        )
        poisoned = attacker.optimizer.diloco.digest
        attacker.optimizer.mending.mark()
        await attacker.optimizer._announce()
        nodes = await swarm.identities(3)
        announcer = Announcer(nodes, lambda _: backbone.optimizer.epoch + 1, poisoned)
        held: list[str] = []
        landed = 0
        started = time.monotonic()
        for _ in range(rounds - 2):
            before = backbone.optimizer.epoch
            await round_of(honest, steps)
            landed += backbone.optimizer.epoch > before
            held += [p.optimizer.diloco.digest for p in honest]
            attacker.optimizer.diloco.state.epoch = backbone.optimizer.epoch + 1
            attacker.optimizer.mending.mark()
            await attacker.optimizer._announce()
        # the records' grace: an attacker ahead that long has lost its standing
        grace = members[0].optimizer.board.strikes.grace
        await asyncio.sleep(max(0.0, grace + 5.0 - (time.monotonic() - started)))
        ahead = await accused_eventually(backbone, UNCONFIRMED_EPOCH, {attacker.id})
        # the same donor now passes its poison off as the confirmed state
        confirmed = backbone.optimizer.diloco.digest
        epoch = backbone.optimizer.epoch
        await attacker.bridge.run(lambda: poison_anchor(attacker, epoch, keep_name=False))
        attacker.optimizer.diloco.digest = confirmed
        attacker.optimizer.links.sharing._snapshot = None  # packed anew when first asked
        attacker.optimizer.mending.mark()
        await attacker.optimizer._announce()
        newcomer = await swarm.start("newcomer", seed=50)
        mismatch = await accused_eventually(backbone, STATE_MISMATCH, {attacker.id})
        loss = held_out(backbone)
        return {
            "rounds": rounds,
            "landed_after_the_attack": landed,
            "poisoned_state_held_by_honest": sum(d == poisoned for d in held),
            "newcomer_on_the_confirmed_state": newcomer.optimizer.diloco.digest == confirmed,
            "held_out": loss,
            "gap_to_clean": gap(loss, clean_loss),
            "accused_unconfirmed_epoch": sorted(ahead),
            "accused_state_mismatch": sorted(mismatch),
            "identities_struck_by_an_honest_peer": sorted(
                {str(n.peer_id) for n in nodes}
                & set().union(*(p.optimizer.board.strikes.struck for p in honest))
            ),
            "goals": {
                "nobody_loads_it": not any(d == poisoned for d in held)
                and newcomer.optimizer.diloco.digest == confirmed,
                "loss_within_5_percent": gap(loss, clean_loss) <= 0.05,
                "donor_accused": attacker.id in ahead and attacker.id in mismatch,
                "no_honest_accused": not ({p.id for p in honest} & (ahead | mismatch)),
            },
        }
    finally:
        if announcer is not None:
            await announcer.close()
        await swarm.close()


async def future(rounds: int, steps: int, clean_loss: float, kind: str) -> dict[str, Any]:
    swarm, backbone, members = await swarm_of()
    peers = [backbone, *members]
    announcer: Announcer | None = None
    try:
        await round_of(peers, steps)
        base = backbone.optimizer.epoch
        count, epoch = {
            "one_5_ahead": (1, lambda _: base + 5),
            "sixteen_1_to_16_ahead": (16, lambda i: backbone.optimizer.epoch + 1 + i),
            "one_renewed_1000_ahead": (1, lambda _: backbone.optimizer.epoch + 1000),
        }[kind]
        nodes = await swarm.identities(count)
        announcer = Announcer(nodes, epoch)
        await seen(peers, len(peers) + count)
        times = catches(peers)
        landed, longest, landing = 0, 0.0, 0.0
        for _ in range(rounds - 1):
            before = backbone.optimizer.epoch
            took = await round_of(peers, steps)
            landed += backbone.optimizer.epoch > before
            landing = max(landing, took.pop("landing"))
            longest = max(longest, *took.values())
            print(f"  round at {before}: landed {backbone.optimizer.epoch > before}, round ends "
                  f"took at most {max(took.values()):.2f} s", flush=True)  # fmt: skip
        loss = held_out(backbone)
        window = backbone.optimizer.config.matchmaking_time
        return {
            "identities": count,
            "rounds": rounds - 1,
            "landed": landed,
            "catch_ups": len(times),
            "catch_up_seconds": sum(times),
            "longest_round_end_seconds": longest,
            "longest_landing_seconds": landing,
            "matchmaking_window_seconds": window,
            "held_out": loss,
            "gap_to_clean": gap(loss, clean_loss),
            "goals": {
                "rounds_land": landed >= 0.9 * (rounds - 1),
                "no_round_end_waits": not times and longest <= window and landing <= 2 * window,
                "loss_within_5_percent": gap(loss, clean_loss) <= 0.05,
            },
        }
    finally:
        if announcer is not None:
            await announcer.close()
        await swarm.close()


async def tiny(rounds: int, steps: int, reference: dict[str, Any], kind: str) -> dict[str, Any]:
    clean_loss = reference["held_out"]
    baseline: dict[str, int] = reference["honest_values_left_out"]
    swarm, backbone, members = await swarm_of()
    sybils = []
    for i in range(TRAINERS):
        # copies: trainer 0's data, the same update; noise: its own, replaced by noise
        sybil = await swarm.start(f"s{i}", seed=1 if kind == "copies" else 200 + i)
        attack = Misbehaviour(Attack.NOISE, 0.01) if kind == "noise" else None
        if attack is not None:
            sybil.optimizer.tamper = attack.gradient_attack()
        sybil.optimizer.claim = 1e-3
        sybils.append(sybil)
    peers = [backbone, *members, *sybils]
    left_out: dict[str, int] = {}
    why: dict[str, list[str]] = {}
    for member in members:
        watch_left_out(member, left_out, why)
    try:
        await seen(peers, len(peers))
        landed = 0
        for _ in range(rounds):
            before = backbone.optimizer.epoch
            await round_of(peers, steps)
            landed += backbone.optimizer.epoch > before
        loss = held_out(backbone)
        named = await accused_by_anyone(backbone)
        honest = {p.id for p in members}
        screened = sorted(name for name, values in left_out.items() if values)
        return {
            "identities": len(sybils),
            "claim": 1e-3,
            "rounds": rounds,
            "landed": landed,
            "held_out": loss,
            "gap_to_clean": gap(loss, clean_loss),
            "honest_accused": sorted(named & honest),
            "honest_screened": screened,
            "honest_values_left_out": left_out,
            "why_left_out": why,
            "goals": {
                "loss_within_5_percent": gap(loss, clean_loss) <= 0.05,
                "no_honest_accused": not named & honest,
                # screened out: no more than the clean run screens (an honest overshoot left
                # out by its direction, unattributed), member by member
                "honest_left_out_as_in_the_clean_run": all(
                    values <= baseline.get(name, 0) for name, values in left_out.items()
                ),
            },
        }
    finally:
        await swarm.close()


async def inflated(rounds: int, steps: int, reference: dict[str, Any], kind: str) -> dict[str, Any]:
    clean_loss = reference["held_out"]
    baseline: dict[str, int] = reference["honest_values_left_out"]
    swarm, backbone, members = await swarm_of()
    count = TRAINERS - 1 if kind == "fewer_from_the_start" else TRAINERS
    attackers: list[Peer] = []
    left_out: dict[str, int] = {}
    why: dict[str, list[str]] = {}
    for member in members:
        watch_left_out(member, left_out, why)

    async def enlist() -> None:
        for i in range(count):
            attacker = await swarm.start(f"x{i}", seed=300 + i)
            attacker.optimizer.tamper = Misbehaviour(Attack.SCALE, 1000.0).gradient_attack()
            attacker.optimizer.claim = 100.0
            attackers.append(attacker)
        await seen([backbone, *members, *attackers], 1 + len(members) + len(attackers))

    try:
        late = kind == "as_many_after_two_rounds"
        if not late:
            await enlist()
        landed = 0
        for number in range(rounds):
            if late and number == 2:
                await enlist()
            before = backbone.optimizer.epoch
            await round_of([backbone, *members, *attackers], steps)
            landed += backbone.optimizer.epoch > before
        loss = held_out(backbone)
        named = await accused_by_anyone(backbone)
        honest = {p.id for p in members}
        screened = sorted(name for name, values in left_out.items() if values)
        result: dict[str, Any] = {
            "identities": count,
            "claim": 100.0,
            "attack": "scale x1000",
            "rounds": rounds,
            "landed": landed,
            "held_out": loss,
            "gap_to_clean": gap(loss, clean_loss),
            "attackers_accused": len(named & {p.id for p in attackers}),
            "honest_accused": sorted(named & honest),
            "honest_with_values_left_out": screened,
            "honest_values_left_out": left_out,
            "why_left_out": why,
        }
        checks = {
            "loss_within_5_percent": gap(loss, clean_loss) <= 0.05,
            "every_attacker_accused": result["attackers_accused"] == count,
            "no_honest_accused": not named & honest,
            # the clean run leaves some honest values out too (an honest overshoot screened by
            # direction, unattributed): no more than there, member by member
            "honest_left_out_as_in_the_clean_run": all(
                values <= baseline.get(name, 0) for name, values in left_out.items()
            ),
        }
        if kind == INFLATED[-1]:
            result["measured_not_a_goal"] = checks  # before any confirmation: claims alone
        else:
            result["goals"] = checks
        return result
    finally:
        await swarm.close()


async def accused_by_anyone(backbone: Peer) -> set[str]:
    """Everyone some evidence accuses, once what was found in the last round was published (in
    the background)."""
    await asyncio.sleep(1.0)
    found = await backbone.optimizer.evidence.fetch()
    return {str(r.evidence.accused) for r in found}


def watch_left_out(
    peer: Peer, seen: dict[str, int], why: dict[str, list[str]] | None = None
) -> None:
    """Count the values of ``peer``'s own data that its rounds' means left out (screened, or a
    reducer that left it out) into ``seen[peer.name]``; ``why``: what the round said of it (a
    reason it was left out for, or what else the round says: a reducer it reached late)."""

    def landed(landing: Landing) -> None:
        result = landing.result
        left = sum(end - start for start, end in result.left_out)
        seen[peer.name] = seen.get(peer.name, 0) + left
        if left and why is not None:
            said = result.excluded.get(peer.host.peer_id) or result.summary()
            why.setdefault(peer.name, []).append(f"epoch {landing.epoch}: {said}")

    peer.optimizer.on_landed = landed


async def away(rounds: int, steps: int) -> dict[str, Any]:
    swarm, backbone, members = await swarm_of()
    try:
        for _ in range(2):
            await round_of([backbone, *members], steps)
        left_at = backbone.optimizer.epoch
        await swarm.stop(backbone)
        landed = 0
        newcomer: Peer | None = None
        for number in range(10):
            before = members[0].optimizer.epoch
            await round_of(members if newcomer is None else [*members, newcomer], steps)
            landed += members[0].optimizer.epoch > before
            if number == 4:
                newcomer = await swarm.start("newcomer", seed=77)
                newcomer_loaded = (
                    newcomer.optimizer.diloco.digest == members[0].optimizer.diloco.digest
                )
                await seen([*members, newcomer], len(members) + 1)
        assert newcomer is not None
        view = members[0].optimizer.view()
        back = await swarm.start("backbone-again", backbone=True, key=swarm.key)
        took_back = (
            back.optimizer.epoch == members[0].optimizer.epoch
            and back.optimizer.diloco.digest == members[0].optimizer.diloco.digest
        )
        everyone = [back, *members, newcomer]
        await seen(everyone, len(everyone))
        after = 0
        for _ in range(max(1, rounds - 2)):
            before = back.optimizer.epoch
            await round_of(everyone, steps)
            after += back.optimizer.epoch > before
        digests = {p.optimizer.diloco.digest for p in everyone}
        return {
            "left_at": left_at,
            "rounds_away": 10,
            "landed_away": landed,
            "confirmed_while_away": {"by": view.confirmed.by, "epoch": view.confirmed.epoch},
            "newcomer_on_the_members_state": newcomer_loaded,
            "backbone_took_the_confirmed_state": took_back,
            "backbone_epoch_when_back": back.optimizer.epoch,
            "landed_after": after,
            "one_model_after": len(digests) == 1,
            "held_out": held_out(back),
            "goals": {
                "rounds_land_without_it": landed >= 9,
                "backbone_resumes_from_the_confirmed_state": took_back,
                "newcomer_joins_meanwhile": newcomer_loaded,
                "rounds_land_after": after >= 0.9 * max(1, rounds - 2) and len(digests) == 1,
            },
        }
    finally:
        await swarm.close()


async def join(rounds: int, steps: int, newcomers: int) -> dict[str, Any]:
    """Newcomers joining one after another, in a swarm that names no confirming key (what every
    swarm did before) and in one whose backbone confirms, alternately: the seconds each took to
    start (its download included) and whether it holds the backbone's state."""
    times: dict[str, list[float]] = {"records": [], "confirmed": []}
    on_state: dict[str, int] = {"records": 0, "confirmed": 0}
    for repeat in range(4):
        for keyed in (False, True) if repeat % 2 == 0 else (True, False):
            name = "confirmed" if keyed else "records"
            swarm, backbone, members = await swarm_of(keyed=keyed)
            try:
                for _ in range(2):
                    await round_of([backbone, *members], steps)
                for i in range(newcomers):
                    started = time.monotonic()
                    newcomer = await swarm.start(f"n{i}", seed=300 + i)
                    times[name].append(time.monotonic() - started)
                    digest = backbone.optimizer.diloco.digest
                    on_state[name] += newcomer.optimizer.diloco.digest == digest
            finally:
                await swarm.close()
    medians = {k: float(np.median(v)) for k, v in times.items()}
    ratio = medians["confirmed"] / medians["records"]
    return {
        "newcomers_per_swarm": newcomers,
        "join_seconds": times,
        "median_join_seconds": medians,
        "ratio_confirmed_to_records": ratio,
        "on_the_backbones_state": on_state,
        "goals": {
            "every_newcomer_loads_the_state": on_state["confirmed"] == len(times["confirmed"]),
            "join_time_within_10_percent": ratio <= 1.10,
        },
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    only = set(args.only.split(",")) if args.only else set(SCENARIOS)
    rounds, steps = args.rounds, args.steps
    out: dict[str, Any] = {"rounds": rounds, "steps_per_round": steps, "trainers": TRAINERS}
    print("clean", flush=True)
    out["clean"] = reference = await clean(rounds, steps)
    loss = reference["held_out"]
    out["floor_mean_predictor"] = float(swarm_scale.HELD_OUT[1].var())
    if "poison" in only:
        print("poison", flush=True)
        out["poison"] = await poison(rounds, steps, loss)
    if "future" in only:
        out["future"] = {}
        for kind in ("one_5_ahead", "sixteen_1_to_16_ahead", "one_renewed_1000_ahead"):
            print(f"future: {kind}", flush=True)
            out["future"][kind] = await future(rounds, steps, loss, kind)
    if "tiny" in only:
        out["tiny"] = {}
        for kind in ("copies", "noise"):
            print(f"tiny: {kind}", flush=True)
            out["tiny"][kind] = await tiny(rounds, steps, reference, kind)
    if "inflated" in only:
        out["inflated"] = {}
        for kind in INFLATED:
            print(f"inflated: {kind}", flush=True)
            out["inflated"][kind] = await inflated(rounds, steps, reference, kind)
    if "away" in only:
        print("away", flush=True)
        out["away"] = await away(rounds, steps)
    if "join" in only:
        print("join", flush=True)
        out["join"] = await join(rounds, steps, newcomers=3)
    out["goals_met"] = all(_goals(out))
    return out


def _goals(node: Any) -> list[bool]:
    if not isinstance(node, dict):
        return []
    found = [bool(v) for v in node.get("goals", {}).values()]
    for key, value in node.items():
        if key != "goals":
            found += _goals(value)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help=f"comma-separated of {', '.join(SCENARIOS)}")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10, help="inner steps per round")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    unknown = set(filter(None, args.only.split(","))) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    if args.rounds < 4 or args.steps < 1:
        parser.error("--rounds must be at least 4 and --steps at least 1")
    torch.set_num_threads(1)
    emit(asyncio.run(main_async(args)), args.json)


if __name__ == "__main__":
    main()
