"""ServerFaults: the configured rates come out over many requests, a failed request answers
UnavailableError, and a delayed request does not hold back the server's other calls."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator

import pytest
import torch

from core.moe.remote import call_expert
from core.moe.server.experts import ExpertSpec
from core.moe.server.faults import ServerFaults
from core.moe.server.server import ExpertServer
from core.net.errors import UnavailableError
from core.worker.bridge import TrainingBridge
from tests.conftest import MakeHost

SPEC = ExpertSpec(kind="linear", hidden=4, optimizer="sgd", lr=0.1, max_batch=16)


@pytest.fixture
async def bridge() -> AsyncIterator[TrainingBridge]:
    bridge = TrainingBridge("faults-test")
    yield bridge
    await bridge.aclose()


def test_rates_over_many_requests_match_the_configuration() -> None:
    n, mean, rate = 20_000, 0.1, 0.1
    faults = ServerFaults(mean_latency=mean, failure_rate=rate, seed=7)
    draws = [faults.draw() for _ in range(n)]
    failed = sum(d.fails for d in draws) / n
    latency = sum(d.latency for d in draws) / n
    # five standard errors: a correct sampler is outside these bounds about once in 1.7 million
    assert abs(failed - rate) < 5 * math.sqrt(rate * (1 - rate) / n)
    assert abs(latency - mean) < 5 * mean / math.sqrt(n)  # an exponential's sd is its mean
    # exponential, not merely the right mean: P(latency > mean) = 1/e (0.5 for a uniform delay)
    above = sum(d.latency > mean for d in draws) / n
    assert abs(above - math.exp(-1)) < 5 * math.sqrt(0.25 / n)
    assert (faults.requests, faults.failures) == (n, sum(d.fails for d in draws))
    assert faults.total_latency == pytest.approx(latency * n)
    # the same seed, the same faults; no latency and no failures when not asked for
    twin = ServerFaults(mean_latency=mean, failure_rate=rate, seed=7)
    assert [twin.draw() for _ in range(100)] == draws[:100]
    quiet = ServerFaults()
    assert {quiet.draw() for _ in range(100)} == {quiet.draw()}
    assert not quiet.draw().fails
    assert quiet.draw().latency == 0
    with pytest.raises(ValueError, match="failure rate"):
        ServerFaults(failure_rate=1.5)
    with pytest.raises(ValueError, match="mean latency"):
        ServerFaults(mean_latency=-1)


async def test_a_failed_request_answers_unavailable_before_joining_the_pool(
    make_host: MakeHost, bridge: TrainingBridge
) -> None:
    host = await make_host()
    faults = ServerFaults(failure_rate=1.0, seed=1)
    server = ExpertServer(host, bridge, [SPEC.backend("g.0")], faults=faults)
    await server.start()
    client = await make_host()
    for method, tensors in (
        ("forward", [torch.randn(3, 4)]),
        ("backward", [torch.randn(3, 4), torch.randn(3, 4)]),
    ):
        with pytest.raises(UnavailableError, match="injected fault"):
            await call_expert(client, host.addresses[0], "g.0", method, tensors)
    assert faults.failures == faults.requests == 2
    assert all(pool.batches == 0 for pool in server.pools.values())
    assert server.backends["g.0"].updates == 0
    await server.close()


async def test_delays_are_per_request_and_do_not_hold_back_other_calls(
    make_host: MakeHost, bridge: TrainingBridge
) -> None:
    calls, mean, seed = 8, 0.15, 3
    twin = ServerFaults(mean, 0.0, seed)
    expected = sorted(twin.draw().latency for _ in range(calls))
    # the seed gives delays whose sum is far above their maximum: serialised calls would show it
    assert sum(expected) > expected[-1] + 0.5
    host = await make_host()
    server = ExpertServer(host, bridge, [SPEC.backend("g.1")])
    await server.start()
    client = await make_host()
    x = torch.randn(2, 4)
    await call_expert(client, host.addresses[0], "g.1", "forward", [x])  # connected, undelayed
    faults = server.faults = ServerFaults(mean_latency=mean, seed=seed)
    loop = asyncio.get_running_loop()
    start = loop.time()
    await asyncio.gather(
        *(call_expert(client, host.addresses[0], "g.1", "forward", [x]) for _ in range(calls))
    )
    elapsed = loop.time() - start
    assert faults.total_latency == pytest.approx(sum(expected))
    assert elapsed >= expected[-1]  # the slowest call really waited its delay
    assert elapsed < sum(expected) - 0.25  # and the delays overlapped instead of queueing
    await server.close()
