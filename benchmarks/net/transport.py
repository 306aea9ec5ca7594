"""Transport benchmark: RPC round trips and tensor streaming between two processes on loopback.

    python -m benchmarks.net.transport --json out.json [--mbytes 400] [--calls 5000] [--repeats 3]

The server runs in a second OS process. Streaming sends one float32 tensor of ``--mbytes`` MB over an
authenticated TLS 1.3 connection into a preallocated tensor on the other side (numpy arrays: the same
memory a CPU torch tensor exposes through ``.numpy()``, without importing torch); raw TCP sends the same
bytes over a plain blocking socket pair, the fastest loopback path this machine has. Runs alternate
(raw, stream, raw, stream, ...) so that noise hits both alike; figures are medians, MB = 10^6 bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import socket
import statistics
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.kit.harness import ROOT, as_module, emit
from core.net import Host, Identity, PeerAddress
from core.net.config import MiB, NetConfig
from core.net.wire.connection import Connection

RAW_CHUNK = 4 * MiB


# ---- server side (second process) ----------------------------------------------------------------


async def serve(ready_line_prefix: str) -> None:
    host = Host(Identity.generate(), NetConfig(call_timeout=300))
    received: dict[str, Any] = {}

    async def echo(ctx: Any, request: Any) -> Any:
        return request

    async def prepare(ctx: Any, request: Any) -> Any:
        target = np.empty(int(request), dtype=np.float32)
        target.fill(0)  # touch every page before timing, as a long-lived buffer would be
        received["tensor"] = target
        return None

    async def sink(ctx: Any, request: Any, stream: Any) -> Any:
        await stream.recv_data_into(received["tensor"][: int(request)])
        return int(request)

    async def digest(ctx: Any, request: Any) -> Any:
        return zlib.crc32(received["tensor"].data)

    host.router.add_raw("bench.prepare", prepare)
    host.router.add_raw("bench.echo", echo)
    host.router.add_raw_stream("bench.sink", sink)
    host.router.add_raw("bench.digest", digest)
    await host.start()
    print(ready_line_prefix + str(host.addresses[0]), flush=True)
    await asyncio.get_running_loop().run_in_executor(
        None, sys.stdin.read
    )  # until the parent closes
    await host.close()


def raw_serve() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    print(f"RAW {listener.getsockname()[1]}", flush=True)
    buffer = memoryview(bytearray(RAW_CHUNK))
    while True:
        conn, _ = listener.accept()
        header = conn.recv(8, socket.MSG_WAITALL)
        if len(header) < 8:
            return
        remaining = int.from_bytes(header, "big")
        while remaining:
            got = conn.recv_into(buffer, min(len(buffer), remaining))
            if not got:
                break
            remaining -= got
        conn.sendall(b"k")
        conn.close()


# ---- client side ---------------------------------------------------------------------------------


def spawn(mode: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, *as_module(__spec__), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line:
        proc.kill()
        raise RuntimeError(f"the {mode} process did not start")
    return proc, line.split(" ", 1)[1]


def raw_run(port: int, payload: memoryview) -> float:
    with socket.create_connection(("127.0.0.1", port)) as conn:
        start = time.perf_counter()
        conn.sendall(len(payload).to_bytes(8, "big"))
        for offset in range(0, len(payload), RAW_CHUNK):
            conn.sendall(payload[offset : offset + RAW_CHUNK])
        if conn.recv(1) != b"k":
            raise RuntimeError("raw server did not acknowledge")
        return len(payload) / (time.perf_counter() - start) / 1e6


async def rpc_latencies(conn: Connection, calls: int) -> list[float]:
    for i in range(min(500, calls)):
        await conn.call("bench.echo", i)
    out = []
    for i in range(calls):
        start = time.perf_counter_ns()
        await conn.call("bench.echo", i)
        out.append((time.perf_counter_ns() - start) / 1000)
    return out


async def stream_run(conn: Connection, tensor: np.ndarray[Any, Any]) -> float:
    start = time.perf_counter()
    stream = conn.open_stream("bench.sink", tensor.size, timeout=300)
    await stream.send_data(tensor)
    await stream.result()
    return tensor.nbytes / (time.perf_counter() - start) / 1e6


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


async def client(args: argparse.Namespace) -> dict[str, Any]:
    numel = int(args.mbytes * 1e6) // 4
    tensor = np.random.default_rng(0).standard_normal(numel, dtype=np.float32)
    payload = memoryview(tensor).cast("B")
    expected_crc = zlib.crc32(payload)
    server, address = spawn("--serve")
    raw_server, raw_port = spawn("--raw-serve")
    host = Host(Identity.generate(), NetConfig(call_timeout=300))
    try:
        await host.start()
        conn = await host.connect(PeerAddress.parse(address))
        latencies = await rpc_latencies(conn, args.calls)
        await conn.call("bench.prepare", numel, timeout=120)
        await stream_run(
            conn, tensor[: min(numel, 16 * MiB // 4)]
        )  # warm-up, allocates nothing big
        stream_runs, raw_runs = [], []
        for _ in range(args.repeats):
            raw_runs.append(await asyncio.to_thread(raw_run, int(raw_port), payload))
            stream_runs.append(await stream_run(conn, tensor))
            print(
                f"  raw {raw_runs[-1]:8.0f} MB/s   stream {stream_runs[-1]:8.0f} MB/s", flush=True
            )
        integrity = await conn.call("bench.digest", None) == expected_crc
        cipher = conn.cipher
    finally:
        await host.close()
        for proc in (server, raw_server):
            assert proc.stdin is not None
            proc.stdin.close()
            proc.kill()
            proc.wait()
    stream_mbps = statistics.median(stream_runs)
    raw_mbps = statistics.median(raw_runs)
    return {
        "benchmark": "transport",
        "tensor_bytes": numel * 4,
        "rpc_roundtrip_us": {
            "p50": round(percentile(latencies, 50), 1),
            "p99": round(percentile(latencies, 99), 1),
            "mean": round(statistics.fmean(latencies), 1),
            "calls": len(latencies),
        },
        "stream_MBps": round(stream_mbps, 1),
        "stream_MBps_runs": [round(x, 1) for x in stream_runs],
        "raw_tcp_MBps": round(raw_mbps, 1),
        "raw_tcp_MBps_runs": [round(x, 1) for x in raw_runs],
        "stream_to_raw_ratio": round(stream_mbps / raw_mbps, 3),
        "stream_integrity_ok": integrity,
        "tls": list(cipher) if cipher else None,
        "machine": {
            "python": platform.python_version(),
            "cpus": _cpus(),
            "platform": platform.platform(),
        },
    }


def _cpus() -> int | None:
    import os

    return os.cpu_count()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        asyncio.run(serve("READY "))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--raw-serve":
        raw_serve()
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument(
        "--mbytes", type=float, default=400.0, help="tensor size in MB (default 400)"
    )
    parser.add_argument("--calls", type=int, default=5000, help="timed RPC round trips")
    parser.add_argument("--repeats", type=int, default=5, help="stream and raw runs each")
    args = parser.parse_args()
    emit(asyncio.run(client(args)), args.json)


if __name__ == "__main__":
    main()
