"""The engine reports how others reach its peer: in its state, as an event when the verdict
changes, and in the diagnostics."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from core.api import AttachRequest, Network, NetworkChanged
from core.engine.views import network_lines, network_view
from core.worker.events import PeerNetwork, PeerWaiting
from tests.engine.standin import StandInPeer
from tests.support.engine import Running, until
from tests.support.leaks import poll_until

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo" / "project.toml"
BEHIND = PeerNetwork("private", None, 1_700_000_000.0, peers=4, direct=2, punched=1, relayed=1)


def test_the_peers_verdict_reads_as_the_apis_network() -> None:
    assert network_view(BEHIND) == Network("private", None, 1_700_000_000.0, 4, 2, 1, 1)
    assert network_view(PeerNetwork("something new")).reachability == "unknown"


def test_the_diagnostics_lines_name_each_fact() -> None:
    lines = network_lines(
        {
            "state": "public",
            "public_address": "/ip4/203.0.113.7/tcp/4001/p2p/12D3KooWx",
            "checked_at": 1.0,
            "checks": 2,
            "reasons": ["Qm…ab reached us at 203.0.113.7:4001"],
            "dialback_peers": 1,
            "needed": 1,
            "observed": [{"ip": "203.0.113.7", "observers": 2, "peers": 3, "open": 3}],
            "answers": [
                {
                    "peer": "12D3KooWy",
                    "reachable": True,
                    "address": "203.0.113.7:4001",
                    "age_s": 5.0,
                }
            ],
        }
    )
    assert (
        lines[0] == "reachability: public (public address: /ip4/203.0.113.7/tcp/4001/p2p/12D3KooWx)"
    )
    assert "observed at 203.0.113.7 by 2 network(s), 3 peer(s)" in lines
    assert "12D3KooWy reached 203.0.113.7:4001 (5 s ago)" in lines
    assert lines[-1] == "last check: Qm…ab reached us at 203.0.113.7:4001"


async def test_the_state_the_event_and_the_diagnostics_carry_the_network(
    engine: Running, peers: list[StandInPeer]
) -> None:
    client = engine.client
    assert (await client.state()).network is None  # no peer yet
    await client.attach(AttachRequest(str(DEMO)))
    await client.set_settings({"max_other_cpu_percent": 100, "cpu_when_in_use": "pause"})
    await client.start()
    await until(client, lambda s: s.state == "running")
    (peer,) = peers
    state = await client.state()
    assert state.network == Network()  # checking
    peer.network_now = BEHIND
    peer.on_event(BEHIND)  # the peer's monitor reached a verdict
    state = await client.state()
    assert state.network == network_view(BEHIND)

    async def network_events() -> list[Any]:
        return [
            e.data
            for e in engine.daemon.engine.events.recent()
            if isinstance(e.data, NetworkChanged)
        ]

    (event,) = await poll_until(network_events, bool)
    assert event.network.reachability == "private"
    assert event.network.direct == 2

    peer.reachability = SimpleNamespace(
        diagnostics=lambda: {"state": "private", "reasons": ["Qm…ab could not reach us"]}
    )
    diagnostics = await client.diagnostics()
    assert diagnostics.network[0].startswith("reachability: private")
    assert diagnostics.network[-1] == "last check: Qm…ab could not reach us"


async def test_a_peer_waiting_for_the_collaboration_makes_the_engine_wait(
    engine: Running, peers: list[StandInPeer]
) -> None:
    """Its peer cannot load the state: the engine says so at once (the event wakes it), never
    "Contributing", and contributes again as soon as the wait is over."""
    client = engine.client
    await client.attach(AttachRequest(str(DEMO)))
    await client.set_settings({"max_other_cpu_percent": 100, "cpu_when_in_use": "pause"})
    await client.start()
    await until(client, lambda s: s.state == "running")
    (peer,) = peers
    peer.waiting_for = "no peer could give the state of epoch 37"
    peer.on_event(PeerWaiting(peer.waiting_for))
    state = await until(client, lambda s: s.state == "waiting")
    assert state.code == "collaboration"
    assert state.reason == "Waiting for the collaboration: no peer could give the state of epoch 37"
    peer.waiting_for = None
    peer.on_event(PeerWaiting(None))
    await until(client, lambda s: s.state == "running")
