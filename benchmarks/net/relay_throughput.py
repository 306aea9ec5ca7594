"""Relay benchmark: one stream's throughput direct versus through a relay, side by side.

    python -m benchmarks.net.relay_throughput --json out.json [--mbytes 200] [--repeats 3]

Three Hosts on loopback in one process and one event loop: a sender, a receiver that also holds a
reservation on a relay, and the relay. The sender streams ``--mbytes`` MB into a preallocated buffer
on the receiver, once over a direct TLS connection and once over a relayed one (TLS end to end,
the relay pumping ciphertext between its two connections). Runs alternate so that noise hits both
alike; figures are medians, MB = 10^6 bytes. Everything shares one CPU core here, so the relayed
figure is a floor: the relay's pumping and both TLS layers compete for the same loop.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.kit.harness import emit
from core.net import CallContext, Host, Identity, NetConfig, Stream
from core.net.relay.client import RelayClient
from core.net.relay.dialer import RelayDialer
from core.net.relay.limits import RelayLimits
from core.net.relay.service import RelayService
from core.net.wire.connection import Connection

MB = 1_000_000
CONFIG = NetConfig(call_timeout=600)


async def send(conn: Connection, payload: memoryview) -> float:
    start = time.perf_counter()
    stream = conn.open_stream("bench.sink", len(payload))
    await stream.send_data(payload)
    assert await stream.result() == len(payload)
    return time.perf_counter() - start


async def run(mbytes: int, repeats: int) -> dict[str, Any]:
    size = mbytes * MB
    sink_buffer = bytearray(size)

    async def sink(ctx: CallContext, request: Any, stream: Stream) -> Any:
        await stream.recv_data_into(memoryview(sink_buffer)[: int(request)])
        return int(request)

    relay = Host(Identity.generate(), CONFIG)
    receiver = Host(Identity.generate(), CONFIG)
    direct_sender = Host(Identity.generate(), CONFIG)
    relayed_sender = Host(Identity.generate(), CONFIG)
    hosts = [relay, receiver, direct_sender, relayed_sender]
    for host in hosts:
        await host.start()
    receiver.router.add_raw_stream("bench.sink", sink)
    # the bytes each circuit may carry must cover every run of the benchmark
    service = RelayService(relay, RelayLimits(circuit_bytes=(repeats + 1) * size + 64 * MB))
    service.start()
    receiver.add_addresses(relay.peer_id, relay.listen_addresses)
    client = RelayClient(receiver, candidates=lambda: [relay.peer_id], want=1)
    client.start()
    await client.reserve(relay.peer_id)
    dialer = RelayDialer(relayed_sender)
    relayed_sender.add_addresses(relay.peer_id, relay.listen_addresses)
    try:
        direct = await direct_sender.connect(receiver.listen_addresses[0])
        relayed = await relayed_sender.connect(f"relay:{relay.peer_id}/{receiver.peer_id}")
        assert relayed.relayed_via == relay.peer_id
        payload = memoryview(bytes(size))
        await send(direct, payload[: 8 * MB])  # warm both paths up
        await send(relayed, payload[: 8 * MB])
        times: dict[str, list[float]] = {"direct": [], "relayed": []}
        for _ in range(repeats):
            times["direct"].append(await send(direct, payload))
            times["relayed"].append(await send(relayed, payload))
    finally:
        await client.close()
        await dialer.close()
        await service.close()
        for host in hosts:
            await host.close()
    direct_rate = size / statistics.median(times["direct"])
    relayed_rate = size / statistics.median(times["relayed"])
    return {
        "benchmark": "relay_throughput",
        "python": platform.python_version(),
        "platform": platform.platform(),
        "mbytes": mbytes,
        "repeats": repeats,
        "direct_bytes_per_s": direct_rate,
        "relayed_bytes_per_s": relayed_rate,
        "direct_MB_per_s": round(direct_rate / MB, 1),
        "relayed_MB_per_s": round(relayed_rate / MB, 1),
        "relayed_over_direct": round(relayed_rate / direct_rate, 3),
        "seconds": {k: [round(t, 3) for t in v] for k, v in times.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mbytes", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    emit(asyncio.run(run(args.mbytes, args.repeats)), args.json)


if __name__ == "__main__":
    main()
