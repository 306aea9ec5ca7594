"""Hole punching across the NAT lab: the processes (one per lab namespace).

    punch_lab.py pub            in pub: a Host that tells peers their observed address (port 4002),
                                and a dumb TCP splice on port 5000 standing in for a relay (it pairs
                                the first two connections and copies bytes; TLS runs end to end)
    punch_lab.py a|b            in h1 / h2: a Host on 0.0.0.0:4001 with a HolePuncher; dials pub's
                                Host (to be observed), then meets the other peer through the splice
                                as a "relayed" connection (a dials: it is the initiator)

Prints one JSON line with the outcome. Run by ``punch_lab_run.py``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.net import Host, Identity, NetConfig, PeerAddress
from core.net.punch.puncher import HolePuncher

PUB = "198.51.100.10"
IDS = {name: Identity.from_seed((name.encode() * 32)[:32]) for name in ("a", "b", "pub", "relay")}


class _Held(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()


async def splice_server() -> asyncio.Server:
    waiting: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while data := await r.read(65536):
                w.write(data)
                await w.drain()
        finally:
            w.close()

    async def on_client(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        if not waiting:
            waiting.append((r, w))
            return
        r0, w0 = waiting.pop()
        await asyncio.gather(pipe(r0, w), pipe(r, w0), return_exceptions=True)

    return await asyncio.start_server(on_client, PUB, 5000)


async def pub() -> None:
    host = Host(IDS["pub"], NetConfig())
    await host.start([f"/ip4/{PUB}/tcp/4002"])
    server = await splice_server()
    print(json.dumps({"pub": "ready"}), flush=True)
    try:
        await asyncio.sleep(3600)
    finally:
        server.close()
        await host.close()


async def peer(role: str) -> None:
    me, other = IDS[role], IDS["b" if role == "a" else "a"]
    relay = IDS["relay"].peer_id
    host = Host(me, NetConfig())
    await host.start(["/ip4/0.0.0.0/tcp/4001"])
    puncher = HolePuncher(host)
    puncher.start()
    loop = asyncio.get_running_loop()
    result: dict[str, object] = {"role": role}
    try:
        await host.connect(PeerAddress.tcp(PUB, 4002, IDS["pub"].peer_id))
        await asyncio.sleep(0.5)  # the hello with our observed address
        if role == "b":
            await asyncio.sleep(0.5)  # a dials the splice first
        transport, _ = await loop.create_connection(_Held, PUB, 5000)
        assert isinstance(transport, asyncio.Transport)
        started = loop.time()
        if role == "a":
            relayed = await host.secure_outbound(transport, other.peer_id, relayed_via=relay)
            result["relayed_rtt_ms"] = round(1000 * await relayed.ping(), 2)
            # the punch started by itself when the relayed connection registered
            async with asyncio.timeout(60):
                while not (puncher.stats.succeeded or puncher.stats.failed):  # noqa: ASYNC110 - polling the counters is the point
                    await asyncio.sleep(0.05)
        else:
            host.accept_transport(transport, relayed_via=relay)
            # the initiator tries 3 rounds of about 4 s, 1 s and 2 s apart
            for _ in range(400):
                if any(c.punched for c in host.connections(other.peer_id)):
                    break
                await asyncio.sleep(0.05)
        result["seconds"] = round(loop.time() - started, 2)
        direct = [c for c in host.connections(other.peer_id) if c.relayed_via is None]
        result["direct"] = [
            {"remote": c.remote_address, "punched": c.punched, "initiator": c.initiator}
            for c in direct
        ]
        if direct and role == "a":
            result["direct_rtt_ms"] = round(1000 * await direct[0].ping(), 2)
        result["stats"] = vars(puncher.stats)
        await asyncio.sleep(3.0)  # the other side looks at the connection too before we leave
    finally:
        print(json.dumps(result, default=str), flush=True)
        await puncher.close()
        await host.close()


def main() -> None:
    logging.basicConfig(level=logging.INFO, format=f"[{sys.argv[1]}] %(name)s %(message)s")
    asyncio.run(pub() if sys.argv[1] == "pub" else peer(sys.argv[1]))


if __name__ == "__main__":
    main()
