"""The batched beam search against brute force, its DHT lookup count, its cache, and bad input."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest
import torch

from core.dht.records import ValueWithExpiration, owner_marker
from core.moe.announce import announcement, declare_experts
from core.moe.client.beam_search import BeamSearchError, FoundExpert, MoEBeamSearch
from core.moe.grid import ExpertGrid
from core.trust.identity import Identity
from core.util.clock import FakeClock
from tests.moe.test_announce import build_swarm

OWNER = Identity.generate().peer_id
MINE = owner_marker(OWNER)


class FakeDHT:
    """Records as the DHT returns them, with every ``get_many`` round and key counted."""

    def __init__(self) -> None:
        self.records: dict[Any, Any] = {}
        self.rounds: list[list[Any]] = []
        self.latest: list[bool] = []
        self.peer_id = OWNER

    async def store_many(self, items: Sequence[tuple[Any, ...]]) -> list[bool]:
        for key, value, expiration, *subkey in items:
            if subkey:
                entries = self.records.setdefault(key, {})
                entries[subkey[0]] = ValueWithExpiration(value, expiration)
            else:
                self.records[key] = value
        return [True] * len(items)

    async def get_many(
        self, keys: Sequence[Any], latest: bool = False
    ) -> list[ValueWithExpiration | None]:
        self.rounds.append(list(keys))
        self.latest.append(latest)
        return [
            None if key not in self.records else ValueWithExpiration(self.records[key], 0.0)
            for key in keys
        ]


async def serve(grid: ExpertGrid, live: Sequence[str]) -> FakeDHT:
    dht = FakeDHT()
    await dht.store_many(announcement(grid, live, "", 1.0, OWNER))
    for uid in live:  # each expert at its own address, so the test sees addresses travel
        coords = grid.parse(uid)
        dht.records[grid.key(coords[:-1])][f"{coords[-1]}{MINE}"] = ValueWithExpiration(
            f"server-of-{uid}", 1.0
        )
    return dht


def random_scores(grid: ExpertGrid, batch: int, seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [
        torch.randn(batch, size, generator=generator, dtype=torch.float64) for size in grid.shape
    ]


def brute_force(
    grid: ExpertGrid, live: Sequence[str], scores: list[torch.Tensor], k: int
) -> list[list[tuple[str, float]]]:
    """Every live expert scored for every input; the k best (ties to the smaller coordinates)."""
    result = []
    for row in range(scores[0].shape[0]):
        scored = []
        for uid in live:
            coords = grid.parse(uid)
            total = sum(float(scores[d][row, i]) for d, i in enumerate(coords))
            scored.append((-total, coords, uid))
        result.append([(uid, -neg) for neg, _, uid in sorted(scored)[:k]])
    return result


def as_pairs(found: list[list[FoundExpert]]) -> list[list[tuple[str, float]]]:
    return [[(e.uid, e.score) for e in row] for row in found]


def assert_same(
    found: list[list[FoundExpert]],
    expected: list[list[tuple[str, float]]],
    owner: dict[str, str] | None = None,
) -> None:
    """Same uids in the same order, same scores, and each at its server's address."""
    got = as_pairs(found)
    assert [[uid for uid, _ in row] for row in got] == [[uid for uid, _ in row] for row in expected]
    for got_row, expected_row in zip(got, expected, strict=True):
        assert [s for _, s in got_row] == pytest.approx([s for _, s in expected_row])
    for row in found:
        for e in row:
            assert e.address == (f"server-of-{e.uid}" if owner is None else owner[e.uid])


GRIDS = [ExpertGrid("g", (16,)), ExpertGrid("g", (6, 7)), ExpertGrid("g", (4, 3, 5))]


@pytest.mark.parametrize("grid", GRIDS, ids=lambda g: "x".join(map(str, g.shape)))
async def test_a_wide_beam_equals_brute_force_with_random_dead_experts(grid: ExpertGrid) -> None:
    rng = random.Random(grid.size)
    for trial in range(5):
        live = [uid for uid in grid.all_uids() if rng.random() < 0.4]
        search = MoEBeamSearch(await serve(grid, live), grid, clock=FakeClock())
        scores = random_scores(grid, batch=8, seed=trial)
        found = await search.find_best_experts(scores, k=4, beam_size=grid.size)
        assert_same(found, brute_force(grid, live, scores, 4))


@pytest.mark.parametrize("grid", GRIDS[1:], ids=lambda g: "x".join(map(str, g.shape)))
async def test_a_beam_of_k_equals_brute_force_when_live_experts_form_a_product(
    grid: ExpertGrid,
) -> None:
    """With additive scores, a prefix's rank is its best completion's rank when every live prefix
    has the same live children: then keeping k prefixes per depth loses nothing."""
    rng = random.Random(7)
    for trial in range(5):
        alive = [sorted(rng.sample(range(size), max(1, size // 2))) for size in grid.shape]
        live = [
            uid
            for uid in grid.all_uids()
            if all(i in a for i, a in zip(grid.parse(uid), alive, strict=True))
        ]
        search = MoEBeamSearch(await serve(grid, live), grid, clock=FakeClock())
        scores = random_scores(grid, batch=16, seed=100 + trial)
        found = await search.find_best_experts(scores, k=3)
        assert_same(found, brute_force(grid, live, scores, 3))


async def test_a_narrow_beam_can_miss_an_expert_whose_prefix_ranks_low() -> None:
    """The price of O(d·k) lookups (Algorithm 1 is a beam search, not an exhaustive one)."""
    grid = ExpertGrid("g", (2, 2))
    live = ["g.0.0", "g.1.1"]
    scores = [torch.tensor([[10.0, 9.0]]), torch.tensor([[-100.0, 0.0]])]
    search = MoEBeamSearch(await serve(grid, live), grid, clock=FakeClock())
    assert as_pairs(await search.find_best_experts(scores, k=1)) == [[("g.0.0", -90.0)]]
    wide = await search.find_best_experts(scores, k=1, beam_size=2)
    assert as_pairs(wide) == brute_force(grid, live, scores, 1) == [[("g.1.1", 9.0)]]


async def test_fewer_live_experts_than_k_and_dead_prefixes() -> None:
    grid = ExpertGrid("g", (5, 5))
    search = MoEBeamSearch(await serve(grid, ["g.1.3", "g.4.0"]), grid, clock=FakeClock())
    found = await search.find_best_experts(random_scores(grid, 3, seed=1), k=4)
    assert [sorted(e.uid for e in row) for row in found] == [["g.1.3", "g.4.0"]] * 3
    nobody = MoEBeamSearch(FakeDHT(), grid, clock=FakeClock())
    assert await nobody.find_best_experts(random_scores(grid, 2, seed=1), k=4) == [[], []]


async def test_a_batch_costs_depth_rounds_of_distinct_keys_and_the_cache_saves_repeats() -> None:
    grid = ExpertGrid("g", (16, 16, 16))
    rng = random.Random(3)
    live = [uid for uid in grid.all_uids() if rng.random() < 0.3]
    dht = await serve(grid, live)
    clock = FakeClock()
    search = MoEBeamSearch(dht, grid, cache_ttl=5.0, clock=clock)
    batch, k = 32, 4
    scores = random_scores(grid, batch, seed=5)
    found = await search.find_best_experts(scores, k=k)
    assert all(len(row) == k for row in found)
    assert len(dht.rounds) == grid.depth  # one round per dimension for the whole batch
    assert [len(keys) == len(set(keys)) for keys in dht.rounds] == [True] * grid.depth
    assert len(dht.rounds[0]) == 1  # the grid's root
    for keys in dht.rounds[1:]:
        assert len(keys) <= batch * k
    # per input, Algorithm 1 would look up 1 + (d-1)·k keys: the union is smaller than their sum
    assert search.keys_looked_up < batch * (1 + (grid.depth - 1) * k)

    # the same batch again within the TTL: no lookup at all
    again = await search.find_best_experts(scores, k=k)
    assert as_pairs(again) == as_pairs(found)
    assert len(dht.rounds) == grid.depth
    assert search.cache.hits > 0
    clock.advance(5.1)  # entries expire: the next batch asks the DHT again
    await search.find_best_experts(scores, k=k)
    assert len(dht.rounds) == 2 * grid.depth


async def test_the_cache_is_bounded_and_caches_dead_prefixes() -> None:
    grid = ExpertGrid("g", (8, 8))
    dht = await serve(grid, ["g.2.2"])
    search = MoEBeamSearch(dht, grid, cache_size=3, clock=FakeClock())
    await search.active_suffixes([(i,) for i in range(8)])
    assert len(search.cache) == 3
    assert await search.active_suffixes([(7,)]) == {(7,): {}}  # dead, and cached as such
    assert len(dht.rounds) == 1


async def test_junk_in_prefix_records_is_skipped() -> None:
    grid = ExpertGrid("g", (4, 4))
    dht = await serve(grid, ["g.1.2"])
    dht.records["g.1"].update(
        {
            "x": ValueWithExpiration("evil", 1.0),
            9: ValueWithExpiration("evil", 1.0),
            f"9{MINE}": ValueWithExpiration("evil", 1.0),
            True: ValueWithExpiration("evil", 1.0),
            3: ValueWithExpiration("no owner", 1.0),
            f"3{MINE}": ValueWithExpiration(["not", "an address"], 1.0),
            f"03{MINE}": ValueWithExpiration("evil", 1.0),
        }
    )
    dht.records["g.2"] = "a plain value where a table belongs"
    dht.records["g"][2] = ValueWithExpiration(1, 1.0)
    search = MoEBeamSearch(dht, grid, clock=FakeClock())
    found = await search.find_best_experts(random_scores(grid, 2, seed=0), k=4)
    assert [[e.uid for e in row] for row in found] == [["g.1.2"], ["g.1.2"]]


async def test_bad_scores_and_parameters_are_refused() -> None:
    grid = ExpertGrid("g", (4, 5))
    search = MoEBeamSearch(FakeDHT(), grid, clock=FakeClock())
    good = random_scores(grid, 2, seed=0)
    cases: list[tuple[list[torch.Tensor], str]] = [
        (good[:1], "1 score tensors"),
        ([good[0], torch.randn(3, 5)], "same batch"),
        ([good[0], torch.randn(2, 4)], r"\[batch, 5\]"),
        ([good[0], torch.ones(2, 5, dtype=torch.long)], "not floats"),
        ([good[0], torch.full((2, 5), float("nan"))], "NaN"),
    ]
    for scores, why in cases:
        with pytest.raises(BeamSearchError, match=why):
            await search.find_best_experts(scores, k=2)
    with pytest.raises(BeamSearchError, match="k <= beam_size"):
        await search.find_best_experts(good, k=0)
    with pytest.raises(BeamSearchError, match="k <= beam_size"):
        await search.find_best_experts(good, k=3, beam_size=2)


async def test_on_a_dht_swarm_experts_appear_and_expire() -> None:
    clock = FakeClock()
    nodes = await build_swarm(6, clock, seed=2)
    try:
        grid = ExpertGrid("ffn", (4, 4))
        rng = random.Random(11)
        by_server: dict[str, list[str]] = {"A": [], "B": [], "C": []}
        for uid in grid.all_uids():
            if rng.random() < 0.6:
                by_server[rng.choice("ABC")].append(uid)
        for server, (name, uids) in zip(nodes, by_server.items(), strict=False):
            ttl = 20.0 if name == "C" else 60.0
            assert all(
                (await declare_experts(server, grid, uids, name, clock.time() + ttl)).values()
            )
        owner = {uid: name for name, uids in by_server.items() for uid in uids}
        live = sorted(owner)
        search = MoEBeamSearch(nodes[-1], grid, cache_ttl=1.0, clock=clock)
        scores = random_scores(grid, 4, seed=9)
        found = await search.find_best_experts(scores, k=3, beam_size=grid.size)
        assert_same(found, brute_force(grid, live, scores, 3), owner)

        clock.advance(30)  # C's records expired, and so did the search's cache
        without_c = [uid for uid in live if owner[uid] != "C"]
        found = await search.find_best_experts(scores, k=3, beam_size=grid.size)
        assert_same(found, brute_force(grid, without_c, scores, 3), owner)
    finally:
        for node in nodes:
            await node.close()


async def test_a_doubted_expert_is_looked_up_afresh_and_found_at_its_new_server() -> None:
    grid = ExpertGrid("ffn", (2, 2))
    live = list(grid.all_uids())
    dht = await serve(grid, live)
    search = MoEBeamSearch(dht, grid, cache_ttl=60.0, clock=FakeClock())
    scores = random_scores(grid, 3, seed=1)
    await search.find_best_experts(scores, k=2)
    assert dht.latest == [False, False]  # the first copy found will do
    await search.find_best_experts(scores, k=2)
    assert len(dht.rounds) == 2  # all cached

    # ffn.1.0's server left; another took the expert over and announced itself
    dht.records["ffn.1"][f"0{MINE}"] = ValueWithExpiration("new-server", 1.0)
    search.doubt("ffn.1.0")
    search.doubt("not-on-this-grid.7")  # junk is ignored
    found = await search.find_best_experts(scores, k=4)
    assert dht.rounds[2:] == [["ffn.1"]]
    assert dht.latest[2:] == [True]
    addresses = {e.uid: e.address for row in found for e in row}
    assert addresses["ffn.1.0"] == "new-server"
    assert addresses["ffn.1.1"] == "server-of-ffn.1.1"
    await search.find_best_experts(scores, k=4)
    assert len(dht.rounds) == 3  # cached again, and no longer doubted


async def test_prefix_records_are_read_whole_when_asked() -> None:
    grid = ExpertGrid("ffn", (2, 2))
    dht = await serve(grid, list(grid.all_uids()))
    scores = random_scores(grid, 2, seed=3)
    await MoEBeamSearch(dht, grid, complete_records=True).find_best_experts(scores, k=2)
    assert dht.latest == [True, True]  # every replica asked, their subkeys merged
    await MoEBeamSearch(dht, grid).find_best_experts(scores, k=2)
    assert dht.latest[2:] == [False, False]  # by default the first copy found
