"""A moderated swarm above the connection level: DHT, progress records and averaging."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import numpy as np
import pytest

from core.averaging import Averager, MatchmakingError
from core.dht import DHTConfig, DHTNode, HostTransport
from core.dht.ids import key_id
from core.dht.records import owner_marker
from core.net import Host, Identity, NetConfig
from core.net.errors import NetError
from core.net.host.gate import AccessGate
from core.training.progress import HeldOut, PeerProgress, ProgressBoard
from core.trust.passes import AccessDenied, issue_pass
from core.util.errors import BarnraiseError
from core.util.msgpack_codec import unpack
from tests.averaging.conftest import QUICK, random_tensors
from tests.conftest import MakeHost

PROJECT = "moderated-swarm"
NET = NetConfig(dial_timeout=2.0, handshake_timeout=2.0, call_timeout=5.0, close_grace=0.2)
DHT = DHTConfig(rpc_timeout=2.0, lookup_timeout=5.0)


@dataclass
class Member:
    host: Host
    dht: DHTNode
    board: ProgressBoard
    averager: Averager

    @property
    def address(self) -> str:
        return str(self.host.addresses[0])


Join = Callable[..., Awaitable[Member]]


@pytest.fixture
def project_key() -> Identity:
    return Identity.generate()


def gate_for(project_key: Identity, identity: Identity, username: str | None) -> AccessGate:
    gate = AccessGate(PROJECT, project_key.peer_id, identity.peer_id)
    if username is not None:
        gate.set_pass(
            issue_pass(
                project_key, PROJECT, username, identity.peer_id, issued=time.time(), lifetime=60
            )
        )
    return gate


@pytest.fixture
async def join(make_host: MakeHost, project_key: Identity) -> AsyncIterator[Join]:
    members: list[Member] = []

    async def make(
        username: str | None, initial: list[str], *, gate: AccessGate | None = None
    ) -> Member:
        identity = Identity.generate()
        access = gate if gate is not None else gate_for(project_key, identity, username)
        host = await make_host(NET, identity=identity, access=access)
        dht = DHTNode(HostTransport(host), DHT)
        try:
            await dht.start(initial)
        except BaseException:
            await dht.close()
            raise
        member = Member(
            host,
            dht,
            ProgressBoard(dht, PROJECT, access=access),
            Averager(host, dht, PROJECT, QUICK),
        )
        members.append(member)
        return member

    yield make
    for member in members:
        await member.averager.close()
        await member.dht.close()


def progress(member: Member, samples: int) -> PeerProgress:
    return PeerProgress(str(member.host.peer_id), 0, samples, 10.0, time.time())


async def test_an_unauthorized_peer_cannot_join_the_dht(join: Join, make_host: MakeHost) -> None:
    first = await join("alice", [])
    second = await join("bob", [first.address])
    assert await second.dht.store("k", "v", time.time() + 60)
    intruder = DHTNode(HostTransport(await make_host(NET)), DHT)  # an open peer: no pass at all
    try:
        with pytest.raises(BarnraiseError, match=r"no initial peer|could not"):
            await intruder.start([first.address])
        assert await intruder.get("k") is None
    finally:
        await intruder.close()
    assert intruder.peer_id not in first.dht.table
    assert intruder.peer_id not in second.dht.table
    assert second.host.peer_id in first.dht.table


async def test_progress_records_carry_passes_and_forgeries_are_refused(
    join: Join, project_key: Identity
) -> None:
    alice = await join("alice", [])
    mallory = await join("mallory", [alice.address])
    assert await alice.board.publish(progress(alice, 48))
    assert await mallory.board.publish(progress(mallory, 16))
    seen = {r.peer: r for r in await alice.board.fetch()}
    assert seen[str(mallory.host.peer_id)].username == "mallory"
    assert seen[str(alice.host.peer_id)].username == "alice"
    # mallory reports her samples under alice's pass: refused by every node that checks
    assert alice.host.access is not None
    assert alice.host.access.own_pass is not None
    forged = PeerProgress(
        str(mallory.host.peer_id), 0, 10_000, 10.0, time.time(),
        access=alice.host.access.own_pass,
    )  # fmt: skip
    key, subkey = f"{PROJECT}.progress", owner_marker(mallory.host.peer_id)
    with pytest.raises(BarnraiseError, match="belongs to another peer key"):
        await mallory.dht.store(key, forged.to_wire(), time.time() + 30, subkey=subkey)
    # a record without any pass is refused as well
    bare = progress(mallory, 10_000).to_wire()
    with pytest.raises(BarnraiseError, match="no access pass"):
        await mallory.dht.store(key, bare, time.time() + 30, subkey=subkey)
    # a node that skips the checks itself still cannot make others keep or believe its forgery
    mallory.dht.rules.schemas.clear()
    await mallory.dht.store(key, forged.to_wire(), time.time() + 30, subkey=subkey)
    held = alice.dht.storage.get(key_id(key))
    assert held is not None
    assert unpack(held.subkeys[subkey].data)[1] == 16  # her honest record, not the forgery
    seen = {r.peer: r for r in await alice.board.fetch()}
    assert seen[str(mallory.host.peer_id)].samples == 16
    # once mallory is revoked, her records are no longer believed either
    assert alice.host.access is not None
    alice.host.access.set_revoked({mallory.host.peer_id})
    assert str(mallory.host.peer_id) not in {r.peer for r in await alice.board.fetch()}


async def test_the_backbones_record_carries_its_evaluation_after_its_pass(join: Join) -> None:
    alice = await join("alice", [])
    backbone = await join("organizer", [alice.address])
    backbone.board.evaluated(HeldOut(4, 3.5, 0.4, 64))
    backbone.board.evaluated(HeldOut(3, 9.0, 0.1, 64))  # an older epoch's never replaces it
    aux = PeerProgress(str(backbone.host.peer_id), 5, 0, 0.0, time.time(), "backbone")
    assert await backbone.board.publish(aux)
    seen = {r.peer: r for r in await alice.board.fetch()}[aux.peer]
    assert (seen.username, seen.role, seen.held_out) == (
        "organizer",
        "backbone",
        HeldOut(4, 3.5, 0.4, 64),
    )
    # its record when it leaves carries none
    assert await backbone.board.withdraw(aux)
    seen = {r.peer: r for r in await alice.board.fetch()}[aux.peer]
    assert (seen.role, seen.held_out) == ("left", None)
    # without the pass before it, every node that checks refuses the record
    key, subkey = f"{PROJECT}.progress", owner_marker(backbone.host.peer_id)
    bare = [*aux.to_wire(), None, HeldOut(4, 3.5, 0.4, 64).to_wire()]
    with pytest.raises(BarnraiseError, match="no access pass"):
        await backbone.dht.store(key, bare, time.time() + 30, subkey=subkey)


async def test_a_peer_without_a_pass_cannot_publish_progress(join: Join) -> None:
    alice = await join("alice", [])
    gate = AccessGate(PROJECT, Identity.generate().peer_id, alice.host.peer_id)
    with pytest.raises(AccessDenied, match="no access pass yet"):
        await ProgressBoard(alice.dht, "other", access=gate).publish(progress(alice, 1))


async def test_an_unauthorized_peer_cannot_join_averaging(
    join: Join, project_key: Identity, make_host: MakeHost
) -> None:
    alice = await join("alice", [])
    bob = await join("bob", [alice.address])
    intruder_host = await make_host(NET)
    intruder_dht = DHTNode(HostTransport(intruder_host), DHT)
    intruder = Averager(intruder_host, intruder_dht, PROJECT, QUICK)
    # the intruder knows alice's address but no DHT node will talk to it
    intruder_host.add_addresses(alice.host.peer_id, alice.host.addresses)
    tensors = [random_tensors(i) for i in range(3)]
    expected = [np.mean([t[j] for t in tensors[:2]], axis=0) for j in range(2)]
    try:
        results = await asyncio.gather(
            alice.averager.average(tensors[0], round_key="r", timeout=2.0, target_size=3),
            bob.averager.average(tensors[1], round_key="r", timeout=2.0, target_size=3),
            intruder.average(tensors[2], round_key="r", timeout=2.0, target_size=3),
            return_exceptions=True,
        )
    finally:
        await intruder.close()
        await intruder_dht.close()
    assert isinstance(results[2], MatchmakingError | NetError), results[2]
    for result in results[:2]:
        assert not isinstance(result, BaseException), result
        assert sorted(result.members) == sorted([alice.host.peer_id, bob.host.peer_id])
        assert result.complete
    for mine in tensors[:2]:
        for got, want in zip(mine, expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
