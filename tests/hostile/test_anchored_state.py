"""A stranger who read the code cannot hand out the model nor stall the rounds: the collaboration's
epoch and state are the ones the backbone's key confirmed (``core.training.progress.confirmed``).

A backbone whose key the trainers pin (a manifest's ``access.backbone_keys``) and three or four
trainers land diloco rounds on loopback, in one process. Against them:

- a lone donor serving a poisoned state one epoch ahead, with fresh identities whose records
  announce that epoch: nobody loads it, rounds go on landing, and it loses its standing;
- the same donor serving poisoned bytes under the name of the confirmed state: a newcomer loads
  the confirmed state from the others and accuses it;
- records from fresh identities announcing later epochs (one, many, renewed): no peer tries to
  catch up and every round lands;
- the backbone away for ten rounds: the trainers keep landing them, their quorum confirms them, a
  newcomer joins meanwhile, and the backbone, back from an old state, takes the confirmed one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import numpy as np
import pytest

from core.dht import DHTNode
from core.training.diloco.state import DilocoState
from core.training.participation import STATE_MISMATCH, UNCONFIRMED_EPOCH
from core.training.progress import PeerProgress, ProgressBoard
from core.trust.identity import Identity
from tests.conftest import MakeHost
from tests.training.conftest import start_node
from tests.training.diloco.conftest import DPeer, MakeDPeer, end_rounds, make_dpeer, settle

__all__ = ["make_dpeer"]  # the fixture, used by name

STEPS = 3


class Sybils:
    """Fresh identities, each on a DHT node of its own, renewing a progress record that announces
    ``epoch`` (with ``anchor``) every second until closed."""

    def __init__(self, nodes: list[DHTNode], epoch: Callable[[], int], anchor: str = "") -> None:
        self.boards = [ProgressBoard(dht, "diloco") for dht in nodes]
        self.nodes = nodes
        self.epoch = epoch
        self.anchor = anchor
        self._task = asyncio.create_task(self._renew())

    @property
    def names(self) -> set[str]:
        return {str(dht.peer_id) for dht in self.nodes}

    async def _renew(self) -> None:
        while True:
            await asyncio.gather(*(self._publish(board, dht) for board, dht in self.boards_nodes))
            await asyncio.sleep(1.0)

    @property
    def boards_nodes(self) -> list[tuple[ProgressBoard, DHTNode]]:
        return list(zip(self.boards, self.nodes, strict=True))

    async def _publish(self, board: ProgressBoard, dht: DHTNode) -> None:
        record = PeerProgress(
            str(dht.peer_id), self.epoch(), 400, 80.0, time.time(), anchor=self.anchor
        )
        with contextlib.suppress(Exception):
            await board.publish(record)

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        for dht in self.nodes:
            await dht.close()


MakeSybils = Callable[..., Awaitable[Sybils]]


@pytest.fixture
async def make_sybils(make_host: MakeHost) -> AsyncIterator[MakeSybils]:
    made: list[Sybils] = []

    async def make(join: DPeer, count: int, epoch: Callable[[], int], anchor: str = "") -> Sybils:
        nodes = [(await start_node(make_host, join.address))[1] for _ in range(count)]
        sybils = Sybils(nodes, epoch, anchor)
        made.append(sybils)
        return sybils

    yield make
    for sybils in made:
        await sybils.close()


async def keyed_swarm(make_dpeer: MakeDPeer, trainers: int) -> tuple[Identity, DPeer, list[DPeer]]:
    """A backbone whose key every peer pins, and ``trainers`` trainers; all see each other."""
    key = Identity.generate()
    keys = {str(key.peer_id)}
    aux = await make_dpeer(role="backbone", identity=key, confirmers=keys, lr=0.5)
    made = [await make_dpeer(confirmers=keys, lr=0.5) for _ in range(trainers)]
    await settle([aux, *made])
    return key, aux, made


async def rounds(peers: list[DPeer], count: int, seed: int = 0) -> None:
    for number in range(count):
        for i, peer in enumerate(peers):
            if peer.optimizer.config.role != "backbone":
                await peer.train(STEPS, seed=1000 * seed + 100 * number + i)
        await end_rounds(peers)


def poison(diloco: DilocoState, *, epoch: int, keep_name: bool) -> None:
    """On the training thread: the anchor ruined, at ``epoch``; ``keep_name``: the state still
    claims the digest it had (a donor passing its poison off as the confirmed state)."""
    for values in diloco.anchor:
        np.multiply(values, np.float32(1000.0), out=values)
    diloco.state.epoch = epoch
    if not keep_name:
        diloco.digest = diloco.anchor_digest()


async def until(
    check: Callable[[], bool], seconds: float = 20.0, said: Callable[[], str] = lambda: ""
) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"never happened {said()}"
        await asyncio.sleep(0.1)


def strikes_of(peer: DPeer, bad: set[str]) -> str:
    """What ``peer`` counted against the ``bad`` peers it has not struck (a failure's story)."""
    board = peer.optimizer.board
    left = bad - board.strikes.struck
    return (
        f"not struck: {sorted(left)}; counting: {board.strikes._since}; "
        f"banned: {sorted(left & set(peer.averager.bans.names()))}; "
        f"confirmed: {board.last_confirmed}; records: "
        f"{[(r.peer, r.epoch) for r in peer.optimizer.part.records]}"
    )


async def accusations(peer: DPeer, statistic: str) -> set[str]:
    reported = await peer.optimizer.evidence.fetch()
    return {str(r.evidence.accused) for r in reported if r.evidence.statistic == statistic}


def as_said(peer: DPeer) -> tuple[str, int]:
    """Who confirmed what ``peer`` holds confirmed, and its epoch."""
    confirmed = peer.optimizer.view().confirmed
    return confirmed.by, confirmed.epoch


def same_model(peers: list[DPeer]) -> bool:
    return len({p.anchor() for p in peers}) == 1


async def test_a_lone_donor_ahead_with_fresh_identities_hands_its_state_to_nobody(
    make_dpeer: MakeDPeer, make_sybils: MakeSybils
) -> None:
    _, aux, trainers = await keyed_swarm(make_dpeer, 3)
    keys = aux.optimizer.board.confirmers
    attacker = await make_dpeer(confirmers=keys, lr=0.5)
    honest = [aux, *trainers]
    await settle([*honest, attacker])
    await rounds([*honest, attacker], 2)
    epoch = aux.optimizer.epoch
    assert [p.optimizer.epoch for p in trainers] == [epoch] * 3
    for peer in honest:
        peer.optimizer.board.strikes.grace = 1.0  # a test's seconds, not a swarm's
    await attacker.bridge.run(lambda: poison(attacker.optimizer.diloco, epoch=epoch + 1,
                                             keep_name=False))  # fmt: skip
    attacker.optimizer.mending.mark()
    await attacker.optimizer._announce()  # its record and its state's offer say epoch + 1
    # always the epoch after the confirmed one: the one an honest peer that landed first is at
    sybils = await make_sybils(
        attacker, 3, lambda: aux.optimizer.epoch + 1, attacker.optimizer.diloco.digest
    )
    poisoned = attacker.anchor()

    for number in range(5):
        await rounds(honest, 1, seed=10 + number)
        attacker.optimizer.diloco.state.epoch = aux.optimizer.epoch + 1
        attacker.optimizer.mending.mark()
        await attacker.optimizer._announce()

    assert [p.optimizer.epoch for p in honest] == [epoch + 5] * 4  # every round landed
    assert same_model(honest)
    assert all(p.anchor() != poisoned for p in honest)
    assert all(p.optimizer.view().epoch == epoch + 5 for p in honest)
    bad = {str(attacker.averager.host.peer_id), *sybils.names}
    for peer in trainers:
        await until(
            lambda peer=peer: bad <= peer.optimizer.board.strikes.struck,
            said=lambda peer=peer: strikes_of(peer, bad),
        )
    await until(
        lambda: bad <= aux.optimizer.board.strikes.struck, said=lambda: strikes_of(aux, bad)
    )
    accused: set[str] = set()
    for _ in range(100):
        accused = await accusations(aux, UNCONFIRMED_EPOCH)
        if bad <= accused:
            break
        await asyncio.sleep(0.2)
    assert bad <= accused
    honest_names = {str(p.averager.host.peer_id) for p in honest}
    assert not honest_names & accused


async def test_a_donor_passing_poison_off_as_the_confirmed_state_is_skipped_and_accused(
    make_dpeer: MakeDPeer,
) -> None:
    _, aux, trainers = await keyed_swarm(make_dpeer, 2)
    keys = aux.optimizer.board.confirmers
    attacker = await make_dpeer(confirmers=keys, lr=0.5)
    await settle([aux, *trainers, attacker])
    await rounds([aux, *trainers, attacker], 2)
    epoch = aux.optimizer.epoch
    confirmed = aux.optimizer.diloco.digest
    await attacker.bridge.run(lambda: poison(attacker.optimizer.diloco, epoch=epoch,
                                             keep_name=True))  # fmt: skip
    assert attacker.optimizer.diloco.digest == confirmed  # it claims the confirmed state
    # its packed state is made when first asked: the poisoned bytes under the confirmed name
    attacker.optimizer.links.sharing._snapshot = None

    newcomer = await make_dpeer(confirmers=keys, lr=0.5)

    assert newcomer.optimizer.epoch == epoch
    assert newcomer.anchor() == aux.anchor()
    assert newcomer.optimizer.diloco.digest == confirmed
    name = str(attacker.averager.host.peer_id)
    accused: set[str] = set()
    for _ in range(100):
        accused = await accusations(aux, STATE_MISMATCH)
        if name in accused:
            break
        await asyncio.sleep(0.2)
    assert accused == {name}


@pytest.mark.parametrize(("count", "ahead"), [(1, 5), (6, 1), (3, 40)])
async def test_records_announcing_epochs_nothing_confirmed_never_hold_a_round_back(
    make_dpeer: MakeDPeer, make_sybils: MakeSybils, count: int, ahead: int
) -> None:
    _, aux, trainers = await keyed_swarm(make_dpeer, 3)
    peers = [aux, *trainers]
    await rounds(peers, 1)
    epoch = aux.optimizer.epoch
    tries: list[str] = []
    for peer in peers:
        real = peer.optimizer.mending.catch_up

        async def spy(limit: float | None = None, real: Any = real, peer: DPeer = peer) -> bool:
            # a peer whose round missed its group on a loaded machine catches up with the
            # confirmed epoch, as it should: only a wait for an epoch nobody confirmed counts
            if peer.optimizer.view().confirmed.epoch <= peer.optimizer.epoch:
                tries.append(peer.address)
            caught: bool = await real(limit)
            return caught

        peer.optimizer.mending.catch_up = spy  # type: ignore[method-assign]
    await make_sybils(trainers[0], count, lambda: epoch + 1 + ahead)
    await until(lambda: all(len(p.optimizer.view().peers) >= 4 + count for p in peers))

    await rounds(peers, 4, seed=2)
    landed = [p.optimizer.epoch for p in peers]
    if landed != [epoch + 4] * 4:
        # a round that missed its group on a loaded machine (its work carried): the peer takes
        # the confirmed state at its next round's end and lands with the others
        assert max(landed) == epoch + 4, landed  # the rounds themselves were not held back
        await rounds(peers, 1, seed=3)
        assert [p.optimizer.epoch for p in peers] == [epoch + 5] * 4
    assert tries == []  # nobody waited for a state nobody confirmed
    assert same_model(peers)


async def test_without_the_backbone_the_members_confirm_and_it_takes_their_state_back(
    make_dpeer: MakeDPeer,
) -> None:
    key, aux, trainers = await keyed_swarm(make_dpeer, 3)
    keys = aux.optimizer.board.confirmers
    await rounds([aux, *trainers], 2)
    left_at = aux.optimizer.epoch
    await until(lambda: as_said(trainers[0]) == ("backbone", left_at))
    await aux.stop()

    await rounds(trainers, 5, seed=3)
    assert [p.optimizer.epoch for p in trainers] == [left_at + 5] * 3
    await until(lambda: trainers[0].optimizer.view().confirmed.epoch == left_at + 5)
    view = trainers[0].optimizer.view()
    assert view.confirmed.by == "members"
    assert view.confirmed.digest == trainers[0].optimizer.diloco.digest
    newcomer = await make_dpeer(confirmers=keys, lr=0.5)  # joins while the backbone is away
    assert newcomer.optimizer.epoch == left_at + 5
    assert newcomer.anchor() == trainers[0].anchor()
    await settle([*trainers, newcomer])
    await rounds([*trainers, newcomer], 5, seed=4)
    assert [p.optimizer.epoch for p in [*trainers, newcomer]] == [left_at + 10] * 4

    # back with a state ten rounds old (a fresh model here): it takes the confirmed one
    back = await make_dpeer(role="backbone", identity=key, confirmers=keys, lr=0.5)
    assert back.optimizer.epoch == left_at + 10
    assert back.anchor() == trainers[0].anchor()
    everyone = [back, *trainers, newcomer]
    await settle(everyone)
    await rounds(everyone, 1, seed=5)
    assert [p.optimizer.epoch for p in everyone] == [left_at + 11] * 5
    assert same_model(everyone)
    # the members' quorum may confirm the round before the backbone's word of it is read
    await until(lambda: as_said(trainers[0]) == ("backbone", left_at + 11))
    confirmed = trainers[0].optimizer.view().confirmed
    assert confirmed.digest == back.optimizer.diloco.digest
    # the trainers it landed the round with (its records carry its word at once; the members
    # come with the stored confirmation, read every few reads)
    await until(lambda: len(trainers[0].optimizer.view().confirmed.members) == 4)
