"""ExpertHost on loopback with a backbone DHT node: a server dies mid-training without a last save
and a second one, started with its uids and its checkpoint folder, goes on from the last saved
state, found by trainers through the DHT; a paused server answers "busy" and stops announcing.
The make_host fixture fails a test that leaves a task or a socket behind."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from core.dht import DHTConfig, DHTNode, HostTransport
from core.moe.announce import freshest, get_experts
from core.moe.remote import RemoteExpert
from core.moe.server.checkpoints import ExpertCheckpoints
from core.moe.server.events import ExpertsEvent, ExpertsReady, ExpertsStopped
from core.moe.server.experts import ExpertSpec
from core.moe.server.runtime import ExpertHost, ExpertHostSettings
from core.net import Host
from core.net.errors import ResourceExhaustedError
from core.project import DmoeManifest, parse_dmoe_manifest
from tests.conftest import MakeHost
from tests.support.leaks import wait_until
from tests.support.small_dmoe import MANIFEST

UID = "ffn.1.0"


@dataclass
class Peer:
    host: Host
    dht: DHTNode


@pytest.fixture
async def backbone(make_host: MakeHost) -> AsyncIterator[Peer]:
    host = await make_host()
    dht = DHTNode(HostTransport(host), DHTConfig())
    await dht.start([])
    yield Peer(host, dht)
    await dht.close()


@pytest.fixture
async def trainer(make_host: MakeHost, backbone: Peer) -> AsyncIterator[Peer]:
    host = await make_host()
    dht = DHTNode(HostTransport(host), DHTConfig(client_mode=True))
    await dht.start([str(backbone.host.addresses[0])])
    yield Peer(host, dht)
    await dht.close()


class Server:
    """An ExpertHost with its events, closed at the end of the test whatever happens."""

    def __init__(self, manifest: DmoeManifest, backbone: Peer, **settings: Any) -> None:
        self.events: list[ExpertsEvent] = []
        self.host = ExpertHost(
            ExpertHostSettings(
                manifest, initial_peers=(str(backbone.host.addresses[0]),), **settings
            ),
            self.events.append,
        )

    @property
    def ready(self) -> ExpertsReady:
        ready = self.events[0]
        assert isinstance(ready, ExpertsReady)
        return ready


@pytest.fixture
async def servers() -> AsyncIterator[list[Server]]:
    made: list[Server] = []
    yield made
    for server in made:
        await server.host.close(save=False)


def announced(server: Server) -> bool:
    announcer = server.host.announcer
    return announcer is not None and announcer.rounds > 0


async def learn(trainer: Peer, address: str, steps: int) -> None:
    remote = RemoteExpert(trainer.host, address, UID, timeout=10)
    for _ in range(steps):
        x = torch.randn(4, 8)
        (out,) = await remote.forward([x])
        await remote.backward([x], [torch.randn_like(out)])


async def test_a_killed_server_is_taken_over_from_its_last_checkpoint(
    tmp_path: Path, make_host: MakeHost, backbone: Peer, trainer: Peer, servers: list[Server]
) -> None:
    manifest = parse_dmoe_manifest(MANIFEST)
    folder = tmp_path / "shared-checkpoints"
    first = Server(manifest, backbone, uids=("ffn.1.*",), checkpoints=folder)
    servers.append(first)
    await first.host.start()
    assert first.ready.uids == ["ffn.1.0", "ffn.1.1"]
    assert first.ready.restored == {}
    await wait_until(lambda: announced(first))
    assert await get_experts(trainer.dht, [UID]) == {UID: first.ready.address}
    await learn(trainer, first.ready.address, 2)
    saver = first.host.saver
    assert saver is not None
    await wait_until(lambda: saver.saves == 1)  # 2 updates: checkpoint_updates says save
    await learn(trainer, first.ready.address, 1)  # one more that no checkpoint holds
    assert first.host.experts[0].updates == 3
    await first.host.close(save=False)  # killed: no last save
    assert not any(isinstance(event, ExpertsStopped) and event.saved for event in first.events)

    store = ExpertCheckpoints(folder)
    (newest,) = store.files(UID)
    saved = torch.load(newest, weights_only=True)
    assert saved["updates"] == 2

    second = Server(manifest, backbone, uids=(UID,), checkpoints=folder)
    servers.append(second)
    await second.host.start()
    assert second.ready.restored == {UID: 2}
    expert = second.host.experts[0]
    for name, value in expert.module.state_dict().items():
        assert torch.equal(value, saved["module"][name]), name
    state = expert.optimizer.state_dict()
    assert state["param_groups"] == saved["optimizer"]["param_groups"]
    for index, entry in saved["optimizer"]["state"].items():
        for key, value in entry.items():
            assert torch.equal(state["state"][index][key], value), (index, key)

    # trainers find the new server through the DHT: its announcement is newer, so a trainer that
    # joins now finds it at once, and one that looked the expert up before finds it asking for
    # the latest record (its node keeps the old one it fetched until that expires, at most the
    # announcement's ttl)
    await wait_until(lambda: announced(second))
    newcomer = await make_host()
    newcomer_dht = DHTNode(HostTransport(newcomer), DHTConfig(client_mode=True))
    try:
        await newcomer_dht.start([str(backbone.host.addresses[0])])
        assert await get_experts(newcomer_dht, [UID]) == {UID: second.ready.address}
    finally:
        await newcomer_dht.close()
    latest = await trainer.dht.get(UID, latest=True)
    assert latest is not None
    assert freshest(latest.value) == second.ready.address
    reference = ExpertSpec("ffn", 8, "adam", 0.01, 16).module(UID)
    reference.load_state_dict(saved["module"])
    x = torch.randn(3, 8)
    (out,) = await RemoteExpert(trainer.host, second.ready.address, UID).forward([x])
    torch.testing.assert_close(out, reference(x).detach())
    await learn(trainer, second.ready.address, 1)
    assert expert.updates == 3  # it goes on counting from the checkpoint
    await second.host.close()  # a clean stop saves what it learned
    assert second.events[-1] == ExpertsStopped([UID])
    assert torch.load(store.files(UID)[0], weights_only=True)["updates"] == 3


async def test_a_paused_server_answers_busy_stops_announcing_and_resumes(
    tmp_path: Path, backbone: Peer, trainer: Peer, servers: list[Server]
) -> None:
    manifest = parse_dmoe_manifest(MANIFEST)
    server = Server(manifest, backbone, count=2, checkpoints=tmp_path / "ck")
    servers.append(server)
    await server.host.start()
    assert len(server.ready.uids) == 2
    address = server.ready.address
    remote = RemoteExpert(trainer.host, address, server.ready.uids[0], timeout=10)
    x = torch.randn(2, 8)
    await remote.forward([x])
    assert server.host.served.forward_samples == 2

    await server.host.pause()
    assert not server.host.announcing
    with pytest.raises(ResourceExhaustedError, match="busy: paused"):
        await remote.forward([x])
    with pytest.raises(ResourceExhaustedError, match="busy: paused"):
        await remote.backward([x], [torch.ones(2, 8)])
    assert server.host.experts[0].updates == 0
    assert server.host.served.samples == 2  # refused work is not counted
    assert server.host.progress()["samples_per_second"] == 0.0

    await server.host.resume()
    assert server.host.announcing
    await remote.backward([x], [torch.ones(2, 8)])
    assert server.host.served.backward_samples == 2
    assert server.host.progress()["samples"] == 4
    # a second server asking for free slots sees the first one's announced again
    taken = set(server.ready.uids)
    await wait_until(lambda: announced(server))
    other = Server(manifest, backbone, count=2)
    servers.append(other)
    await other.host.start()
    assert taken.isdisjoint(other.ready.uids)
