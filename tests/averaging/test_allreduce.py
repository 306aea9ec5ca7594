"""Averaging on real loopback connections: exact means, weights, codecs, clients, auxiliaries."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import pytest

from core.averaging import Averager, AveragingResult, MatchmakingError
from core.codecs import AUTO, BLOCKWISE8, FP16, UINT8, Codec
from core.codecs.chunks import max_abs_error
from tests.averaging.conftest import PATIENT, QUICK, MakeAveragers, random_tensors
from tests.support.leaks import HANG_GUARD


async def average_all(
    averagers: list[Averager],
    tensors: list[list[np.ndarray]],
    weights: list[float] | None = None,
    key: str = "r",
) -> list[AveragingResult]:
    weights = weights or [1.0] * len(averagers)
    return list(
        await asyncio.gather(
            *(
                a.average(t, weight=w, round_key=key, timeout=HANG_GUARD)
                for a, t, w in zip(averagers, tensors, weights, strict=True)
            )
        )
    )


def mean_of(tensors: list[list[np.ndarray]], weights: list[float]) -> list[np.ndarray]:
    total = sum(weights)
    return [
        sum(w * t[k] for t, w in zip(tensors, weights, strict=True)) / total
        for k in range(len(tensors[0]))
    ]


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8])
async def test_exact_mean_for_groups_of_one_to_eight(
    make_averagers: MakeAveragers, size: int
) -> None:
    config = replace(PATIENT, target_group_size=size, min_group_size=1 if size == 1 else 2)
    averagers = await make_averagers(size, config)
    tensors = [random_tensors(i) for i in range(size)]
    expected = mean_of(tensors, [1.0] * size)
    results = await average_all(averagers, tensors)
    for result, mine in zip(results, tensors, strict=True):
        assert result.complete, result.summary()
        assert len(result.members) == size
        for got, want in zip(mine, expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


async def test_weighted_mean_and_group_weight(make_averagers: MakeAveragers) -> None:
    averagers = await make_averagers(4, replace(PATIENT, target_group_size=4))
    tensors = [random_tensors(10 + i) for i in range(4)]
    weights = [1.0, 2.0, 3.0, 10.0]
    expected = mean_of(tensors, weights)
    results = await average_all(averagers, tensors, weights)
    claimed = {a.host.peer_id: w for a, w in zip(averagers, weights, strict=True)}
    for result, mine in zip(results, tensors, strict=True):
        assert result.complete
        assert result.group_weight == pytest.approx(16.0)
        assert result.weights == claimed  # each reducer saw every sender's weight (its samples)
        for got, want in zip(mine, expected, strict=True):
            np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize(("clients", "auxiliaries"), [(2, 1), (2, 2), (0, 2), (1, 0)])
async def test_clients_and_reduce_only_members(
    make_averagers: MakeAveragers, clients: int, auxiliaries: int
) -> None:
    trainers = 4
    size = trainers + auxiliaries
    configs = [
        replace(PATIENT, target_group_size=size, client_mode=i < clients) for i in range(trainers)
    ]
    configs += [
        replace(PATIENT, target_group_size=size, reduce_only=True) for _ in range(auxiliaries)
    ]
    averagers = await make_averagers(size, configs=configs)
    tensors = [random_tensors(20 + i) for i in range(size)]
    expected = mean_of(tensors[:trainers], [1.0] * trainers)  # auxiliaries bring no data
    results = await average_all(averagers, tensors)
    for result, mine, config in zip(results, tensors, configs, strict=True):
        assert result.complete, result.summary()
        index_of = {peer: i for i, peer in enumerate(result.members)}
        for client in averagers[:clients]:
            assert result.parts[index_of[client.host.peer_id]] == 0  # clients reduce nothing
        if not config.reduce_only:
            for got, want in zip(mine, expected, strict=True):
                np.testing.assert_allclose(got, want, atol=1e-5)


async def test_a_peer_becomes_a_client_between_rounds_and_back(
    make_averagers: MakeAveragers,
) -> None:
    """Roles follow reachability: a peer that turns private reduces nothing from the next round."""
    averagers = await make_averagers(3, replace(PATIENT, target_group_size=3))
    changing = averagers[0]
    me = changing.host.peer_id

    async def round_parts(key: str) -> int:
        tensors = [random_tensors(40 + i) for i in range(3)]
        results = await average_all(averagers, tensors, key=key)
        assert all(r.complete for r in results), [r.summary() for r in results]
        first = results[0]
        return first.parts[first.members.index(me)]

    assert await round_parts("before") > 0
    changing.set_client_mode(True)
    assert await round_parts("private") == 0
    changing.set_client_mode(False)
    assert await round_parts("public-again") > 0


@pytest.mark.parametrize("codec", [FP16, UINT8, BLOCKWISE8, AUTO])
async def test_codecs_stay_within_their_bounds_and_members_agree(
    make_averagers: MakeAveragers, codec: Codec
) -> None:
    averagers = await make_averagers(3, replace(PATIENT, target_group_size=3, codec=codec))
    tensors = [random_tensors(30 + i, ((70000,), (500,))) for i in range(3)]
    expected = mean_of(tensors, [1.0] * 3)
    inputs = [[t.copy() for t in ts] for ts in tensors]
    results = await average_all(averagers, tensors)
    assert all(r.complete for r in results)
    for k in range(2):
        size = tensors[0][k].size
        concrete = codec.resolve(size)
        # each input is encoded once on its way in, and the average once on its way back
        bound = max(max_abs_error(concrete, ts[k].reshape(-1)) for ts in inputs)
        bound += max_abs_error(concrete, expected[k].reshape(-1)) * 1.01
        for mine in tensors:
            assert float(np.max(np.abs(mine[k] - expected[k]))) <= bound
        for other in tensors[1:]:
            np.testing.assert_array_equal(
                other[k], tensors[0][k]
            )  # every member holds the same values


async def test_too_few_peers_fail_cleanly_within_the_timeout(make_averagers: MakeAveragers) -> None:
    # a matchmaker that ignored the 1.5 s asked for would wait its max_matchmaking_time, 120 s: the
    # guard below is far above 1.5 s (a busy machine is slow, not hung) and far below that
    config = replace(QUICK, min_group_size=3, target_group_size=3, max_matchmaking_time=120.0)
    averagers = await make_averagers(2, config)
    async with asyncio.timeout(HANG_GUARD):
        outcomes = await asyncio.gather(
            *(a.average(random_tensors(0), round_key="lonely", timeout=1.5) for a in averagers),
            return_exceptions=True,
        )
    assert all(isinstance(o, MatchmakingError) for o in outcomes), outcomes
    assert "of the 3 peers needed" in str(outcomes[0])


async def test_rounds_with_different_keys_never_mix(make_averagers: MakeAveragers) -> None:
    averagers = await make_averagers(4, replace(PATIENT, target_group_size=2))
    tensors = [random_tensors(40 + i) for i in range(4)]
    keys = ["grads.1", "grads.2", "grads.1", "grads.2"]
    results = await asyncio.gather(
        *(
            a.average(t, round_key=k, timeout=HANG_GUARD)
            for a, t, k in zip(averagers, tensors, keys, strict=True)
        )
    )
    assert results[0].group_id == results[2].group_id != results[1].group_id == results[3].group_id
    original = [random_tensors(40 + i) for i in range(4)]
    for pair in ((0, 2), (1, 3)):
        expected = mean_of([original[i] for i in pair], [1.0, 1.0])
        for i in pair:
            for got, want in zip(tensors[i], expected, strict=True):
                np.testing.assert_allclose(got, want, atol=1e-5)


async def test_matchmake_now_reduce_later(make_averagers: MakeAveragers) -> None:
    averagers = await make_averagers(3, replace(PATIENT, target_group_size=3))
    pending = await asyncio.gather(*(a.prepare("step.7", timeout=HANG_GUARD) for a in averagers))
    assert {p.group.group_id for p in pending} == {pending[0].group.group_id}
    tensors = [random_tensors(50 + i) for i in range(3)]
    expected = mean_of(tensors, [1.0] * 3)
    await asyncio.sleep(0.3)  # "computing the rest of the batch"
    results = await asyncio.gather(*(p.run(t) for p, t in zip(pending, tensors, strict=True)))
    assert all(r.complete for r in results)
    np.testing.assert_allclose(tensors[1][0], expected[0], atol=1e-5)


async def test_leaders_that_start_apart_still_meet(make_averagers: MakeAveragers) -> None:
    """No target size: each leader waits its patience; late peers join the best leader, no deadlock."""
    # a patience far above the 0.2 s over which they arrive, even on a busy machine: they start
    # apart, but not so far apart that groups should form without the late ones
    config = replace(PATIENT, target_group_size=None, min_group_size=2, min_matchmaking_time=2.0)
    averagers = await make_averagers(5, config)

    async def late(averager: Averager, delay: float) -> AveragingResult:
        await asyncio.sleep(delay)
        return await averager.average(random_tensors(60), round_key="open", timeout=HANG_GUARD)

    results = await asyncio.gather(*(late(a, 0.05 * i) for i, a in enumerate(averagers)))
    assert {r.group_id for r in results} == {results[0].group_id}
    assert len(results[0].members) == 5
    assert all(r.complete for r in results)


async def test_leaders_wait_longer_when_groups_are_slow_to_form(
    make_averagers: MakeAveragers,
) -> None:
    """A peer that arrives 1 s late: the early one keeps looking (visible) and then waits ~2x that."""
    config = replace(PATIENT, target_group_size=None, min_group_size=2, max_matchmaking_time=5.0)
    early, late_one = await make_averagers(2, config)
    assert early.matchmaker.patience() == config.min_matchmaking_time

    async def late() -> AveragingResult:
        await asyncio.sleep(1.0)
        return await late_one.average(random_tensors(61), round_key="slow", timeout=HANG_GUARD)

    first, second = await asyncio.gather(
        early.average(random_tensors(62), round_key="slow", timeout=HANG_GUARD), late()
    )
    assert first.group_id == second.group_id
    assert first.complete
    assert 1.5 <= early.matchmaker.patience() <= config.max_matchmaking_time
