"""Rounds of several groups on real loopback connections: each slot's reducers average it across
the groups (its column), so that every member of every group lands the same mean of everyone's
values, in an exact codec and in a sparse one (a group of one too); a group that meets no other
keeps its own mean."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np

from core.averaging import Averager, AveragingResult, ColumnRequest
from core.codecs import NONE, Codec
from core.codecs.topk import top_k
from tests.averaging.conftest import PATIENT, MakeAveragers
from tests.support.leaks import HANG_GUARD

SIZES = (5000, 300, 12289)
GROUP = 2
TWO_GROUPS_OF_TWO = replace(
    PATIENT, target_group_size=GROUP, min_group_size=1, min_matchmaking_time=5.0
)
"""Groups of two, one allowed; a leader waits at least 5 s for the members it expects (PATIENT's
0.3 s lets a loaded machine close groups short: all singletons)."""


def vectors(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(n).astype(np.float32) for n in SIZES]


async def several_groups(
    averagers: list[Averager],
    inputs: list[list[np.ndarray]],
    weights: list[float],
    codec: Codec,
    *,
    everyone: int | None = None,
) -> tuple[list[list[np.ndarray]], list[list[np.ndarray]], list[AveragingResult]]:
    tensors = [[t.copy() for t in ts] for ts in inputs]
    feedback = [[np.zeros_like(t) for t in ts] for ts in inputs]
    groups = -(-(everyone or len(averagers)) // GROUP)
    # the group of one closes only after its leader's 5 s wait for members, and so comes to the
    # columns about 5 s after the pairs: theirs wait for it up to the columns' timeout
    request = ColumnRequest("cols", GROUP, groups, timeout=HANG_GUARD / 2)
    results = await asyncio.gather(
        *(
            a.average(
                t,
                weight=w,
                round_key="cols",
                timeout=20.0,
                codec=codec,
                feedback=f,
                columns=request,
            )
            for a, t, w, f in zip(averagers, tensors, weights, feedback, strict=True)
        )
    )
    return tensors, feedback, list(results)


def assert_everyone_holds_the_mean(
    tensors: list[list[np.ndarray]], inputs: list[list[np.ndarray]], weights: list[float]
) -> None:
    """Every member holds the same bytes, and they are everyone's weighted mean."""
    for other in tensors[1:]:
        for mine, theirs in zip(tensors[0], other, strict=True):
            assert mine.tobytes() == theirs.tobytes()
    total = sum(weights)
    for k in range(len(SIZES)):
        expected = sum(w * ins[k] for w, ins in zip(weights, inputs, strict=True)) / total
        np.testing.assert_allclose(tensors[0][k], expected, rtol=1e-5, atol=1e-6)


async def test_every_group_lands_the_mean_of_everyone(make_averagers: MakeAveragers) -> None:
    averagers = await make_averagers(5, TWO_GROUPS_OF_TWO)
    inputs = [vectors(seed) for seed in range(5)]
    weights = [1.0, 2.0, 3.0, 4.0, 5.0]
    tensors, _, results = await several_groups(averagers, inputs, weights, NONE)
    groups = {r.group_id for r in results}
    assert len(groups) == 3, [len(r.members) for r in results]  # 2 + 2 + 1: more than one group
    assert_everyone_holds_the_mean(tensors, inputs, weights)
    assert all(r.averaged_elements == r.total_elements for r in results)
    assert all(r.included_elements == r.total_elements for r in results)
    # what a member sent and received counts its columns too: at most a float32 vector out and
    # back over the group, and a slot's worth out and back in its column
    dense = 4 * sum(SIZES)
    for r in results:
        assert r.column_groups >= 2 or r.parts[r.index] == 0
        assert 0 < r.bytes_sent <= 2 * dense
        assert 0 < r.bytes_received <= 2 * dense


async def test_sparse_groups_land_one_mean_and_keep_what_it_lacks(
    make_averagers: MakeAveragers,
) -> None:
    averagers = await make_averagers(4, replace(TWO_GROUPS_OF_TWO, chunk_bytes=4 * 4096))
    inputs = [vectors(10 + seed) for seed in range(4)]
    weights = [1.0, 2.0, 3.0, 4.0]
    codec = top_k(0.02, 2)
    tensors, feedback, results = await several_groups(averagers, inputs, weights, codec)
    assert len({r.group_id for r in results}) == 2
    for other in tensors[1:]:
        for mine, theirs in zip(tensors[0], other, strict=True):
            assert mine.tobytes() == theirs.tobytes()
    for k, size in enumerate(SIZES):
        mean = tensors[0][k]
        blocks = -(-size // 4096) + 3
        assert 0 < np.count_nonzero(mean) <= 0.02 * size + blocks  # one contribution's worth
        landed = [ins[k] - fb[k] for ins, fb in zip(inputs, feedback, strict=True)]
        for member in range(4):
            # what of a member the mean lacks waits whole in its feedback
            assert np.array_equal(feedback[member][k][mean == 0], inputs[member][k][mean == 0])
        # where it holds something, it is close to everyone's weighted mean of what landed: two
        # 8-bit encodings (the group's mean, then the column's) are its error
        dense = sum(w * s for w, s in zip(weights, landed, strict=True)) / sum(weights)
        assert np.abs(mean - dense).max() <= 2 * np.abs(dense).max() / 254 + 1e-6
        assert np.count_nonzero(dense[mean == 0]) == 0


async def test_a_sparse_group_of_one_meets_the_groups_of_two_in_its_columns(
    make_averagers: MakeAveragers,
) -> None:
    """2 + 2 + 1, each group under a key of its own as diloco plans them: the group of one's whole
    mean travels in the same codec as the full groups' (sized for a full group), so its columns
    form with them and everyone lands one mean."""
    averagers = await make_averagers(5, replace(TWO_GROUPS_OF_TWO, chunk_bytes=4 * 4096))
    inputs = [vectors(20 + seed) for seed in range(5)]
    tensors = [[t.copy() for t in ts] for ts in inputs]
    planned = [0, 0, 1, 1, 2]
    request = ColumnRequest("cols", GROUP, 3, timeout=HANG_GUARD / 4)
    results = await asyncio.gather(
        *(
            a.average(
                t,
                weight=float(k + 1),
                round_key=f"cols.{group}",
                timeout=20.0,
                target_size=planned.count(group),
                codec=top_k(0.02, 2),
                feedback=[np.zeros_like(x) for x in t],
                columns=request,
            )
            for k, (a, t, group) in enumerate(zip(averagers, tensors, planned, strict=True))
        )
    )
    assert sorted(len(r.members) for r in results) == [1, 2, 2, 2, 2]
    for other in tensors[1:]:
        for mine, theirs in zip(tensors[0], other, strict=True):
            assert mine.tobytes() == theirs.tobytes()
    alone = next(r for r in results if len(r.members) == 1)
    assert alone.column_groups == 3
    assert alone.averaged_elements == alone.total_elements


async def test_a_group_that_meets_no_other_keeps_its_own_mean(
    make_averagers: MakeAveragers,
) -> None:
    averagers = await make_averagers(2, replace(TWO_GROUPS_OF_TWO, min_group_size=2))
    inputs = [vectors(seed) for seed in range(2)]
    # the caller expected four members: the group of two deals slots and looks for a column
    # that nobody else joins
    tensors, _, results = await several_groups(averagers, inputs, [1.0, 3.0], NONE, everyone=4)
    assert all(r.averaged_elements == r.total_elements for r in results)
    for k in range(len(SIZES)):
        expected = (inputs[0][k] + 3 * inputs[1][k]) / 4
        np.testing.assert_allclose(tensors[0][k], expected, rtol=1e-5, atol=1e-6)
        assert tensors[0][k].tobytes() == tensors[1][k].tobytes()


async def test_a_group_that_comes_late_still_meets_the_others_in_its_columns(
    make_averagers: MakeAveragers,
) -> None:
    """2 + 2 + 1 under keys of their own, the group of one starting after the pairs' column
    leaders' patience is over (its peer reached the round late, as on a loaded machine): the
    pairs' columns wait for the groups the caller expects until the column's timeout, not only
    their leader's patience, so the late group still meets them and everyone lands one mean."""
    averagers = await make_averagers(5, TWO_GROUPS_OF_TWO)
    inputs = [vectors(30 + seed) for seed in range(5)]
    tensors = [[t.copy() for t in ts] for ts in inputs]
    weights = [1.0, 2.0, 3.0, 4.0, 5.0]
    planned = [0, 0, 1, 1, 2]
    late = TWO_GROUPS_OF_TWO.min_matchmaking_time + 2.0
    request = ColumnRequest("cols", GROUP, 3, timeout=HANG_GUARD / 2)
    assert late < request.timeout - 5.0  # the late group comes well within the columns' wait

    async def member(k: int) -> AveragingResult:
        if planned[k] == 2:
            await asyncio.sleep(late)
        return await averagers[k].average(
            tensors[k], weight=weights[k], round_key=f"cols.{planned[k]}", timeout=20.0,
            target_size=planned.count(planned[k]), codec=NONE, columns=request,
        )  # fmt: skip

    results = await asyncio.gather(*(member(k) for k in range(5)))
    assert sorted(len(r.members) for r in results) == [1, 2, 2, 2, 2]
    # every slot's column met all three groups, as each of its reducers saw it
    assert [r.column_groups for r in results if r.parts[r.index]] == [3] * 5
    assert_everyone_holds_the_mean(tensors, inputs, weights)
    assert all(r.complete and r.group_weight == sum(weights) for r in results)
