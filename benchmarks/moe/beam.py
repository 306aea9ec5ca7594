"""Part ``beam`` of ``benchmarks/moe/suite.py``: beam-search latency on a simulated DHT of N nodes.

Learning@home (Section 4.1) deployed DHT nodes in three cloud regions and timed finding the top-4
experts for a batch of 64 inputs: 317 ± 58 ms at 100 nodes, 528 ± 127 ms at 1,000 and 764 ± 106 ms
at 10,000. This part repeats that on ``core.dht.memory``'s in-memory network, in one process:

1. Build N DHT nodes (``--beam-build``): ``join`` starts them one after another, each bootstrapping
   from three random earlier nodes as in production (12 s for 1,000 nodes and 54 s for 3,000 here,
   growing faster than N: too slow for 10,000); ``direct`` fills every node's routing table at once
   from the sorted list of node ids: for each bit position b, up to k random nodes of the subtree
   that shares our first b bits and differs at bit b (exactly the ranges Kademlia's buckets cover),
   added through ``RoutingTable.add`` so bucket splitting is the node's own (about 9 s for 10,000).
   That is the table of a node that has run long enough to fill its buckets (joined nodes know fewer:
   ``routing_table`` shows both), and lookups on it follow the same protocol. The ``validation``
   block checks that they work: the nearest node a lookup finds is the true nearest (brute force),
   and records stored from one node are found from another. ``join_check`` runs the same searches on
   a swarm of ``--beam-join-check`` nodes built by joins, to show what the direct build changes.
2. Announce experts on a grid (``--beam-grid``, default 32x32: d = 2; ``--beam-experts`` uids drawn
   at random) from ``--beam-servers`` nodes with ``core.moe.announce.declare_experts``.
3. Time ``MoEBeamSearch.find_best_experts`` (batch ``--beam-batch``, k = beam width =
   ``--beam-k``, as in Algorithm 1 and the paper's top-4 for a batch of 64) from random nodes, one
   search at a time. The search's own prefix cache is off, and unless ``--beam-warm-cache`` every
   node's DHT lookup cache is emptied before each search, so every search makes its d lookup rounds
   from scratch and only the replica holders of a prefix can answer it.

Latency model (``MemoryNetwork.latency``, on only while searching): every node is placed in one of
``--beam-regions`` regions at random (the paper used three: West US, East US, West Europe). A request
between regions takes a round trip drawn for each request from a gamma distribution with mean
``--beam-rtt-ms`` and standard deviation ``--beam-rtt-sd-ms`` (default 92.5 ± 32.4 ms, the latency
the paper measured between its regions); within a region, ``--beam-local-rtt-ms``.

Reported per size: wall time per search (mean, sd, p50, p99), the process's CPU time per search
(every node's work runs in this one process and adds to the wall time; on real peers it would run
in parallel), lookup rounds, sequential hops (per round, the most hops any key's lookup needed,
summed over rounds) and find RPCs per search. ``results_equal_exact`` counts searches whose experts
equal those of the same search run on the announced records themselves; ``prefix_records_incomplete``
counts prefix records a lookup returned with fewer entries than were announced (a lookup stops at
the first copy it meets, and a replica outside the nodes that every server stored to holds only
some servers' entries), which is what makes a search differ. The garbage collector is frozen after
building (``--beam-gc-scan`` to keep it scanning): one process holds millions of the swarm's
objects, and full collections rescanning them paused searches by up to 1.2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from benchmarks.kit.measuring import ms_stats
from benchmarks.moe.beam_swarm import RegionLatency, build_direct, build_join, quiet, validate

NAME = "beam"
HELP = "beam-search latency on an in-memory DHT of 100 to 10,000 nodes with simulated latency"
DEFAULTS: dict[str, Any] = {
    "beam_nodes": "100,1000,10000",
    "beam_build": "direct",
    "beam_join_check": 1000,
    "beam_grid": "32x32",
    "beam_experts": 256,
    "beam_servers": 16,
    "beam_batch": 64,
    "beam_k": 4,
    "beam_searches": 50,
    "beam_regions": 3,
    "beam_rtt_ms": 92.5,
    "beam_rtt_sd_ms": 32.4,
    "beam_local_rtt_ms": 1.0,
    "beam_checks": 30,
    "beam_seed": 0,
    "beam_reads": "first",
}
QUICK: dict[str, Any] = {
    "beam_nodes": "100,300",
    "beam_join_check": 100,
    "beam_experts": 64,
    "beam_servers": 4,
    "beam_batch": 16,
    "beam_searches": 4,
    "beam_rtt_ms": 10.0,
    "beam_rtt_sd_ms": 3.0,
    "beam_checks": 5,
}
PAPER_MS = {100: (317, 58), 1000: (528, 127), 10000: (764, 106)}
"""Learning@home, Section 4.1: top-4 experts for a batch of 64, DHT nodes in three cloud regions."""


def add_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("part beam")
    group.add_argument("--beam-nodes", help="comma-separated swarm sizes")
    group.add_argument("--beam-build", choices=["direct", "join"], help="how the swarm is built")
    group.add_argument(
        "--beam-join-check",
        type=int,
        help="also search a swarm of this size built by joins (0: no)",
    )
    group.add_argument("--beam-grid", help="grid shape, e.g. 32x32")
    group.add_argument("--beam-experts", type=int, help="live experts, drawn at random on the grid")
    group.add_argument("--beam-servers", type=int, help="nodes that announce the experts")
    group.add_argument("--beam-batch", type=int, help="inputs per search")
    group.add_argument("--beam-k", type=int, help="experts per input (and beam width)")
    group.add_argument("--beam-searches", type=int, help="timed searches per swarm size")
    group.add_argument("--beam-regions", type=int, help="regions nodes are spread over")
    group.add_argument("--beam-rtt-ms", type=float, help="mean round trip between regions")
    group.add_argument("--beam-rtt-sd-ms", type=float, help="its standard deviation")
    group.add_argument("--beam-local-rtt-ms", type=float, help="round trip within a region")
    group.add_argument(
        "--beam-warm-cache",
        action="store_true",
        help="keep the DHT's lookup caches between searches (default: emptied, cold)",
    )
    group.add_argument(
        "--beam-reads",
        choices=["first", "whole"],
        help="prefix records read as the first copy found (the default, MoEBeamSearch's), or "
        "whole: every replica asked and merged (complete_records; slower, misses no expert)",
    )
    group.add_argument("--beam-checks", type=int, help="validation lookups and records per swarm")
    group.add_argument("--beam-seed", type=int)
    group.add_argument(
        "--beam-gc-scan",
        action="store_true",
        help="let the garbage collector rescan the simulated swarm while searching (default: "
        "gc.freeze() after building)",
    )


# ---- the searches ----------------------------------------------------------------------------------


class AnnouncedRecords:
    """The announced records themselves, as a ``PrefixSource``: the exact answer to compare with."""

    def __init__(self, items: Sequence[tuple[Any, ...]]) -> None:
        from core.dht.records import ValueWithExpiration

        self._records: dict[Any, Any] = {}
        for key, value, expiration, *subkey in items:
            if subkey:
                entries = self._records.setdefault(key, {})
                entries[subkey[0]] = ValueWithExpiration(value, expiration)
        self._wrap = ValueWithExpiration

    async def get_many(self, keys: Sequence[Any], latest: bool = False) -> list[Any]:
        return [
            self._wrap(self._records[key], 0.0) if key in self._records else None for key in keys
        ]


class AuditedSource:
    """A node's ``get_many``, counting prefix records that came back missing or incomplete."""

    def __init__(self, node: Any, announced: dict[Any, set[Any]]) -> None:
        self._node = node
        self._announced = announced
        self.incomplete = 0
        self.examples: list[str] = []

    async def get_many(self, keys: Sequence[Any], latest: bool = False) -> list[Any]:
        records = await self._node.get_many(keys, latest)
        for key, record in zip(keys, records, strict=True):
            value = record.value if record is not None else None
            got = set(value) if isinstance(value, dict) else set()
            wanted = self._announced.get(key, set())
            if got != wanted:
                self.incomplete += 1
                self.examples.append(f"{key}: {len(got & wanted)} of {len(wanted)} entries")
        return list(records)


class LookupRecorder:
    """Records, for each ``get_many`` round a node runs, the most hops any key's lookup took."""

    def __init__(self, node: Any) -> None:
        self.rounds: list[int] = []
        self._lookups = node.lookups
        original: Callable[..., Awaitable[list[Any]]] = node.lookups.run

        async def run(targets: list[int], **options: Any) -> list[Any]:
            searches = await original(targets, **options)
            self.rounds.append(max((s.hops for s in searches), default=0))
            return searches

        self._lookups.run = run  # an instance attribute: shadows the method until close()

    def close(self) -> None:
        del self._lookups.run


def empty_lookup_caches(nodes: list[Any]) -> None:
    """Forget every value a lookup cached on the way (a cold DHT: only replica holders answer)."""
    from core.dht.storage import RecordStore

    for node in nodes:
        state = node.state
        if len(state.cache):
            state.cache = RecordStore(
                state.clock, state.config.cache_capacity, max_bytes=state.config.cache_bytes
            )


async def announce(
    nodes: list[Any], args: argparse.Namespace, rng: random.Random
) -> tuple[Any, list[tuple[Any, ...]], dict[str, Any]]:
    """Announce ``--beam-experts`` random uids of the grid from ``--beam-servers`` random nodes.

    Returns the grid, the DHT items announced (to compare searches with) and a report.
    """
    from core.moe.announce import announcement, declare_experts
    from core.moe.grid import ExpertGrid

    grid = ExpertGrid("ffn", tuple(int(s) for s in args.beam_grid.lower().split("x")))
    every = itertools.product(*(range(size) for size in grid.shape))
    uids = [grid.uid(c) for c in sorted(rng.sample(list(every), args.beam_experts))]
    servers = rng.sample(nodes, min(args.beam_servers, len(nodes)))
    expiration = time.time() + 3600
    items: list[tuple[Any, ...]] = []
    accepted = 0
    for index, server in enumerate(servers):
        mine = uids[index :: len(servers)]
        address = str(server.state.transport.addresses()[0])
        report = await declare_experts(server, grid, mine, address, expiration)
        accepted += sum(report.values())
        items += announcement(grid, mine, address, expiration, server.peer_id)
    return grid, items, {"experts": len(uids), "accepted": accepted, "servers": len(servers)}


async def time_searches(
    args: argparse.Namespace,
    nodes: list[Any],
    network: Any,
    *,
    grid: Any,
    items: list[tuple[Any, ...]],
    rng: random.Random,
    seed: int,
) -> dict[str, Any]:
    """``--beam-searches`` searches from random nodes, one at a time, each checked against the
    same search on the announced records themselves."""
    import torch

    from core.moe.client.beam_search import MoEBeamSearch

    exact = MoEBeamSearch(AnnouncedRecords(items), grid, cache_ttl=0)
    announced: dict[Any, set[Any]] = {}
    for key, _, _, *subkey in items:
        if subkey:
            announced.setdefault(key, set()).add(subkey[0])
    generator = torch.Generator().manual_seed(seed)
    walls, cpus, rounds, hops, finds = [], [], [], [], []
    matches = found = incomplete = 0
    examples: list[str] = []
    for _ in range(args.beam_searches):
        if not args.beam_warm_cache:
            empty_lookup_caches(nodes)
        scores = [torch.randn(args.beam_batch, size, generator=generator) for size in grid.shape]
        searcher = rng.choice(nodes)
        source = AuditedSource(searcher, announced)
        search = MoEBeamSearch(  # no prefix cache: d rounds each time
            source, grid, cache_ttl=0, complete_records=args.beam_reads == "whole"
        )
        recorder = LookupRecorder(searcher)
        finds_before = network.calls["find"]
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            result = await search.find_best_experts(scores, args.beam_k)
        finally:
            recorder.close()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        finds.append(network.calls["find"] - finds_before)
        rounds.append(search.lookups)
        hops.append(sum(recorder.rounds))
        expected = await exact.find_best_experts(scores, args.beam_k)
        matches += [[e.uid for e in r] for r in result] == [[e.uid for e in r] for r in expected]
        found += sum(len(r) for r in result)
        incomplete += source.incomplete
        examples += source.examples
        await quiet(network)  # the caching stores a search leaves behind end before the next
    return {
        "search": ms_stats(walls),
        "cpu_per_search_ms": round(1000 * statistics.mean(cpus), 1),
        "lookup_rounds_per_search": round(statistics.mean(rounds), 2),
        "hops_per_search": {"mean": round(statistics.mean(hops), 2), "max": max(hops)},
        "find_rpcs_per_search": round(statistics.mean(finds), 1),
        "searches": args.beam_searches,
        "results_equal_exact": matches,
        "prefix_records_incomplete": incomplete,
        "incomplete_examples": examples[:5],
        "experts_per_input": round(found / (args.beam_searches * args.beam_batch), 2),
    }


async def measure(args: argparse.Namespace, count: int, build: str, seed: int) -> dict[str, Any]:
    """One row: build a swarm of ``count`` nodes, validate it, announce the experts, search."""
    from core.dht.memory import MemoryNetwork

    rng = random.Random(seed)
    network = MemoryNetwork()  # no latency while building, validating and announcing
    row: dict[str, Any] = {"nodes": count, "build": build}
    started, cpu = time.perf_counter(), time.process_time()
    nodes = await (build_direct if build == "direct" else build_join)(network, count, rng)
    try:
        await quiet(network)
        row["build_s"] = round(time.perf_counter() - started, 2)
        row["build_cpu_s"] = round(time.process_time() - cpu, 2)
        tables = [len(n.table) for n in nodes]
        row["routing_table"] = {
            "mean": round(statistics.mean(tables), 1),
            "min": min(tables),
            "max": max(tables),
        }
        row["validation"] = await validate(nodes, args.beam_checks, rng)
        await quiet(network)
        grid, items, row["announced"] = await announce(nodes, args, rng)
        await quiet(network)
        latency = RegionLatency(
            args.beam_regions,
            args.beam_rtt_ms / 1000,
            args.beam_rtt_sd_ms / 1000,
            args.beam_local_rtt_ms / 1000,
            seed,
        )
        for node in nodes:
            latency.place(node.peer_id)
        if not args.beam_gc_scan:  # see the module doc
            gc.collect()
            gc.freeze()
        network.latency = latency
        row.update(
            await time_searches(args, nodes, network, grid=grid, items=items, rng=rng, seed=seed)
        )
        if count in PAPER_MS and (args.beam_batch, args.beam_k) == (64, 4):  # the paper's shape
            row["paper_ms"] = {"mean": PAPER_MS[count][0], "sd": PAPER_MS[count][1]}
    finally:
        network.latency = None
        gc.unfreeze()
        for node in nodes:
            await node.close()
    return row


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The part's entry point: one row per swarm size, and the join-built comparison."""
    sizes = [int(s) for s in str(args.beam_nodes).split(",") if s]
    result: dict[str, Any] = {
        "settings": {
            "grid": args.beam_grid,
            "experts": args.beam_experts,
            "servers": args.beam_servers,
            "batch": args.beam_batch,
            "k": args.beam_k,
            "beam_size": args.beam_k,
            "searches": args.beam_searches,
            "dht_cache": "warm" if args.beam_warm_cache else "cold",
            "prefix_reads": args.beam_reads,
            "gc_frozen_while_searching": not args.beam_gc_scan,
            "latency": {
                "regions": args.beam_regions,
                "inter_region_rtt_ms": {"mean": args.beam_rtt_ms, "sd": args.beam_rtt_sd_ms},
                "intra_region_rtt_ms": args.beam_local_rtt_ms,
                "distribution": "gamma, drawn per request",
            },
        },
        "sizes": [],
    }
    for index, count in enumerate(sizes):
        print(f"  beam: {count} nodes ({args.beam_build})", file=sys.stderr, flush=True)
        row = asyncio.run(measure(args, count, args.beam_build, args.beam_seed + index))
        result["sizes"].append(row)
    if args.beam_join_check:
        print(f"  beam: {args.beam_join_check} nodes (join)", file=sys.stderr, flush=True)
        result["join_check"] = asyncio.run(
            measure(args, args.beam_join_check, "join", args.beam_seed + 100)
        )
    return result


def summarize(result: dict[str, Any]) -> list[str]:
    lines = []
    rows = list(result.get("sizes", []))
    if "join_check" in result:
        rows.append(result["join_check"])
    for row in rows:
        s = row["search"]
        paper = row.get("paper_ms")
        lines.append(
            f"{row['nodes']:>6} nodes ({row['build']}, built in {row['build_s']} s): "
            f"search {s['mean_ms']} ms mean, p50 {s['p50_ms']}, p99 {s['p99_ms']}"
            + (f" (paper {paper['mean']} ± {paper['sd']})" if paper else "")
            + f"; {row['hops_per_search']['mean']} hops, {row['find_rpcs_per_search']} find RPCs, "
            f"cpu {row['cpu_per_search_ms']} ms; exact {row['results_equal_exact']}/"
            f"{row['searches']}, incomplete records {row['prefix_records_incomplete']}"
        )
    return lines
