"""The in-memory network's simulated latency: requests take their round trip, nothing is left in flight."""

from __future__ import annotations

import time

from core.dht import DHTConfig, DHTNode
from core.dht.memory import MemoryNetwork
from core.trust.peer_id import PeerID

CONFIG = DHTConfig(refresh_interval=3600, republish_interval=3600)


async def test_each_request_takes_the_round_trip_the_latency_function_gives() -> None:
    asked: list[tuple[PeerID, PeerID]] = []

    def latency(sender: PeerID, target: PeerID) -> float:
        asked.append((sender, target))
        return 0.05

    network = MemoryNetwork()
    first, second = DHTNode(network.transport(), CONFIG), DHTNode(network.transport(), CONFIG)
    await first.start()
    await second.start([str(first.state.transport.addresses()[0])])
    await second.wait_bootstrapped()
    try:
        assert network.in_flight == 0
        assert await second.store("key", "value", time.time() + 60)  # no latency set yet
        assert not asked
        network.latency = latency
        started = time.monotonic()
        found = await first.get("key", latest=True)
        slow = time.monotonic() - started
        assert found is not None
        assert found.value == "value"
        assert slow >= 0.05
        assert (first.peer_id, second.peer_id) in asked
        assert network.in_flight == 0
    finally:
        await first.close()
        await second.close()
