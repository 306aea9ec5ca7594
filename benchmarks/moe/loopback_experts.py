"""Expert servers and a trainer on loopback, in one process: what the ``convergence`` and
``throughput`` parts of ``benchmarks/moe/suite.py`` run their models on.

``LoopbackSwarm.start`` builds ``servers`` expert servers, each a real ``core.net.Host`` listening on
127.0.0.1 with its own DHT node, its own ``TrainingBridge`` (one compute thread, as a volunteer's
server has) and its own seeded ``ServerFaults`` (injected latency and failures, per request, in the
server's handler). The experts of every grid are dealt to the servers round-robin, so a layer's
experts are spread over all of them, and announced in the DHT with ``declare_experts``. The trainer
gets its own Host, a client-mode DHT node bootstrapped from the first server, and a bridge with
``workers`` threads. Everything talks over real TLS connections on loopback: the only thing simulated
is the wide-area latency and the failures, by ``ServerFaults``.

The Hosts get a higher ``max_concurrent_calls`` than the default: with 64 batches in flight one
trainer connection can carry more than 512 concurrent expert calls, which a real swarm spreads over
many trainers' connections.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

ANNOUNCE_TTL = 24 * 3600.0
"""The announcements outlive any run, so no refresh task is needed."""


@dataclass
class LoopbackSwarm:
    """Expert servers on loopback (with their faults) and a trainer's Host, DHT client and bridge."""

    client: Any  # core.net.Host
    dht: Any  # core.dht.DHTNode (client mode)
    bridge: Any  # core.worker.bridge.TrainingBridge
    servers: list[Any] = field(default_factory=list)  # core.moe.server.server.ExpertServer
    faults: list[Any] = field(default_factory=list)  # core.moe.server.faults.ServerFaults
    hosts: list[Any] = field(default_factory=list)
    nodes: list[Any] = field(default_factory=list)
    server_bridges: list[Any] = field(default_factory=list)
    addresses: dict[str, str] = field(default_factory=dict)
    """Expert uid -> the address of the server holding it."""

    @classmethod
    async def start(
        cls,
        grids: Sequence[tuple[Any, Callable[[str], Any]]],
        *,
        servers: int,
        workers: int,
        mean_latency: float = 0.0,
        failure_rate: float = 0.0,
        seed: int = 0,
        max_wait: float = 0.005,
        max_queue: int | None = None,
    ) -> LoopbackSwarm:
        """Serve every uid of each ``(grid, backend_for_uid)`` on ``servers`` servers, uids dealt
        round-robin (uid ``i`` of all grids together on server ``i % servers``); ``max_wait`` and
        ``max_queue`` are the servers' batching wait and queue bound (``TaskPool``; the server's
        default queue when None).

        Server ``i``'s faults are seeded with ``seed * 1000 + i``: reproducible draws per server.
        """
        from core.dht import DHTConfig, DHTNode, HostTransport
        from core.moe.announce import declare_experts
        from core.moe.server.faults import ServerFaults
        from core.moe.server.server import ExpertServer
        from core.net import Host, Identity, NetConfig
        from core.worker.bridge import TrainingBridge

        config = NetConfig(max_concurrent_calls=8192, call_timeout=60.0)
        dht_config = DHTConfig(rpc_timeout=5.0)
        hosts: list[Any] = []
        nodes: list[Any] = []
        bridges: list[Any] = []
        server_list: list[Any] = []
        addresses: dict[str, str] = {}
        fault_list: list[Any] = []
        assigned: list[list[tuple[Any, str, Callable[[str], Any]]]] = [[] for _ in range(servers)]
        turn = 0
        for grid, backend_for in grids:
            for uid in grid.all_uids():
                assigned[turn % servers].append((grid, uid, backend_for))
                turn += 1
        swarm: LoopbackSwarm | None = None
        try:
            for index in range(servers):
                host = Host(Identity.generate(), config)
                hosts.append(host)
                await host.start()
                node = DHTNode(HostTransport(host), dht_config)
                bootstrap = [str(nodes[0].state.transport.addresses()[0])] if nodes else []
                nodes.append(node)
                await node.start(bootstrap)
                bridge = TrainingBridge(f"experts-{index}")
                bridges.append(bridge)
                faults = ServerFaults(mean_latency, failure_rate, seed=seed * 1000 + index)
                fault_list.append(faults)
                backends = [backend_for(uid) for _, uid, backend_for in assigned[index]]
                server = ExpertServer(
                    host, bridge, backends, max_queue=max_queue, max_wait=max_wait, faults=faults
                )
                server_list.append(server)
                await server.start()
                by_grid: dict[Any, list[str]] = {}
                for grid, uid, _ in assigned[index]:
                    by_grid.setdefault(grid, []).append(uid)
                    addresses[uid] = str(host.addresses[0])
                for grid, uids in by_grid.items():
                    stored = await declare_experts(
                        node, grid, uids, host.addresses[0], time.time() + ANNOUNCE_TTL
                    )
                    missing = [uid for uid, ok in stored.items() if not ok]
                    if missing:
                        raise RuntimeError(f"{len(missing)} experts were not announced")
            client = Host(Identity.generate(), config)
            hosts.append(client)
            await client.start()
            dht = DHTNode(HostTransport(client), DHTConfig(rpc_timeout=5.0, client_mode=True))
            nodes.append(dht)
            await dht.start([str(nodes[0].state.transport.addresses()[0])])
            swarm = cls(
                client,
                dht,
                TrainingBridge("trainer", workers=workers),
                server_list,
                fault_list,
                hosts,
                nodes,
                bridges,
                addresses,
            )
            return swarm
        finally:
            if swarm is None:  # a failed start closes what it started
                await _close_all(server_list, nodes, bridges, hosts)

    async def close(self) -> None:
        """Close the trainer's bridge, the servers, DHT nodes, server bridges and Hosts."""
        await self.bridge.aclose()
        await _close_all(self.servers, self.nodes, self.server_bridges, self.hosts)

    def fault_counts(self) -> dict[str, Any]:
        """The faults injected so far, over every server: requests, failures, realised latency."""
        requests = sum(f.requests for f in self.faults)
        failures = sum(f.failures for f in self.faults)
        latency = sum(f.total_latency for f in self.faults)
        return {
            "requests": requests,
            "failures": failures,
            "failure_rate": round(failures / requests, 4) if requests else None,
            "mean_latency_ms": round(1000 * latency / requests, 2) if requests else None,
        }


async def _close_all(
    servers: Sequence[Any], nodes: Sequence[Any], bridges: Sequence[Any], hosts: Sequence[Any]
) -> None:
    for server in servers:
        await server.close()
    for node in nodes:
        await node.close()
    for bridge in bridges:
        await bridge.aclose()
    for host in hosts:
        await host.close()
