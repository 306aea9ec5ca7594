"""A DHT node under a flood of strangers' connections: do legitimate peers still get answers?

    python benchmarks/flood.py --connections 2000 --json out.json

Starts a real ``barnraise dht`` node, then for each scenario measures three phases (``--baseline``,
``--flood`` and ``--after`` seconds): before, during and after a flooder (its own process) holds
``--connections`` plain TCP connections to the node's peer port. The flooder sends nothing (a
handshake that never starts, the cheapest attack there is) and opens a new connection
``--renew`` seconds after the node drops one, so the flood never lets up. Scenarios:

- ``one_address``: every flood connection comes from 127.0.0.1, the legitimate peer's own address;
- ``many_networks``: they come from 256 addresses spread over 32 /24 networks (127.1.0.0/16);
- ``no_flood``: the control, the same phases and pings without a flooder. A legitimate connection's
  objects are reference cycles that the node frees in batches (``core.util.memory``), so its RSS
  saws up and down by a few MB by itself; the flood's own cost is its scenario's RSS after the
  flood next to the control's.

Throughout, a legitimate peer pings the node (``dht.ping``) every ``--interval`` seconds over a
**fresh** connection each time (TCP, TLS, hello and the call: what a newcomer does), and over one
connection it keeps. Reported per phase: latency p50/p99/max (ms) and failures (a 5 s deadline),
and the node's RSS (MB): the median before, the largest during, the median of the last 5 s after
(and a once-a-second series of each phase).

Goals: at 2,000 connections, fresh pings answered within 1 s (p99) with no failures,
and RSS after the flood within 10 % of the baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import emit

from core.dht.messages import PING, PingRequest
from core.net import Host, Identity, NetConfig, PeerAddress

ROOT = Path(__file__).resolve().parent.parent
DEADLINE = 5.0
SCENARIOS = ("no_flood", "one_address", "many_networks")


def sources_of(scenario: str) -> list[str]:
    if scenario == "one_address":
        return ["127.0.0.1"]
    block = ipaddress.ip_network("127.1.0.0/16")
    return [str(block[256 * (n // 8) + n % 8 + 1]) for n in range(256)]  # 8 per /24, 32 /24s


def raise_file_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# ---- the flooder (its own process, so its work does not slow the measuring loop) ----------------


async def flood(host: str, port: int, count: int, sources: list[str], renew: float) -> None:
    raise_file_limit()
    opened = 0

    async def hold(n: int) -> None:
        nonlocal opened
        await asyncio.sleep(n / count)  # ramp up over one second
        source = sources[n % len(sources)]
        while True:
            try:
                reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
            except OSError:
                await asyncio.sleep(renew)
                continue
            opened += 1
            with contextlib.suppress(OSError):
                await reader.read(1)  # until the node drops us
            writer.close()
            await asyncio.sleep(renew)

    tasks = [asyncio.create_task(hold(n)) for n in range(count)]
    try:
        while True:
            await asyncio.sleep(5)
            print(f"flooder: {opened} connections opened so far", file=sys.stderr, flush=True)
    finally:
        for task in tasks:
            task.cancel()


# ---- the measuring side -------------------------------------------------------------------------


class Pinger:
    """The legitimate peer: pings over a fresh connection and over a kept one, recording latencies."""

    def __init__(self, host: Host, target: PeerAddress) -> None:
        self.host = host
        self.target = target
        assert target.peer_id is not None
        self.peer = target.peer_id
        self.fresh: list[float] = []
        self.kept: list[float] = []

    async def fresh_ping(self) -> None:
        started = time.perf_counter()
        try:
            async with asyncio.timeout(DEADLINE):
                conn = await self.host.dial_fresh(self.target, self.peer)
                try:
                    await conn.call(PING.name, PingRequest(client=True).to_wire())
                finally:
                    await conn.close(grace=0.1)
            self.fresh.append(time.perf_counter() - started)
        except Exception:
            self.fresh.append(float("inf"))

    async def kept_ping(self) -> None:
        started = time.perf_counter()
        try:
            await self.host.call(self.target, PING, PingRequest(client=True), timeout=DEADLINE)
            self.kept.append(time.perf_counter() - started)
        except Exception:
            self.kept.append(float("inf"))

    def take(self) -> dict[str, Any]:
        result = {"fresh": summary(self.fresh), "kept": summary(self.kept)}
        self.fresh, self.kept = [], []
        return result


def summary(latencies: list[float]) -> dict[str, Any]:
    answered = sorted(x for x in latencies if x != float("inf"))
    failures = len(latencies) - len(answered)
    if not answered:
        return {"count": len(latencies), "failures": failures}
    # p99 counts failures as the slowest answers: a lost ping must not improve the figure
    ranked = answered + [float("inf")] * failures
    p99 = ranked[min(len(ranked) - 1, int(0.99 * len(ranked)))]
    return {
        "count": len(latencies),
        "failures": failures,
        "p50_ms": round(1000 * statistics.median(ranked), 1),
        "p99_ms": round(1000 * p99, 1) if p99 != float("inf") else None,
        "max_ms": round(1000 * answered[-1], 1),
    }


async def start_node(home: Path) -> tuple[asyncio.subprocess.Process, PeerAddress]:
    env = dict(os.environ, BARNRAISE_HOME=str(home))
    os.makedirs(home, exist_ok=True)
    with open(os.path.join(home, "node.log"), "ab") as log:  # noqa: ASYNC230 - before anything runs
        node = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "core.cli.main", "dht", "--new-identity",
            "--host", "127.0.0.1", "--port", "0", "--stdio-api",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log,
            cwd=ROOT, env=env,
        )  # fmt: skip
    assert node.stdout is not None
    line = await asyncio.wait_for(node.stdout.readline(), 60)
    return node, PeerAddress.parse(line.decode().strip())


async def stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def scenario(name: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    node, address = await start_node(work / name)
    rss: dict[str, list[float]] = {"baseline": [], "flood": [], "after": []}
    phase = "baseline"
    process = psutil.Process(node.pid)
    host = Host(Identity.generate(), NetConfig(dial_timeout=DEADLINE, handshake_timeout=DEADLINE))
    await host.start(["/ip4/127.0.0.1/tcp/0"])
    pinger = Pinger(host, address)
    phases: dict[str, Any] = {}
    flooder: asyncio.subprocess.Process | None = None

    async def measure(seconds: float) -> None:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            rss[phase].append(process.memory_info().rss / 2**20)
            await asyncio.gather(pinger.fresh_ping(), pinger.kept_ping())
            await asyncio.sleep(args.interval)

    try:
        await measure(args.baseline)
        phases["baseline"] = pinger.take()
        phase = "flood"
        assert address.host is not None
        assert address.port is not None
        if name != "no_flood":
            flooder = await asyncio.create_subprocess_exec(
                sys.executable, __file__, "--flooder", f"{address.host}:{address.port}",
                "--connections", str(args.connections), "--renew", str(args.renew),
                "--scenario", name, cwd=ROOT, stderr=(work / f"{name}-flooder.log").open("ab"),
            )  # fmt: skip
        await measure(args.flood)
        phases["flood"] = pinger.take()
        if flooder is not None:
            await stop(flooder)
        phase = "after"
        await measure(args.after)
        phases["after"] = pinger.take()
    finally:
        if flooder is not None:
            await stop(flooder)
        await host.close()
        await stop(node)
    baseline = statistics.median(rss["baseline"])
    # the last seconds of the after phase: one sample would be noise (a ~40 MB process moves by MBs)
    tail = rss["after"][-max(1, int(5 / args.interval)) :]
    after = statistics.median(tail)
    phases["rss_mb"] = {
        "baseline": round(baseline, 1),
        "flood_max": round(max(rss["flood"]), 1),
        "after": round(after, 1),
        "after_over_baseline": round(after / baseline, 3),
        "series": {
            name: [round(x, 1) for x in values[:: max(1, int(1 / args.interval))]]
            for name, values in rss.items()
        },
    }
    fresh = phases["flood"]["fresh"]
    phases["goals"] = {
        "fresh_pings_within_1s": fresh["failures"] == 0
        and fresh.get("p99_ms") is not None
        and fresh["p99_ms"] <= 1000,
        "rss_back_within_10_percent": after <= 1.10 * baseline,
    }
    return phases


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    raise_file_limit()
    result: dict[str, Any] = {
        "connections": args.connections,
        "renew_s": args.renew,
        "phases_s": {"baseline": args.baseline, "flood": args.flood, "after": args.after},
    }
    with tempfile.TemporaryDirectory(prefix="barnraise-flood-") as tmp:
        for name in args.scenarios:
            result[name] = await scenario(name, args, Path(tmp))
    if "no_flood" in result:
        control = result["no_flood"]["rss_mb"]["after"]
        for name in args.scenarios:
            rss = result[name]["rss_mb"]
            rss["after_over_no_flood_after"] = round(rss["after"] / control, 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument(
        "--renew", type=float, default=1.0, help="seconds before a dropped one reopens"
    )
    parser.add_argument("--baseline", type=float, default=5.0)
    parser.add_argument("--flood", type=float, default=20.0)
    parser.add_argument("--after", type=float, default=15.0)
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between pings")
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--flooder", help=argparse.SUPPRESS)
    parser.add_argument("--scenario", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.connections < 1:
        parser.error("--connections must be at least 1")
    if args.flooder:
        host, port = args.flooder.rsplit(":", 1)
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(
                flood(host, int(port), args.connections, sources_of(args.scenario), args.renew)
            )
        return
    emit(asyncio.run(bench(args)), args.json)


if __name__ == "__main__":
    main()
