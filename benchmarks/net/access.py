"""What access control costs: connection set-up in a moderated project, and the coordinator.

    python -m benchmarks.net.access --connections 200 --requests 100 --json out.json

1. Connection set-up, open vs moderated, side by side in one run: a fresh connection and its first
   RPC, repeated (each connection closed before the next), on loopback. In a moderated project both
   sides check the other's pass and the dialer waits for the other side's hello before it sends
   (one round trip more than an open project's pipelined first request).
2. Checking a pass: ``AccessGate.admit`` for a pass seen before (the signature is cached) and for a
   new one (an Ed25519 verification).
3. The coordinator on loopback: ``/login`` (scrypt, the default n=2^14), ``/pass`` (with its
   challenge and the proof that the peer holds its key) and
   ``/leaderboard`` latency over ``--requests`` sequential calls.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.kit.harness import ROOT, emit
from core.account import CoordinatorClient
from core.coordinator import CoordinatorService
from core.net import CallContext, Host, Identity, NetConfig
from core.net.host.gate import AccessGate
from core.project import load_manifest
from core.trust.passes import issue_pass

PROJECT = "bench-access"


def _ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50": round(statistics.median(ordered) * 1000, 3),
        "p90": round(ordered[int(0.9 * (len(ordered) - 1))] * 1000, 3),
    }


def _gate(key: Identity, identity: Identity) -> AccessGate:
    gate = AccessGate(PROJECT, key.peer_id, identity.peer_id)
    gate.set_pass(
        issue_pass(key, PROJECT, "bench", identity.peer_id, issued=time.time(), lifetime=3600)
    )
    return gate


async def _echo(ctx: CallContext, request: Any) -> Any:
    return request


async def connection_setup(count: int, moderated: bool) -> list[float]:
    key = Identity.generate()
    a_id, b_id = Identity.generate(), Identity.generate()
    config = NetConfig(close_grace=0.1)
    a = Host(a_id, config, access=_gate(key, a_id) if moderated else None)
    b = Host(b_id, config, access=_gate(key, b_id) if moderated else None)
    a.router.add_raw("bench.echo", _echo)
    await a.start()
    await b.start()
    times = []
    try:
        for _ in range(count):
            start = time.perf_counter()
            await b.call_raw(a.addresses[0], "bench.echo", 1)
            times.append(time.perf_counter() - start)
            for conn in b.connections(a.peer_id):
                await conn.close("next", grace=0.0)
            for conn in a.connections(b.peer_id):  # the other side forgets it too
                await conn.wait_closed()
    finally:
        await b.close()
        await a.close()
    return times


def pass_checks(count: int) -> dict[str, float]:
    key, me = Identity.generate(), Identity.generate()
    gate = _gate(key, me)
    others = [Identity.generate() for _ in range(count)]
    passes = [
        issue_pass(key, PROJECT, f"u{i}", o.peer_id, issued=time.time(), lifetime=3600).to_wire()
        for i, o in enumerate(others)
    ]
    start = time.perf_counter()
    for other, presented in zip(others, passes, strict=True):
        gate.admit(other.peer_id, presented)
    fresh = (time.perf_counter() - start) / count
    start = time.perf_counter()
    for other, presented in zip(others, passes, strict=True):
        gate.admit(other.peer_id, presented)
    cached = (time.perf_counter() - start) / count
    return {"new_pass_us": round(fresh * 1e6, 1), "seen_pass_us": round(cached * 1e6, 1)}


async def coordinator(requests: int) -> dict[str, Any]:
    key = Identity.generate()
    manifest = load_manifest(ROOT / "resources" / "demo" / "project.toml")
    manifest = manifest.with_network(coordinator_url="http://127.0.0.1:1").with_access(
        mode="moderated", project_key=str(key.peer_id)
    )
    with tempfile.TemporaryDirectory() as folder:
        service = CoordinatorService(manifest, Path(folder) / "c.db", key)
        await service.start()
        try:
            service.store.add_user("bench", "correct horse battery")
            async with CoordinatorClient(service.url) as client:
                logins, passes, boards = [], [], []
                tokens = None
                for _ in range(min(requests, 20)):  # scrypt: each login costs ~50 ms on purpose
                    start = time.perf_counter()
                    tokens = await client.login("bench", "correct horse battery")
                    logins.append(time.perf_counter() - start)
                assert tokens is not None
                peer = Identity.generate()
                project = manifest.project.name
                for _ in range(requests):  # each one a challenge, a signature and the pass
                    start = time.perf_counter()
                    await client.request_pass(tokens, peer.peer_id, peer.sign, project=project)
                    passes.append(time.perf_counter() - start)
                for _ in range(requests):
                    start = time.perf_counter()
                    await client.leaderboard(10)
                    boards.append(time.perf_counter() - start)
        finally:
            await service.close()
    return {"login_ms": _ms(logins), "pass_ms": _ms(passes), "leaderboard_ms": _ms(boards)}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    open_times, moderated_times = [], []
    for _ in range(2):  # alternate, so that machine noise falls on both
        open_times += await connection_setup(args.connections // 2, moderated=False)
        moderated_times += await connection_setup(args.connections // 2, moderated=True)
    open_ms, moderated_ms = _ms(open_times), _ms(moderated_times)
    return {
        "connections": len(open_times),
        "connect_and_first_call_open_ms": open_ms,
        "connect_and_first_call_moderated_ms": moderated_ms,
        "moderated_to_open_ratio": round(moderated_ms["p50"] / open_ms["p50"], 3),
        "pass_check": pass_checks(args.connections),
        "coordinator": await coordinator(args.requests),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--json", type=Path, default=None)
    arguments = parser.parse_args()
    emit(asyncio.run(main(arguments)), arguments.json)
