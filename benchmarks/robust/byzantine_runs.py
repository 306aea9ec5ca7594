"""Running the Byzantine scenarios: collaborations of four trainers, one of them misbehaving.

Every peer is its own Host, DHT node, averager and training thread on loopback, in this one process
(as ``tests/training`` does), with the real collaborative optimizer; the task is
``byzantine_task``'s. One trainer misbehaves (``core.swarm.byzantine``); each scenario runs it
under the plain mean (screening off: what averaging did before the defences) or under the defence
(CenteredClip with screening; for the lying reducer, reducer verification as well). Scenarios run
``CONCURRENCY`` at a time in one event loop.

A run whose loss turns non-finite is stopped there (diverged); so is an undefended one whose loss
reaches ``DIVERGED`` times the reference's at the same epoch. A defended run otherwise runs to its
end. The loss is measured after every epoch on the held-out set, on an honest trainer's replica
(all replicas are equal).

A lying reducer lies through the averager's ``round_hook`` (as ``barnraise peer --attack
lying-reducer`` does), and stays for the whole run once caught: the honest trainers' bans keep it
out of their rounds, their progress views and their state downloads.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from benchmarks.robust.byzantine_task import (
    LEARNING_RATE,
    SHARD,
    TRAINERS,
    evaluate,
    fresh_model,
    held_out,
    mse,
    reference,
    shard,
)
from core.averaging import Averager, AveragerConfig, AveragingResult
from core.averaging.allreduce import AllReduce
from core.averaging.robust.aggregation import AggregationConfig, Method
from core.averaging.robust.medians import lower_median
from core.dht import DHTConfig, DHTNode, HostTransport
from core.net import Host, Identity, NetConfig
from core.swarm.byzantine import Attack, GradientAttack, LyingReducer, Misbehaviour
from core.training.dedloc.optimizer import DedlocConfig, DedlocOptimizer
from core.training.links import PeerLinks
from core.training.moderation.repeated import Found, RepeatedFindings
from core.training.state import TrainingState
from core.training.trainer import Trainer
from core.worker.bridge import TrainingBridge

BYZANTINE = TRAINERS - 1
"""The index of the misbehaving trainer."""
TARGET = 2 * SHARD
"""Two shards per epoch: the first microbatch of every trainer usually fills it, and more than
one of each seldom goes in (a trainer faster than the news adds one more)."""
DIVERGED = 1.5
"""An undefended run whose loss is this many times the reference's at the same epoch has visibly
left the clean curve: it is stopped there, marked diverged."""
CONCURRENCY = 2
"""Collaborations run at once. One event loop carries them all: with more, its delays grow until
rounds start without a slow member (the Byzantine one, as often as not) and the test no longer
tests the attack; two keep it busy while each waits on its sleeps and timers."""
SCENARIO_SECONDS = 240.0
"""A collaboration still running after this long is stopped and marked "timed out" (a hang guard:
thirty epochs take seconds)."""

NET = NetConfig(dial_timeout=20.0, handshake_timeout=20.0, call_timeout=10.0, close_grace=0.2)
AVERAGING = AveragerConfig(
    min_group_size=1,
    # a banned peer is still counted as expected (its progress records are there), so the others'
    # leader waits for it: the shortest wait keeps those rounds quick
    min_matchmaking_time=0.5,
    max_matchmaking_time=4.0,
    sender_timeout=2.0,
    reducer_timeout=4.0,
    allreduce_timeout=15.0,
    request_timeout=2.0,
)

WEIGHT_RATIO_LIMIT = 4.0
"""The manifest's ``averaging.weight_ratio_limit``."""

MakeHost = Callable[..., Awaitable[Host]]


# ---- the scenarios -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    attack: Attack | None
    """None: a clean run."""
    defended: bool
    """CenteredClip with screening (and reducer verification); else the plain mean, unscreened."""
    strength: float | None = None
    """The attack's strength (``Misbehaviour.strength``); None: its default."""
    claim: float = 1.0
    """Samples the Byzantine peer claims per sample it computed (``Misbehaviour.claim``)."""

    @property
    def name(self) -> str:
        kind = "clean" if self.attack is None else self.attack.value
        if self.strength is not None:
            kind += f"x{self.strength:g}"
        if self.claim != 1:
            kind += f"/claims x{self.claim:g}"
        return f"{kind}/{'centered_clip' if self.defended else 'mean'}"


CLEAN = Scenario(None, defended=False)


def all_scenarios(attacks: Sequence[Attack] = tuple(Attack)) -> list[Scenario]:
    """The clean run, and every attack under the mean and under the defence."""
    return [CLEAN] + [Scenario(a, d) for a in attacks for d in (False, True)]


@dataclass
class Curve:
    scenario: Scenario
    losses: list[float] = field(default_factory=list)
    """Held-out loss after each epoch (index 0: before training)."""
    stopped: str | None = None
    """Why the run ended early: "diverged" or "timed out"; None when it ran every epoch."""
    attacks: int = 0
    """Rounds (gradient attacks) or chunks (lying reducer) in which the Byzantine peer misbehaved."""
    accused: dict[str, set[str]] = field(default_factory=dict)
    """Peer -> statistics of the findings the honest trainers made against it."""
    rounds_with_byzantine: list[int] = field(default_factory=list)
    """For each honest trainer: its rounds in which the Byzantine peer was a member."""
    banned_by: int = 0
    """Honest trainers whose averager refuses to group with the Byzantine peer at the end."""
    byzantine_peer: str = ""
    microbatches: int = 0
    """Computed by all trainers together (at best one per trainer and epoch)."""
    byzantine_computed: int = 0
    """Samples the Byzantine peer computed."""
    byzantine_credit_claimed: int = 0
    """Samples its landed epochs claimed (what its records would have credited)."""
    byzantine_weight_ratio: float = 0.0
    """The most the Byzantine peer's weight counted for in an honest reducer's part, over the
    lower median of that part's claims (``AggregationConfig.weight_ratio_limit`` bounds it)."""
    seconds: float = 0.0

    @property
    def byzantine_named(self) -> bool:
        return self.byzantine_peer in self.accused

    @property
    def honest_accused(self) -> set[str]:
        return set(self.accused) - {self.byzantine_peer}


# ---- one collaboration ---------------------------------------------------------------------------


def averager_config(scenario: Scenario) -> AveragerConfig:
    """The plain mean without screening, or the defence."""
    if not scenario.defended:
        return replace(AVERAGING, aggregation=AggregationConfig(method=Method.MEAN, screen=False))
    # the manifest's defaults: CenteredClip, claims bounded at 4 medians
    defence = AggregationConfig(method=Method.CENTERED_CLIP, weight_ratio_limit=WEIGHT_RATIO_LIMIT)
    config = replace(AVERAGING, aggregation=defence)
    if scenario.attack is Attack.LYING_REDUCER:
        from core.averaging.round.checks import VerificationConfig

        # every member checks every part it received: the liar is caught in its first round
        verification = VerificationConfig(enabled=True, parts=TRAINERS * (TRAINERS - 1))
        config = replace(config, verification=verification)
    return config


class _WatchedAverager(Averager):
    """An averager that keeps what its rounds found against others, and whom it would accuse: its
    findings that a peer signs (``RepeatedFindings``: a screen's once it repeats)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.accused: dict[str, set[str]] = {}
        self.found: dict[str, set[str]] = {}
        """Peer -> statistics of every finding, signed or not."""
        self._repeated = RepeatedFindings()
        self._rounds = 0
        self.rounds_with: dict[str, int] = {}
        """Member -> rounds of ours it was in."""
        self.weight_ratios: dict[str, float] = {}
        """Sender -> the most its weight counted for in our part, over the part's lower median
        claim."""

    def observe(self, result: AveragingResult) -> None:
        super().observe(result)
        if len(result.weights) >= 2:
            median = lower_median(list(result.weights.values()))
            for peer, claimed in result.weights.items():
                ratio = result.capped.get(peer, claimed) / median
                key = str(peer)
                self.weight_ratios[key] = max(ratio, self.weight_ratios.get(key, 0.0))
        self._rounds += 1
        for finding in result.findings:
            self.found.setdefault(str(finding.peer), set()).add(finding.statistic)
        held = [Found("", result.group_id, self._rounds, f) for f in result.findings]
        for item in self._repeated.admit(held):
            self.accused.setdefault(str(item.finding.peer), set()).add(item.finding.statistic)
        for member in result.members:
            self.rounds_with[str(member)] = self.rounds_with.get(str(member), 0) + 1


@dataclass
class _Peer:
    host: Host
    dht: DHTNode
    averager: _WatchedAverager
    bridge: TrainingBridge
    model: torch.nn.Module
    optimizer: DedlocOptimizer | None = None


@contextlib.asynccontextmanager
async def _collaboration(make_host: MakeHost, config: AveragerConfig) -> AsyncIterator[list[_Peer]]:
    """Four started peers of one collaboration (its own DHT), closed at the end."""
    peers: list[_Peer] = []
    try:
        for _ in range(TRAINERS):
            host = await make_host(NET)
            dht = DHTNode(HostTransport(host), DHTConfig(rpc_timeout=2.0))
            join = [str(peers[0].host.addresses[0])] if peers else []
            await dht.start(join)
            if join:
                await dht.wait_bootstrapped()
            averager = _WatchedAverager(host, dht, "byzantine", replace(config, compute=1.0))
            peers.append(_Peer(host, dht, averager, TrainingBridge(), fresh_model()))
        yield peers
    finally:
        for peer in reversed(peers):
            if peer.optimizer is not None:
                await peer.optimizer.close()
            await peer.averager.close()
            await peer.bridge.aclose()
            await peer.dht.close()


class _Liars:
    """The lying reducers a run made (one per round in which the liar reduced something)."""

    def __init__(self, misbehaviour: Misbehaviour) -> None:
        self.misbehaviour = misbehaviour
        self.made: list[LyingReducer] = []

    def __call__(self, runner: AllReduce) -> None:
        liar = self.misbehaviour.lie_in(runner)
        if liar is not None:
            self.made.append(liar)

    @property
    def lies(self) -> int:
        return sum(liar.lies for liar in self.made)


async def run_scenario(
    scenario: Scenario,
    epochs: int,
    make_host: MakeHost,
    *,
    config: AveragerConfig | None = None,
) -> Curve:
    """One collaboration of ``TRAINERS`` peers for ``epochs`` epochs; its loss curve."""
    started = time.monotonic()
    curve = Curve(scenario)
    data = held_out()
    clean = reference(epochs)
    async with _collaboration(make_host, config or averager_config(scenario)) as peers:
        byzantine = peers[BYZANTINE]
        curve.byzantine_peer = str(byzantine.host.peer_id)
        for peer in peers:
            optimizer = torch.optim.SGD(peer.model.parameters(), lr=LEARNING_RATE)
            peer.optimizer = DedlocOptimizer(
                TrainingState(peer.model, optimizer),
                PeerLinks.create(peer.averager, peer.bridge),
                # progress is read at every microbatch near the target anyway; the periodic read
                # in between would only cost ten collaborations in one loop their time
                DedlocConfig(target_batch_size=TARGET, average_state_every=0, refresh_interval=1.0),
            )
        attack: GradientAttack | None = None
        liars: _Liars | None = None
        credit_claimed = [0]
        if scenario.attack is not None:
            misbehaviour = Misbehaviour(scenario.attack, scenario.strength, claim=scenario.claim)
            assert byzantine.optimizer is not None
            byzantine.optimizer.claim = scenario.claim
            landed = byzantine.optimizer.landed
            plain_add = landed.add

            def counted_add(epoch: int, samples: int) -> None:
                credit_claimed[0] += samples  # every landed epoch, not only the last ones kept
                plain_add(epoch, samples)

            landed.add = counted_add  # type: ignore[method-assign]
            if scenario.attack.gradients:
                attack = misbehaviour.gradient_attack()
                assert byzantine.optimizer is not None
                byzantine.optimizer.tamper = attack
            else:
                liars = _Liars(misbehaviour)
                byzantine.averager.round_hook = liars
        for peer in peers:
            assert peer.optimizer is not None
            await peer.optimizer.start()
        stop = asyncio.Event()
        losses = {0: evaluate(peers[0].model, data)}

        def measured(model: torch.nn.Module, epoch: int) -> None:
            """After a step: the first honest replica to reach an epoch measures it."""
            if epoch in losses:
                return
            loss = losses[epoch] = evaluate(model, data)
            if not math.isfinite(loss):
                curve.stopped = "diverged"  # every microbatch from now on would be skipped
            elif scenario.defended:
                return  # a defended run's spike may pass: it runs to the end
            elif epoch < len(clean) and loss > DIVERGED * clean[epoch]:
                curve.stopped = "diverged"
            if curve.stopped is not None:
                stop.set()

        async def train(index: int) -> None:
            peer = peers[index]
            optimizer = peer.optimizer
            assert optimizer is not None
            trainer = Trainer(
                peer.model, optimizer, peer.bridge, itertools.repeat(shard(index)), mse
            )
            honest = index != BYZANTINE
            await trainer.run(
                until_epoch=epochs,
                stop=stop,
                on_epoch=(lambda _: measured(peer.model, optimizer.epoch)) if honest else None,
            )
            curve.microbatches += trainer.microbatches
            if not honest:
                curve.byzantine_computed = trainer.microbatches * SHARD
            if honest:
                stop.set()  # one is done: the others need not wait for a round it will not join

        async def interrupt_on_stop() -> None:
            # a trainer waiting for the state hears no ``stop`` between microbatches
            await stop.wait()
            for peer in peers:
                if peer.optimizer is not None:
                    peer.optimizer.interrupt()

        interrupting = asyncio.create_task(interrupt_on_stop(), name="byzantine/interrupt")
        try:
            async with asyncio.timeout(SCENARIO_SECONDS):
                await asyncio.gather(*(train(i) for i in range(TRAINERS)))
        except TimeoutError:
            curve.stopped = "timed out"
        finally:
            stop.set()
            await interrupting
        while len(curve.losses) in losses:  # up to the first epoch no honest replica measured
            curve.losses.append(losses[len(curve.losses)])
        for peer in peers:
            if peer is not byzantine:
                for accused, statistics in peer.averager.accused.items():
                    curve.accused.setdefault(accused, set()).update(statistics)
                curve.rounds_with_byzantine.append(
                    peer.averager.rounds_with.get(curve.byzantine_peer, 0)
                )
                curve.banned_by += byzantine.host.peer_id in peer.averager.bans
                curve.byzantine_weight_ratio = max(
                    curve.byzantine_weight_ratio,
                    peer.averager.weight_ratios.get(curve.byzantine_peer, 0.0),
                )
        curve.byzantine_credit_claimed = credit_claimed[0]
        curve.attacks = attack.rounds if attack is not None else liars.lies if liars else 0
    curve.seconds = time.monotonic() - started
    return curve


async def run_scenarios(
    scenarios: Sequence[Scenario],
    epochs: int,
    make_host: MakeHost | None = None,
    *,
    concurrency: int = CONCURRENCY,
) -> dict[str, Curve]:
    """Each its own collaboration, ``concurrency`` at a time in this event loop."""
    slots = asyncio.Semaphore(concurrency)

    async def one(scenario: Scenario, make: MakeHost) -> Curve:
        async with slots:
            return await run_scenario(scenario, epochs, make)

    async with hosts(make_host) as make:
        curves = await asyncio.gather(*(one(s, make) for s in scenarios))
    return {curve.scenario.name: curve for curve in curves}


@contextlib.asynccontextmanager
async def hosts(make_host: MakeHost | None) -> AsyncIterator[MakeHost]:
    """The caller's ``make_host`` (a test's fixture closes them), or ours, closed at the end."""
    if make_host is not None:
        yield make_host
        return
    made: list[Host] = []

    async def make(config: NetConfig = NET) -> Host:
        host = Host(Identity.generate(), config)
        made.append(host)
        await host.start()
        return host

    try:
        yield make
    finally:
        for host in made:
            await host.close()
