"""Group rounds on a grid reach the global mean; state downloads survive a donor that leaves."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from core.averaging.messages import StateRequest
from core.averaging.moshpit import Grid, moshpit_average
from core.averaging.sharing.state import PackedState, StateDownloadError, StateSharing
from core.averaging.sharing.vouching import Vouching
from core.net.wire.rpc import CallContext
from core.net.wire.stream import Stream
from tests.averaging.conftest import PATIENT, QUICK, MakeAveragers
from tests.support.leaks import HANG_GUARD

ONE_DONOR = Vouching(networks=1)
"""Any donor's state will do: for the tests of serving and fetching (``test_state_vouching``
tests whom a downloader believes)."""


async def test_sixteen_peers_on_a_4x4_grid_reach_the_exact_weighted_mean_in_two_rounds(
    make_averagers: MakeAveragers,
) -> None:
    averagers = await make_averagers(16, replace(PATIENT, target_group_size=4, min_group_size=4))
    grid = Grid(2, 4)
    rng = np.random.default_rng(5)
    tensors = [[rng.standard_normal(3000).astype(np.float32)] for _ in range(16)]
    weights = [float(1 + i % 5) for i in range(16)]
    expected = sum(w * t[0] for t, w in zip(tensors, weights, strict=True)) / sum(weights)
    outcomes = await asyncio.gather(
        *(
            moshpit_average(
                a, t, grid=grid, coords=(i // 4, i % 4), weight=w, base_key="m", timeout=HANG_GUARD
            )
            for i, (a, t, w) in enumerate(zip(averagers, tensors, weights, strict=True))
        )
    )
    for outcome, mine in zip(outcomes, tensors, strict=True):
        assert outcome.complete
        assert [len(r.members) for r in outcome.results] == [4, 4]
        assert outcome.weight == pytest.approx(sum(weights))
        np.testing.assert_allclose(mine[0], expected, atol=1e-5)
    # round one mixed everyone: each second-round group held one member of every first-round group
    first_groups = {o.results[0].group_id for o in outcomes}
    for group_id in {o.results[1].group_id for o in outcomes}:
        members = [o for o in outcomes if o.results[1].group_id == group_id]
        assert {o.results[0].group_id for o in members} == first_groups


async def test_without_a_grid_the_group_size_comes_from_the_failure_rate(
    make_averagers: MakeAveragers,
) -> None:
    averagers = await make_averagers(4, replace(PATIENT, target_group_size=4, min_group_size=4))
    tensors = [[np.full(2000, float(i), np.float32)] for i in range(4)]
    outcomes = await asyncio.gather(
        *(
            moshpit_average(a, t, peers=4, base_key="auto", timeout=HANG_GUARD)
            for a, t in zip(averagers, tensors, strict=True)
        )
    )
    for outcome, mine in zip(outcomes, tensors, strict=True):
        assert outcome.complete  # no failures seen: one group of all four, one round
        assert [len(r.members) for r in outcome.results] == [4]
        np.testing.assert_allclose(mine[0], 1.5)
    assert all(a.failure_rate == 0.0 for a in averagers)
    with pytest.raises(ValueError, match="grid or the number of peers"):
        await moshpit_average(averagers[0], tensors[0])


def state(seed: int = 3) -> tuple[int, dict[str, Any], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    tensors = [
        rng.standard_normal((500, 900)).astype(np.float32),
        np.arange(10, dtype=np.int64),
        np.array(3.5, dtype=np.float64),
    ]
    return 7, {"epoch": 7, "optimizer": "lamb"}, tensors


async def test_state_comes_from_several_donors_and_resumes_when_one_leaves(
    make_averagers: MakeAveragers, monkeypatch: pytest.MonkeyPatch
) -> None:
    averagers = await make_averagers(4)
    donors = [StateSharing(a.host, a.dht, "test") for a in averagers[:3]]
    quitter = donors[0]
    original = StateSharing._on_range

    async def serve_half_then_leave(
        self: StateSharing, ctx: CallContext, request: StateRequest, stream: Stream
    ) -> Any:
        if self is not quitter:
            return await original(self, ctx, request, stream)
        snapshot = await self._current()
        middle = (request.start + request.end) // 2
        await stream.send_data(snapshot.data[request.start : middle].data)
        await asyncio.sleep(0.05)  # (enough for that half to leave, if the machine lets it)
        await self._host.close()
        await asyncio.sleep(30)  # hangs, as a handler of a machine that went away would
        return None

    # before serve(): the handler is bound when it is registered
    monkeypatch.setattr(StateSharing, "_on_range", serve_half_then_leave)
    for donor in donors:
        donor.serve(state)
        assert await donor.announce(7)
    downloader = StateSharing(averagers[3].host, averagers[3].dht, "test")
    got = await downloader.download(timeout=30, max_donors=3, range_bytes=256 * 1024)
    version, metadata, tensors = state()
    assert got.version == version
    assert got.metadata == metadata
    for mine, theirs in zip(got.tensors, tensors, strict=True):
        assert mine.dtype == theirs.dtype
        np.testing.assert_array_equal(mine, theirs)
    assert quitter._host.peer_id not in got.donors
    assert len(got.donors) >= 1


async def test_no_donor_is_a_clear_error(make_averagers: MakeAveragers) -> None:
    (averager,) = await make_averagers(1)
    with pytest.raises(StateDownloadError, match="no peer announces a state"):
        await StateSharing(averager.host, averager.dht, "nobody").download(timeout=5)


async def test_a_packed_state_is_packed_once_per_version_and_only_when_asked(
    make_averagers: MakeAveragers,
) -> None:
    donor_averager, first, second = await make_averagers(3)
    version = [3]
    packs: list[int] = []

    async def pack() -> PackedState:
        packs.append(version[0])
        values = np.full(5000, version[0], np.float32)
        return PackedState(
            version[0], {"epoch": version[0]}, [[5000]], ["<f4"], values.view(np.uint8)
        )

    donor = StateSharing(donor_averager.host, donor_averager.dht, "packed")
    donor.serve_packed(lambda: version[0], pack)
    assert await donor.announce(3)
    assert packs == []  # nobody asked yet
    for downloader in (first, second):  # two downloads of one version: one packing
        got = await StateSharing(downloader.host, downloader.dht, "packed").download(
            timeout=10, range_bytes=4096, vouching=ONE_DONOR
        )
        assert got.version == 3
        np.testing.assert_array_equal(got.tensors[0], np.full(5000, 3, np.float32))
    assert packs == [3]
    version[0] = 4  # the state moved on: the next download packs it anew
    assert await donor.announce(4)
    got = await StateSharing(first.host, first.dht, "packed").download(
        newer_than=3, timeout=10, vouching=ONE_DONOR
    )
    assert got.version == 4
    assert packs == [3, 4]


async def test_the_freshest_state_wins(make_averagers: MakeAveragers) -> None:
    averagers = await make_averagers(4)
    versions = [5, 9, 5]
    for averager, version in zip(averagers, versions, strict=False):
        donor = StateSharing(averager.host, averager.dht, "test")
        donor.serve(lambda v=version: (v, {"epoch": v}, [np.full(1000, v, np.float32)]))
        assert await donor.announce(version)
    got = await StateSharing(averagers[3].host, averagers[3].dht, "test").download(
        timeout=10, vouching=ONE_DONOR
    )
    assert got.version == 9
    assert got.metadata == {"epoch": 9}
    np.testing.assert_array_equal(got.tensors[0], np.full(1000, 9, np.float32))
    assert got.donors == [averagers[1].host.peer_id]
    # a donor on the ban list (a reducer caught lying) is never loaded from, however new its state
    downloader = averagers[3]
    downloader.bans.ban(averagers[1].host.peer_id, 60, "reducer_mismatch")
    careful = StateSharing(
        downloader.host, downloader.dht, "test", refuse=downloader.bans.__contains__
    )
    got = await careful.download(timeout=10, vouching=ONE_DONOR)
    assert got.version == 5
    assert averagers[1].host.peer_id not in got.donors


async def test_a_failure_only_touches_its_own_group(make_averagers: MakeAveragers) -> None:
    """8 peers on a 2x4 grid: round 0 forms groups {0..3} and {4..7}; peer 2 dies after matchmaking."""
    averagers = await make_averagers(8, replace(QUICK, target_group_size=4, min_group_size=2))
    grid = Grid(2, 4)
    coords = [(i % 4, i // 4) for i in range(8)]
    keys = [grid.key("g", 0, c) for c in coords]
    assert len(set(keys)) == 2
    pending = await asyncio.gather(
        *(a.prepare(k, timeout=HANG_GUARD) for a, k in zip(averagers, keys, strict=True))
    )
    victim = 2
    await averagers[victim].close()
    await averagers[victim].host.close()
    tensors = [[np.full(5000, float(i), np.float32)] for i in range(8)]
    results = await asyncio.gather(
        *(p.run(t) for i, (p, t) in enumerate(zip(pending, tensors, strict=True)) if i != victim)
    )
    by_peer = dict(zip([i for i in range(8) if i != victim], results, strict=True))
    for i in range(4, 8):
        assert by_peer[i].complete, by_peer[i].summary()
        np.testing.assert_allclose(tensors[i][0], (4 + 5 + 6 + 7) / 4)
    for i in (0, 1, 3):
        assert not by_peer[i].complete
        assert by_peer[i].missing
        assert averagers[victim].host.peer_id in by_peer[i].failed_members()
        assert averagers[i].failure_rate == pytest.approx(0.2 * 1 / 3)  # one of three others
    assert averagers[4].failure_rate == 0.0
