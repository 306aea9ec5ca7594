"""Groups of averagers on real loopback connections, in one process."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace

import numpy as np
import pytest

from core.averaging import Averager, AveragerConfig
from core.dht import DHTConfig, DHTNode, HostTransport
from core.net import NetConfig
from tests.conftest import MakeHost
from tests.support.leaks import HANG_GUARD

# connecting on loopback takes milliseconds, and fails at once if nobody listens: the timeouts only
# guard against a hang (a busy machine's TLS handshakes can take seconds)
NET = NetConfig(dial_timeout=20.0, handshake_timeout=20.0, call_timeout=10.0, close_grace=0.2)
QUICK = AveragerConfig(
    min_matchmaking_time=0.3,
    max_matchmaking_time=3.0,
    sender_timeout=0.6,
    reducer_timeout=1.5,
    allreduce_timeout=8.0,
    request_timeout=2.0,
    chunk_bytes=4096 * 4,
)
"""For rounds in which members fail: the others give up on them quickly."""
PATIENT = replace(
    QUICK,
    max_matchmaking_time=20.0,
    sender_timeout=10.0,
    reducer_timeout=20.0,
    allreduce_timeout=HANG_GUARD,
    request_timeout=10.0,
)
"""For rounds in which every member is healthy: the timeouts only guard against a hang (on a busy
machine, encoding, sending and finding each other take seconds, and that is no failure)."""

MakeAveragers = Callable[..., Awaitable[list[Averager]]]


@pytest.fixture
async def make_averagers(make_host: MakeHost) -> AsyncIterator[MakeAveragers]:
    """``await make_averagers(n, config)``: n averagers sharing one DHT, closed at the end."""
    made: list[tuple[Averager, DHTNode]] = []

    async def make(
        count: int,
        config: AveragerConfig = QUICK,
        *,
        configs: Sequence[AveragerConfig] | None = None,
        prefix: str = "test",
    ) -> list[Averager]:
        hosts = [await make_host(NET) for _ in range(count)]
        first = str(hosts[0].addresses[0]) if not made else str(made[0][0].host.addresses[0])
        averagers = []
        for index, host in enumerate(hosts):
            dht = DHTNode(HostTransport(host), DHTConfig(rpc_timeout=2.0))
            await dht.start([first] if (index or made) else [])
            averager = Averager(host, dht, prefix, configs[index] if configs else config)
            made.append((averager, dht))
            averagers.append(averager)
        for averager in averagers:
            await averager.dht.wait_bootstrapped()
        return averagers

    yield make
    for averager, dht in made:
        await averager.close()
        await dht.close()


def random_tensors(
    seed: int, shapes: Sequence[tuple[int, ...]] = ((1000, 7), (33,))
) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for shape in shapes]
