"""NAT benchmark in the lab: connection set-up, relay versus direct throughput, and an all-reduce
between a backbone and three volunteers behind home routers on 100 Mbit/s links.

    sudo python -m benchmarks.net.nat --json out.json [--numel 10000000] [--rounds 3] [--rate-mbit 100]

It builds a NAT lab (``tests/lab/natlab.py``: a public host and three homes behind cone NATs, in
network namespaces; root, iproute2 and nftables) and runs every peer as its own process inside a
namespace: a backbone peer on the public host (relay offered, port 4002) and one volunteer per home
(port 4001; in the first home a second one that never punches, port 4005, for relayed figures).

1. **Time to first RPC** (fresh connection each time; dial + TLS + hello + one echo call):
   ``direct`` home → backbone; ``relayed`` home 1 → home 2 through the backbone's relay;
   ``punched`` home 1 → home 2 until the hole-punched direct connection answered the call
   (relay dial, RTT measurement, simultaneous open and the call over the new path).
2. **Pairs**: every pair of homes connects through the relay and punches; the kind each ends with.
3. **Throughput** of one stream (``--mbytes``) from home 1 to home 2, over the punched connection
   and through the relay, alternating; and home 1 to the backbone. No shaping: the path's own limit.
4. **All-reduce** of ``--numel`` float32 values (uncompressed) among the backbone and the three
   volunteers, each home's link shaped to ``--rate-mbit`` both ways (tbf on the router's WAN and
   LAN sides). Volunteers average as clients (nobody can dial them), so the backbone reduces the
   whole vector: each home link carries the vector up and the average down, at the same time. Its
   bandwidth bound is ``4 * numel / rate``: the time the links need for those bytes, nothing else.
   The goal is an all-reduce within 1.25 times the bound.

Figures are medians; MB = 10^6 bytes. Every namespace and process is removed at the end, also on
failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.kit.harness import (
    PeerProcess,
    as_module,
    commands,
    emit,
    precompile,
    reply,
    stop_all,
    tensor_for,
)

MB = 1_000_000
BACKBONE_PORT = 4002
HOME_PORT = 4001
RELAYED_ONLY_PORT = 4005


# ---- a peer (worker process, inside a lab namespace) ---------------------------------------------


class Worker:
    """One peer: a Host with its Presence, and later a DHT node and an Averager."""

    def __init__(self, args: argparse.Namespace) -> None:
        from core.config.ports import all_interfaces
        from core.net import Host, Identity, NetConfig
        from core.net.presence import Presence, PresenceOptions
        from core.net.reach.reachability import Reachability

        self.args = args
        self.backbone = args.role == "backbone"
        self.host = Host(Identity.generate(), NetConfig(call_timeout=600.0))
        self.listen = all_interfaces(args.port)
        self.presence = Presence(
            self.host,
            PresenceOptions(
                offer_relay=self.backbone,
                assume=Reachability.PUBLIC if self.backbone else Reachability.PRIVATE,
                punch=args.punch,
                map_port=False,
                meet_every=1e6,  # the benchmark says whom to connect to, and when
            ),
        )
        self.sink = bytearray(max(args.mbytes * MB, args.numel * 4))
        self.averager: Any = None
        self.dht: Any = None
        self.tensor: np.ndarray | None = None
        self.pending: Any = None

    async def start(self) -> None:
        from core.net import CallContext, Stream

        async def echo(ctx: CallContext, request: Any) -> Any:
            return request

        async def sink(ctx: CallContext, request: Any, stream: Stream) -> Any:
            await stream.recv_data_into(memoryview(self.sink)[: int(request)])
            return int(request)

        self.host.router.add_raw("bench.echo", echo)
        self.host.router.add_raw_stream("bench.sink", sink)
        await self.host.start(self.listen)
        await self.presence.start()
        public = f"/ip4/{self.args.public_ip}/tcp/{self.args.port}/p2p/{self.host.peer_id}"
        reply({"address": public if self.backbone else str(self.host.peer_id)})

    async def close(self) -> None:
        if self.averager is not None:
            await self.averager.close()
        if self.dht is not None:
            await self.dht.close()
        await self.presence.close()
        await self.host.close()

    # ---- commands ------------------------------------------------------------------------------

    async def join(self, backbone: str) -> dict[str, Any]:
        """Connect to the backbone and hold a reservation on its relay; our relayed address."""
        from core.net import PeerAddress

        await self.host.connect(PeerAddress.parse(backbone))
        async with asyncio.timeout(60):
            while not self.host.relay_addresses:  # noqa: ASYNC110 - the relay client's state
                await asyncio.sleep(0.05)
        return {"relay_address": str(self.host.relay_addresses[0])}

    async def first_rpc(self, target: str, punched: bool) -> dict[str, Any]:
        """Seconds from dialing ``target`` afresh to the answer of one call (over the punched
        connection when ``punched``)."""
        from core.net import PeerAddress

        address = PeerAddress.parse(target)
        peer = address.require_peer()
        for conn in self.host.connections(peer):
            await conn.close("the benchmark measures a fresh connection")
        await asyncio.sleep(0.2)
        started = time.perf_counter()
        conn = await self.host.connect(address)
        if punched:
            async with asyncio.timeout(30):
                while not (direct := [c for c in self.host.connections(peer) if c.punched]):  # noqa: ASYNC110
                    await asyncio.sleep(0.002)  # polled: the puncher's work is what is timed
            conn = direct[0]
        assert await conn.call("bench.echo", "ping") == "ping"
        seconds = time.perf_counter() - started
        return {"seconds": seconds, "kind": _kind(conn)}

    async def pair(self, target: str) -> dict[str, Any]:
        """Connect to ``target`` (a relayed address) and give punching 20 s; the kind we end with."""
        from core.net import PeerAddress
        from core.net.connection_kinds import peer_kinds

        address = PeerAddress.parse(target)
        peer = address.require_peer()
        started = time.perf_counter()
        await self.host.connect(address)
        kind = "relayed"
        while time.perf_counter() - started < 20:
            kind = peer_kinds(self.host).get(str(peer), "none")
            if kind != "relayed":
                break
            await asyncio.sleep(0.05)
        return {"kind": kind, "seconds": time.perf_counter() - started}

    async def stream(self, peer_id: str, mbytes: int, relayed: bool) -> dict[str, Any]:
        """Seconds to send ``mbytes`` MB to ``peer_id`` over our relayed or direct connection."""
        from core.net import PeerID

        peer = PeerID.from_string(peer_id)
        conns = [c for c in self.host.connections(peer) if (c.relayed_via is not None) == relayed]
        if not conns:
            return {"error": f"no {'relayed' if relayed else 'direct'} connection to {peer_id}"}
        payload = memoryview(bytes(mbytes * MB))
        started = time.perf_counter()
        call = conns[0].open_stream("bench.sink", len(payload))
        await call.send_data(payload)
        assert await call.result() == len(payload)
        return {"seconds": time.perf_counter() - started, "kind": _kind(conns[0])}

    async def averaging(self, join: str | None) -> dict[str, Any]:
        """Start a DHT node (a client at home) and an Averager (a client at home)."""
        import torch

        torch.set_num_threads(1)
        from core.averaging import Averager, AveragerConfig
        from core.codecs import NONE
        from core.dht import DHTConfig, DHTNode, HostTransport

        self.dht = DHTNode(HostTransport(self.host), DHTConfig(client_mode=not self.backbone))
        await self.dht.start([join] if join else [])
        if join:
            await self.dht.wait_bootstrapped()
        config = AveragerConfig(
            target_group_size=self.args.peers,
            min_group_size=self.args.peers,
            codec=NONE,
            allreduce_timeout=600.0,
            client_mode=not self.presence.dialable,
        )
        self.averager = Averager(self.host, self.dht, "nat-bench", config)
        return {"client": config.client_mode}

    async def handle(self, command: dict[str, Any]) -> dict[str, Any]:
        op = command["op"]
        if op == "join":
            return await self.join(command["backbone"])
        if op == "first_rpc":
            return await self.first_rpc(command["target"], command["punched"])
        if op == "pair":
            return await self.pair(command["target"])
        if op == "stream":
            return await self.stream(command["to"], command["mbytes"], command["relayed"])
        if op == "averaging":
            return await self.averaging(command.get("join"))
        return await self.round(op, command["round"])

    async def round(self, op: str, index: int) -> dict[str, Any]:
        """One all-reduce round: load the input, find the group, run it, check the result."""
        args = self.args
        if op == "load":
            self.tensor = tensor_for(args.seed, index, args.index, args.numel)
            return {}
        if op == "prepare":
            self.pending = await self.averager.prepare(f"round-{index}", timeout=120)
            return {"matched": self.pending.size}
        if op == "run":
            result = await self.pending.run([self.tensor])
            return {"complete": result.complete, "summary": result.summary()}
        if op != "check":
            raise ValueError(f"unknown command {op!r}")
        assert self.tensor is not None
        inputs = [tensor_for(args.seed, index, p, args.numel) for p in range(args.peers)]
        reference = sum(inputs) / np.float32(args.peers)
        spread = float(np.sqrt(np.mean((inputs[args.index] - reference) ** 2)))
        error = float(np.sqrt(np.mean((self.tensor - reference) ** 2)))
        return {"rel_rms_err": error / max(spread, 1e-12)}


def _kind(conn: Any) -> str:
    from core.net.connection_kinds import kind_of

    return str(kind_of(conn))


async def worker(args: argparse.Namespace) -> None:
    peer = Worker(args)
    await peer.start()
    try:
        async for command in commands():
            try:
                reply(await peer.handle(command))
            except Exception as exc:  # the driver records it; the worker stays up
                reply({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        await peer.close()


# ---- the driver ----------------------------------------------------------------------------------


async def start_worker(
    lab: Any, where: str, args: argparse.Namespace, *, role: str, port: int, index: int,
    punch: bool = True,
) -> PeerProcess:  # fmt: skip
    argv = [
        *as_module(__spec__), "--worker", "--role", role, "--port", str(port), "--index", str(index),
        "--peers", "4", "--numel", str(args.numel), "--seed", str(args.seed),
        "--mbytes", str(args.mbytes), "--public-ip", lab.PUB_IP, "--punch", "yes" if punch else "no",
    ]  # fmt: skip
    return await PeerProcess.start(argv, prefix=["ip", "netns", "exec", lab.ns(where)])


async def ask(peer: PeerProcess, **command: Any) -> dict[str, Any]:
    answer = await peer.ask(**command)
    if "error" in answer:
        raise RuntimeError(f"{command['op']}: {answer['error']}")
    return answer


def median(values: list[float]) -> float:
    return round(statistics.median(values), 4)


async def bench(lab: Any, args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {
        "benchmark": "nat",
        "lab": "public host + three homes behind cone NATs (tests/lab/natlab.py)",
        "numel": args.numel,
        "rate_mbit": args.rate_mbit,
    }
    backbone = await start_worker(lab, "pub", args, role="backbone", port=BACKBONE_PORT, index=0)
    peers = [backbone]
    try:
        homes = {}
        for i, where in enumerate(("h1", "h2", "h3"), start=1):
            homes[where] = await start_worker(
                lab, where, args, role="home", port=HOME_PORT, index=i
            )
            peers.append(homes[where])
        relayed_only = await start_worker(
            lab, "h1", args, role="home", port=RELAYED_ONLY_PORT, index=9, punch=False
        )
        peers.append(relayed_only)
        relay_of = {}
        for where, peer in [*homes.items(), ("h1-relayed", relayed_only)]:
            relay_of[where] = (await ask(peer, op="join", backbone=backbone.address))[
                "relay_address"
            ]
        # 1. time to first RPC
        first: dict[str, list[float]] = {"direct": [], "relayed": [], "punched": []}
        kinds: dict[str, list[str]] = {"direct": [], "relayed": [], "punched": []}
        for _ in range(args.repeats):
            for name, peer, target, punched in (
                ("direct", relayed_only, backbone.address, False),
                ("relayed", relayed_only, relay_of["h2"], False),
                ("punched", homes["h1"], relay_of["h2"], True),
            ):
                answer = await ask(peer, op="first_rpc", target=target, punched=punched)
                first[name].append(answer["seconds"])
                kinds[name].append(answer["kind"])
        result["first_rpc_s"] = {name: median(values) for name, values in first.items()}
        result["first_rpc_runs"] = {
            name: [round(v, 4) for v in values] for name, values in first.items()
        }
        result["first_rpc_kinds"] = kinds
        print(f"  first RPC: {result['first_rpc_s']}", file=sys.stderr, flush=True)
        # 2. every pair of homes
        pairs = {}
        for a, b in (("h1", "h2"), ("h1", "h3"), ("h2", "h3")):
            pairs[f"{a}-{b}"] = (await ask(homes[a], op="pair", target=relay_of[b]))["kind"]
        result["pairs"] = pairs
        connected = [k for k in pairs.values() if k in ("direct", "punched", "relayed")]
        result["pairs_connected_pct"] = round(100 * len(connected) / len(pairs), 1)
        result["pairs_punched_pct"] = round(
            100 * sum(k == "punched" for k in pairs.values()) / len(pairs), 1
        )
        print(f"  pairs: {pairs}", file=sys.stderr, flush=True)
        # 3. throughput, alternating so that noise hits both alike
        h2_id = homes["h2"].address
        speeds: dict[str, list[float]] = {"punched": [], "relayed": [], "direct_to_backbone": []}
        for _ in range(args.repeats):
            runs = (
                ("punched", homes["h1"], h2_id, False),
                ("relayed", relayed_only, h2_id, True),
                ("direct_to_backbone", homes["h1"], backbone.peer_id, False),
            )
            for name, peer, target, relayed in runs:
                answer = await ask(peer, op="stream", to=target, mbytes=args.mbytes,
                                   relayed=relayed)  # fmt: skip
                speeds[name].append(args.mbytes / answer["seconds"])
        result["stream_MBps"] = {name: median(values) for name, values in speeds.items()}
        result["relayed_vs_punched"] = round(
            result["stream_MBps"]["relayed"] / result["stream_MBps"]["punched"], 3
        )
        print(f"  stream MB/s: {result['stream_MBps']}", file=sys.stderr, flush=True)
        # 4. the all-reduce on shaped home links
        await stop_all([relayed_only])
        peers.remove(relayed_only)
        result["allreduce"] = await allreduce(lab, args, backbone, list(homes.values()))
    finally:
        await stop_all(peers)
    result["env"] = {"python": platform.python_version(), "cpus": os.cpu_count()}
    return result


async def allreduce(
    lab: Any, args: argparse.Namespace, backbone: PeerProcess, homes: list[PeerProcess]
) -> dict[str, Any]:
    rate_kbit = args.rate_mbit * 1000
    for router in ("r1", "r2", "r3"):
        lab.shape(router, "wan", rate_kbit)  # the home's upload
        lab.shape(router, "lan", rate_kbit)  # its download
    everyone = [backbone, *homes]
    # what one TCP stream gets through a shaped link: the line rate less TCP/IP and TLS overhead
    vector_mb = max(1, args.numel * 4 // MB)
    one = await ask(homes[0], op="stream", to=backbone.peer_id, mbytes=vector_mb, relayed=False)
    stream_mbit = vector_mb * 8 / one["seconds"]
    # and both ways at once, as in the all-reduce (the download's ACKs queue behind the upload)
    both = await asyncio.gather(
        ask(homes[0], op="stream", to=backbone.peer_id, mbytes=vector_mb, relayed=False),
        ask(backbone, op="stream", to=homes[0].peer_id, mbytes=vector_mb, relayed=False),
    )
    both_s = max(b["seconds"] for b in both)
    roles = [await ask(backbone, op="averaging")]
    roles += [await ask(h, op="averaging", join=backbone.address) for h in homes]
    await asyncio.sleep(1.0)
    vector_bytes = args.numel * 4
    bound = vector_bytes * 8 / (args.rate_mbit * 1e6)
    rounds = []
    for index in range(args.rounds):
        await asyncio.gather(*(ask(p, op="load", round=index) for p in everyone))
        t0 = time.perf_counter()
        matched = await asyncio.gather(*(ask(p, op="prepare", round=index) for p in everyone))
        t1 = time.perf_counter()
        outcomes = await asyncio.gather(*(ask(p, op="run", round=index) for p in everyone))
        t2 = time.perf_counter()
        checks = await asyncio.gather(*(ask(p, op="check", round=index) for p in everyone))
        rounds.append({
            "matchmaking_s": round(t1 - t0, 3),
            "allreduce_s": round(t2 - t1, 3),
            "group_sizes": [m["matched"] for m in matched],
            "complete": all(o["complete"] for o in outcomes),
            "rel_rms_err": max(c["rel_rms_err"] for c in checks),
        })  # fmt: skip
        print(f"  all-reduce round {index}: {t2 - t1:.3f} s (bound {bound:.3f} s)",
              file=sys.stderr, flush=True)  # fmt: skip
    seconds = statistics.median(r["allreduce_s"] for r in rounds)
    return {
        "peers": len(everyone),
        "clients": sum(bool(r["client"]) for r in roles),
        "vector_MB": vector_bytes / MB,
        "bound_s": round(bound, 3),
        "one_stream_on_a_home_link_mbit": round(stream_mbit, 1),
        "vector_both_ways_at_once_s": round(both_s, 3),
        "ratio_to_both_ways": round(seconds / both_s, 3),
        "allreduce_s_median": round(seconds, 3),
        "ratio_to_bound": round(seconds / bound, 3),
        "goal_ratio": 1.25,
        "averaging_complete": all(r["complete"] and r["rel_rms_err"] < 1e-4 for r in rounds),
        "rounds": rounds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")
    parser.add_argument("--numel", type=int, default=10_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate-mbit", type=int, default=100, help="each home link, both ways")
    parser.add_argument("--mbytes", type=int, default=100, help="MB per throughput stream")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    # the worker's own options
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--role", default="home", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=HOME_PORT, help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--peers", type=int, default=4, help=argparse.SUPPRESS)
    parser.add_argument("--public-ip", default="", help=argparse.SUPPRESS)
    parser.add_argument("--punch", default="yes", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        args.punch = args.punch == "yes"
        asyncio.run(worker(args))
        return
    from tests.lab.natlab import NatLab, lab_unavailable

    reason = lab_unavailable()
    if reason is not None:
        sys.exit(f"nat.py needs the NAT lab, which cannot be built here: {reason}")
    precompile()
    with NatLab("cone", "cone", nat3="cone") as lab:
        result = asyncio.run(bench(lab, args))
    emit(result, args.json)


if __name__ == "__main__":
    main()
