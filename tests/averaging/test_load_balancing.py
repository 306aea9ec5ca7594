"""The DeDLOC linear program and part sizes."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.averaging.round.load_balancing import PeerCapacity, PlanCache, solve, split

TRAINER = PeerCapacity(compute=1.0, upload=100.0, download=100.0)


def test_equal_peers_get_equal_shares() -> None:
    for batch in (None, 1000.0):
        plan = solve([TRAINER] * 4, vector_bytes=1e6, batch_size=batch)
        assert plan.shares == pytest.approx([0.25] * 4)


def test_a_peer_with_ten_times_the_bandwidth_and_no_compute_gets_most_of_the_vector() -> None:
    fast = PeerCapacity(compute=0.0, upload=1000.0, download=1000.0, reduce_only=True)
    for batch in (None, 1e7):  # communication-bound, and compute-bound
        plan = solve([TRAINER, TRAINER, TRAINER, fast], vector_bytes=1e6, batch_size=batch)
        assert plan.shares[3] > 0.9
    # a parameter server makes averaging faster than the three trainers alone could
    with_server = solve([TRAINER, TRAINER, TRAINER, fast], vector_bytes=1e6)
    alone = solve([TRAINER] * 3, vector_bytes=1e6)
    assert with_server.rounds_per_second > alone.rounds_per_second


def test_peers_behind_nat_reduce_nothing() -> None:
    natted = PeerCapacity(1.0, 100.0, 100.0, client=True)
    plan = solve([TRAINER, natted, TRAINER, natted], vector_bytes=1e6)
    assert plan.shares[1] == plan.shares[3] == 0.0
    assert plan.shares[0] == pytest.approx(0.5)
    assert plan.shares[2] == pytest.approx(0.5)


def test_heterogeneous_links_shift_work_to_the_fast() -> None:
    links = [PeerCapacity(1.0, b, b) for b in (400.0, 200.0, 100.0, 100.0)]
    plan = solve(links, vector_bytes=1e6)
    assert plan.shares[0] >= max(plan.shares[1:])
    assert sum(plan.shares) == pytest.approx(1.0)


@pytest.mark.parametrize("unit", [2.5e6, 4e6])
def test_when_slow_links_set_the_pace_the_work_goes_to_spare_capacity(unit: float) -> None:
    """4:2:1:1 trainers and a backbone at 8: many plans are equally fast (the slow links
    bind); the slow peers reduce nothing, the work goes where it uses the least link capacity (the
    fastest trainer and the helper tie there, and split it), whatever the member order."""
    links = [PeerCapacity(1.0, s * unit, s * unit) for s in (4, 2, 1, 1)]
    helper = PeerCapacity(0.0, 8 * unit, 8 * unit, reduce_only=True)
    plan = solve([*links, helper], vector_bytes=8e6)
    assert plan.shares == pytest.approx([0.5, 0, 0, 0, 0.5])
    faster_helper = replace(helper, upload=16 * unit, download=16 * unit)
    assert solve([*links, faster_helper], vector_bytes=8e6).shares == pytest.approx([0, 0, 0, 0, 1])
    assert 1 / plan.rounds_per_second == pytest.approx(8e6 / unit)  # the slowest link's own bytes
    backwards = solve([helper, *links[::-1]], vector_bytes=8e6)
    assert backwards.shares == pytest.approx(plan.shares[::-1])


def test_plans_are_cached_by_their_inputs() -> None:
    cache = PlanCache(size=2)
    peers = [TRAINER, PeerCapacity(1.0, 300.0, 300.0)]
    first = cache.plan(peers, 1e6)
    assert cache.plan(list(peers), 1e6) is first
    assert cache.plan(peers, 2e6) is not first
    cache.plan(peers, 3e6)  # evicts the oldest (1e6)
    assert cache.plan(peers, 1e6) is not first
    assert cache.plan(peers, 1e6).shares == first.shares
    unknown = [PeerCapacity(1.0, 0.0, 0.0)] * 3
    assert cache.plan(unknown, 1e6).shares == pytest.approx([1 / 3] * 3)


def test_the_solution_is_identical_in_another_process() -> None:
    peers = [
        PeerCapacity(1.0, 400.0, 350.0),
        PeerCapacity(2.0, 120.0, 200.0, client=True),
        PeerCapacity(0.5, 90.0, 100.0),
        PeerCapacity(0.0, 800.0, 800.0, reduce_only=True),
    ]
    here = solve(peers, vector_bytes=4e7, batch_size=4096.0)
    fields = [[p.compute, p.upload, p.download, p.client, p.reduce_only] for p in peers]
    code = (
        "import json; from core.averaging.round.load_balancing import PeerCapacity, solve\n"
        f"peers = [PeerCapacity(*p) for p in {fields!r}]\n"
        "plan = solve(peers, vector_bytes=4e7, batch_size=4096.0)\n"
        "print(json.dumps([list(plan.shares), list(plan.contributes), plan.rounds_per_second]))"
    )
    there = json.loads(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
    )
    assert there == [
        list(here.shares),
        list(here.contributes),
        here.rounds_per_second,
    ]  # bit for bit


def test_no_capacity_information_means_equal_shares_for_dialable_peers() -> None:
    blind = [
        PeerCapacity(0.0, 0.0, 0.0),
        PeerCapacity(0.0, 0.0, 0.0, client=True),
        PeerCapacity(0.0, 0.0, 0.0),
    ]
    assert solve(blind, vector_bytes=1e6).shares == (0.5, 0.0, 0.5)


@given(st.integers(0, 10**7), st.lists(st.floats(0, 1), min_size=1, max_size=16))
def test_split_covers_the_vector_exactly(total: int, raw: list[float]) -> None:
    shares = [s / sum(raw) for s in raw] if sum(raw) > 0 else [1.0 / len(raw)] * len(raw)
    sizes = split(total, shares)
    assert sum(sizes) == total
    assert all(size >= 0 for size in sizes)
    if any(s > 0 for s in shares):
        assert all(size == 0 for size, share in zip(sizes, shares, strict=True) if share == 0)


def test_split_drops_slivers() -> None:
    assert split(1000, [0.999, 0.001], min_part=10) == [1000, 0]
