"""Bandwidth limits: the token bucket's arithmetic, and limits that really hold on a loopback transfer."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest

from core.net import CallContext, NetConfig, Stream, StreamMethod
from core.net.wire.bandwidth import TokenBucket
from core.util.clock import FakeClock
from core.util.errors import ConfigError
from core.util.wire import WireMessage
from tests.conftest import FAST, MakeHost


@dataclass(frozen=True)
class Empty(WireMessage):
    pass


def test_the_bucket_lends_a_burst_then_charges_time_for_the_debt() -> None:
    clock = FakeClock(monotonic_start=100.0)
    bucket = TokenBucket(1000.0, burst_seconds=0.1, clock=clock)
    assert bucket.take(50) == pytest.approx(0.05)  # it starts empty: 50 bytes of debt
    clock.advance(1.0)
    assert bucket.take(100) == 0.0  # the refill is capped at one burst, not 1000 bytes
    assert bucket.take(300) == pytest.approx(0.3)
    clock.advance(0.3)
    assert bucket.take(0) == pytest.approx(0.0, abs=1e-9)


def test_unlimited_and_changed_limits() -> None:
    clock = FakeClock(monotonic_start=100.0)
    bucket = TokenBucket(None, clock=clock)
    assert bucket.take(10**12) == 0.0
    bucket.set_rate(500.0)
    assert bucket.take(1000) == pytest.approx(2.0)
    bucket.set_rate(None)
    assert bucket.take(1000) == 0.0
    for bad in (0.0, -5.0, float("nan")):
        with pytest.raises(ConfigError, match="positive number"):
            bucket.set_rate(bad)
    with pytest.raises(ConfigError, match="upload_limit"):
        NetConfig(upload_limit=0)


@pytest.mark.parametrize("limited", ["upload_limit", "download_limit"])
async def test_a_transfer_takes_at_least_as_long_as_the_limit_says(
    make_host: MakeHost, limited: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1.5 MB at 3 MB/s cannot take less than 0.45 s, whichever side is limited (a lower bound: a
    busy machine only adds to it); once the limits are lifted, no transfer waits on them."""

    sink = StreamMethod("test.sink", Empty, Empty)
    size = 1_500_000
    rate = 3_000_000.0
    received = bytearray(size)

    async def absorb(ctx: CallContext, request: Any, stream: Stream) -> Empty:
        await stream.recv_data_into(received)
        return Empty()

    config = replace(FAST, stream_chunk_bytes=64 * 1024, socket_buffer_bytes=64 * 1024)
    limited_config = replace(config, **{limited: rate})
    if limited == "upload_limit":
        server, client = await make_host(config), await make_host(limited_config)
    else:
        server, client = await make_host(limited_config), await make_host(config)
    server.router.add_stream(sink, absorb)
    payload = np.random.default_rng(0).integers(0, 255, size, dtype=np.uint8)
    waits: list[float] = []  # what the buckets charged, in seconds of waiting
    sizes: list[int] = []  # how many bytes each charge of a limited bucket was for
    take = TokenBucket.take

    def charging(self: TokenBucket, size: int) -> float:
        if self.rate is not None:
            sizes.append(size)
        waits.append(take(self, size))
        return waits[-1]

    monkeypatch.setattr(TokenBucket, "take", charging)
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with client.open_stream(server.addresses[0], sink, Empty()) as call:
        await call.stream.send_data(payload)
        await call.result()
    took = loop.time() - started
    assert bytes(received) == payload.tobytes()
    # a full bucket may lend one burst (0.05 s of traffic) up front; everything else waits its turn,
    # except that a download is paced by pausing the reads after each one: the debt of the last read
    # is never waited for, since no read follows it
    unpaid = max(sizes) if limited == "download_limit" else 0
    assert unpaid <= 2 * 64 * 1024, unpaid  # one read: at most about the socket's buffer
    assert took >= (size - 0.05 * rate - unpaid) / rate, took
    assert any(waits)  # and it was the limit that made it wait

    client.set_bandwidth_limits(None, None)
    server.set_bandwidth_limits(None, None)
    waits.clear()
    received[:] = bytes(size)
    async with client.open_stream(server.addresses[0], sink, Empty()) as call:
        await call.stream.send_data(payload)
        await call.result()
    assert bytes(received) == payload.tobytes()
    assert waits  # the buckets were asked, and charged nothing
    assert not any(waits)
