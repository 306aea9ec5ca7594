"""A DHT node under a flood of strangers' connections: do legitimate peers still get answers?

    python -m benchmarks.net.flood --connections 2000 --json out.json

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

    python -m benchmarks.net.flood --scenarios store_one_address store_many_networks --json out.json

Storage floods (``store_one_address``, ``store_many_networks``; ``--store-flooders`` identities at a
time, from 127.0.0.1 or from the 256 addresses above): each identity opens its own connection and
stores ``--values-per-identity`` values of 0.9 MB that live 24 hours, four to a request, as fast as
the node answers, then a fresh identity takes its place. Meanwhile the legitimate peer (from
127.0.0.1, so in ``store_one_address`` it shares its /24 with the flood) stores one small record
with a 10-minute life every ``--interval`` seconds, over the connection it keeps, and reads back
every record it stored (the last 256) in one ``dht.find``. Reported per phase: the find's latency
p50/p99/max, failures (finds unanswered in 5 s), ``missing`` (honest records a find did not return)
and refused honest stores; the node's RSS as above, and its DHT counters at the end of the flood.

Goals for a storage flood: every honest record readable throughout (``missing`` 0, no refused
store), honest finds answered within 1 s (p99), and the node's RSS after the flood (the median of
its last 5 s, once the node has handed freed memory back) within the baseline plus what the quotas
let the flood keep (``DHTConfig``), with a tenth more for the allocator: from one address, its
network's 32 MiB; from 32 networks, ``storage_bytes`` (256 MiB). During the flood the RSS is higher
by the requests being read (3.6 MB per flooder, held as a frame and as the values read from it) and
by freed buffers the allocator keeps until the node's next release (``core.util.memory``), so
``flood_max`` is reported but has no goal.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from benchmarks.kit.harness import ROOT, as_module, emit
from core.dht.config import DHTConfig
from core.dht.ids import id_to_bytes, key_id
from core.dht.messages import (
    FIND,
    PING,
    STORE,
    FindRequest,
    PingRequest,
    StoreItem,
    StoreRequest,
    StoreResponse,
    WireValue,
)
from core.net import Host, Identity, NetConfig, PeerAddress
from core.net.host.inbound import Unwrapped
from core.util.msgpack_codec import pack

DEADLINE = 5.0
CONNECTION_SCENARIOS = ("no_flood", "one_address", "many_networks")
STORE_SCENARIOS = ("store_one_address", "store_many_networks")
SCENARIOS = (*CONNECTION_SCENARIOS, *STORE_SCENARIOS)
VALUE_BYTES = 900_000
PER_REQUEST = 4
"""Values in one flood request (3.6 MB, under the 8 MiB frame limit)."""
DAY = 24 * 3600.0
HONEST_LIFE = 600.0
MAX_FIND_KEYS = 256


def sources_of(scenario: str) -> list[str]:
    if scenario in ("one_address", "store_one_address"):
        return ["127.0.0.1"]
    block = ipaddress.ip_network("127.1.0.0/16")
    return [str(block[256 * (n // 8) + n % 8 + 1]) for n in range(256)]  # 8 per /24, 32 /24s


def raise_file_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# ---- the flooder (its own process, so its work does not slow the measuring loop) ----------------


async def _run_saying(tasks: list[asyncio.Task[None]], progress: Callable[[], str]) -> None:
    """Let a flooder's tasks run until cancelled, saying ``progress()`` on stderr every 5 s."""
    try:
        while True:
            await asyncio.sleep(5)
            print(f"flooder: {progress()}", file=sys.stderr, flush=True)
    finally:
        for task in tasks:
            task.cancel()


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

    await _run_saying(
        [asyncio.create_task(hold(n)) for n in range(count)],
        lambda: f"{opened} connections opened so far",
    )


async def store_flood(
    target: PeerAddress, count: int, sources: list[str], per_identity: int
) -> None:
    """``count`` identities at a time, each storing ``per_identity`` large day-long values."""
    host_name, port, peer = target.host, target.port, target.peer_id
    assert host_name is not None
    assert port is not None
    assert peer is not None
    data = pack(b"x" * VALUE_BYTES)  # the msgpack form, as a node keeps it
    config = NetConfig(dial_timeout=DEADLINE, handshake_timeout=DEADLINE)
    sent = accepted = 0
    loop = asyncio.get_running_loop()

    async def one_identity(source: str, serial: int) -> None:
        nonlocal sent, accepted
        host = Host(Identity.generate(), config)
        try:
            transport, _ = await loop.create_connection(
                Unwrapped, host_name, port, local_addr=(source, 0)
            )
            assert isinstance(transport, asyncio.Transport)
            conn = await host.secure_outbound(transport, peer, register=False)
            for batch in range(0, per_identity, PER_REQUEST):
                expiration = time.time() + DAY - 120  # within the node's 24 h limit
                items = [
                    StoreItem(f"flood-{serial}-{batch + i}", None, WireValue(data, expiration))
                    for i in range(PER_REQUEST)
                ]
                raw = await conn.call(
                    STORE.name, StoreRequest(items, client=True).to_wire(), timeout=30.0
                )
                sent += PER_REQUEST
                accepted += sum(StoreResponse.from_wire(raw).accepted)
            await conn.close(grace=0.1)
        finally:
            await host.close()

    async def worker(n: int) -> None:
        serial = n
        while True:
            try:
                await one_identity(sources[serial % len(sources)], serial)
            except Exception as exc:  # the node refused or dropped us: a fresh identity goes on
                print(f"flooder: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                await asyncio.sleep(0.5)
            serial += count

    await _run_saying(
        [asyncio.create_task(worker(n)) for n in range(count)],
        lambda: f"{sent} values sent, {accepted} accepted",
    )


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


class HonestPeer:
    """The legitimate peer of a storage flood: stores a small record each round, reads all back."""

    def __init__(self, host: Host, target: PeerAddress) -> None:
        self.host = host
        self.target = target
        self.keys: list[str] = []
        self.finds: list[float] = []
        self.missing = 0
        self.refused = 0

    async def round(self) -> None:
        key = f"honest-{len(self.keys) + self.refused}"
        record = pack({"samples": len(self.keys), "epoch": 7})
        item = StoreItem(key, None, WireValue(record, time.time() + HONEST_LIFE))
        try:
            stored = await self.host.call(
                self.target, STORE, StoreRequest([item], client=True), timeout=DEADLINE
            )
            if stored.accepted == [True]:
                self.keys.append(key)
            else:
                self.refused += 1
        except Exception:
            self.refused += 1
        wanted = self.keys[-MAX_FIND_KEYS:]
        request = FindRequest([id_to_bytes(key_id(k)) for k in wanted], True, client=True)
        started = time.perf_counter()
        try:
            found = await self.host.call(self.target, FIND, request, timeout=DEADLINE)
            self.finds.append(time.perf_counter() - started)
            self.missing += sum(result.record is None for result in found.results)
        except Exception:
            self.finds.append(float("inf"))
            self.missing += len(wanted)

    def take(self) -> dict[str, Any]:
        result = {"find": summary(self.finds), "missing": self.missing, "refused": self.refused}
        self.finds, self.missing, self.refused = [], 0, 0
        return result


async def node_stats(node: asyncio.subprocess.Process) -> dict[str, Any]:
    """The node's DHT counters, asked over its ``--stdio-api``."""
    assert node.stdin is not None
    assert node.stdout is not None
    node.stdin.write(b'{"id": "stats", "op": "stats"}\n')
    await node.stdin.drain()
    reply = json.loads(await asyncio.wait_for(node.stdout.readline(), DEADLINE))
    stats = reply["result"]
    keep = ("records", "stored_bytes", "quota_refusals", "evicted_for_room", "refused_records")
    return {name: stats[name] for name in keep}


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
    storing = name in STORE_SCENARIOS
    pinger = Pinger(host, address)
    honest = HonestPeer(host, address)
    phases: dict[str, Any] = {}
    flooder: asyncio.subprocess.Process | None = None

    async def measure(seconds: float) -> None:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            rss[phase].append(process.memory_info().rss / 2**20)
            if storing:
                await honest.round()
            else:
                await asyncio.gather(pinger.fresh_ping(), pinger.kept_ping())
            await asyncio.sleep(args.interval)

    def take() -> dict[str, Any]:
        return honest.take() if storing else pinger.take()

    try:
        await measure(args.baseline)
        phases["baseline"] = take()
        phase = "flood"
        assert address.host is not None
        assert address.port is not None
        if storing:
            flooder = await asyncio.create_subprocess_exec(
                sys.executable, *as_module(__spec__), "--flooder", str(address),
                "--store-flooders", str(args.store_flooders),
                "--values-per-identity", str(args.values_per_identity),
                "--scenario", name, cwd=ROOT, stderr=(work / f"{name}-flooder.log").open("ab"),
            )  # fmt: skip
        elif name != "no_flood":
            flooder = await asyncio.create_subprocess_exec(
                sys.executable, *as_module(__spec__), "--flooder", f"{address.host}:{address.port}",
                "--connections", str(args.connections), "--renew", str(args.renew),
                "--scenario", name, cwd=ROOT, stderr=(work / f"{name}-flooder.log").open("ab"),
            )  # fmt: skip
        await measure(args.flood)
        phases["flood"] = take()
        if storing:
            phases["node_at_flood_end"] = await node_stats(node)
        if flooder is not None:
            await stop(flooder)
        phase = "after"
        await measure(args.after)
        phases["after"] = take()
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
    if storing:
        phases["goals"] = store_goals(name, phases, baseline, after)
        return phases
    fresh = phases["flood"]["fresh"]
    phases["goals"] = {
        "fresh_pings_within_1s": within_1s(fresh),
        "rss_back_within_10_percent": after <= 1.10 * baseline,
    }
    return phases


def within_1s(latencies: dict[str, Any]) -> bool:
    return (
        latencies["failures"] == 0
        and latencies.get("p99_ms") is not None
        and latencies["p99_ms"] <= 1000
    )


def store_goals(name: str, phases: dict[str, Any], baseline: float, after: float) -> dict[str, Any]:
    defaults = DHTConfig()
    kept = defaults.network_quota_bytes if name == "store_one_address" else defaults.storage_bytes
    allowed = baseline + 1.1 * kept / 2**20  # a tenth for the allocator's own slack
    return {
        "honest_records_all_readable": all(
            phases[p]["missing"] == 0 and phases[p]["refused"] == 0
            for p in ("baseline", "flood", "after")
        ),
        "honest_finds_within_1s": all(
            within_1s(phases[p]["find"]) for p in ("baseline", "flood", "after")
        ),
        "rss_after_allowed_mb": round(allowed, 1),
        "rss_after_within_quota": after <= allowed,
    }


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    raise_file_limit()
    result: dict[str, Any] = {
        "connections": args.connections,
        "renew_s": args.renew,
        "store_flooders": args.store_flooders,
        "values_per_identity": args.values_per_identity,
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
    parser.add_argument(
        "--store-flooders", type=int, default=16, help="identities storing at a time"
    )
    parser.add_argument(
        "--values-per-identity", type=int, default=16, help="0.9 MB values each identity stores"
    )
    parser.add_argument("--baseline", type=float, default=5.0)
    parser.add_argument("--flood", type=float, default=20.0)
    parser.add_argument("--after", type=float, default=15.0)
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between pings")
    parser.add_argument(
        "--scenarios", nargs="+", choices=SCENARIOS, default=list(CONNECTION_SCENARIOS)
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--flooder", help=argparse.SUPPRESS)
    parser.add_argument("--scenario", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.connections < 1:
        parser.error("--connections must be at least 1")
    if args.store_flooders < 1 or args.values_per_identity < PER_REQUEST:
        parser.error(f"--store-flooders must be at least 1, --values-per-identity {PER_REQUEST}")
    if args.flooder and args.scenario in STORE_SCENARIOS:
        target = PeerAddress.parse(args.flooder)
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(
                store_flood(
                    target, args.store_flooders, sources_of(args.scenario), args.values_per_identity
                )
            )
        return
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
