"""Real rounds on loopback with one broken or malicious sender: the reducers' checks and CenteredClip.

The bad member runs honest code with bad data (a gradient x1000, or NaN: broken hardware or a peer
that sends what it likes); as a reducer it screens its own data like everyone else's.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace

import numpy as np
import pytest

from core.averaging import Averager, AveragingResult
from core.averaging.messages import GroupSpec, MemberInfo
from core.averaging.robust.aggregation import AggregationConfig, Method
from core.averaging.round.transfer import _trailer
from core.codecs import FP16, NONE, Codec
from core.codecs.chunks import decode, encode
from core.net.errors import InvalidRequestError
from tests.averaging.conftest import PATIENT, MakeAveragers
from tests.support.leaks import HANG_GUARD

SIZE = 4
BAD = 3
SHAPES = ((4096 * 3,), (123,))  # several chunks per part, and a short tensor


def gradients(seed: int) -> list[list[np.ndarray]]:
    """Each member's gradients: a shared signal plus its own noise, as from different batches."""
    rng = np.random.default_rng(seed)
    signal = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    return [
        [part + rng.standard_normal(part.shape).astype(np.float32) for part in signal]
        for _ in range(SIZE)
    ]


def honest_mean(tensors: list[list[np.ndarray]]) -> list[np.ndarray]:
    good = [t for i, t in enumerate(tensors) if i != BAD]
    return [np.mean([t[k] for t in good], axis=0) for k in range(len(SHAPES))]


def error(mine: list[np.ndarray], reference: list[np.ndarray]) -> float:
    """Relative distance of a member's result from the honest mean."""
    top = math.sqrt(sum(float(np.sum((a - b) ** 2)) for a, b in zip(mine, reference, strict=True)))
    return top / math.sqrt(sum(float(np.sum(b**2)) for b in reference))


async def run_round(
    averagers: list[Averager], tensors: list[list[np.ndarray]], key: str
) -> list[AveragingResult]:
    return list(
        await asyncio.gather(
            *(
                a.average(t, weight=1.0, round_key=key, timeout=HANG_GUARD)
                for a, t in zip(averagers, tensors, strict=True)
            )
        )
    )


async def make_group(
    make_averagers: MakeAveragers, aggregation: AggregationConfig
) -> list[Averager]:
    config = replace(PATIENT, target_group_size=SIZE, min_group_size=SIZE, aggregation=aggregation)
    return await make_averagers(SIZE, config)


@pytest.mark.parametrize(
    ("attack", "method", "statistic"),
    [
        ("x1000", Method.CENTERED_CLIP, "norm_ratio"),
        ("nan", Method.CENTERED_CLIP, "nonfinite"),
        ("nan", Method.MEAN, "nonfinite"),
    ],
)
async def test_a_bad_sender_is_screened_out_named_and_reported(
    make_averagers: MakeAveragers, attack: str, method: Method, statistic: str
) -> None:
    averagers = await make_group(make_averagers, AggregationConfig(method))
    tensors = gradients(seed=1)
    expected = honest_mean(tensors)
    if attack == "x1000":
        tensors[BAD] = [t * 1000 for t in tensors[BAD]]
    else:
        tensors[BAD][0][::97] = np.nan
    bad = averagers[BAD].host.peer_id
    results = await run_round(averagers, tensors, f"robust-{attack}-{method}")
    for index, result in enumerate(results):
        assert not result.complete  # someone was left out, and every member says so
        assert bad in result.excluded, result.summary()
        assert "screened out" in result.excluded[bad] or index == BAD
        assert set(result.excluded) == {bad}, result.excluded
        # every other reducer found it in its own part; the bad member's own (honest) code left
        # its chunk out too, but a peer does not accuse itself
        accused = {(f.peer, f.part, f.statistic) for f in result.findings}
        assert accused == (set() if index == BAD else {(bad, index, statistic)}), result.findings
        if index != BAD:
            for got, want in zip(tensors[index], expected, strict=True):
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    # the bad member also ends with the honest average (it received the reducers' results)
    assert error(tensors[BAD], expected) < 1e-5


async def test_in_a_pair_the_larger_chunk_is_left_out_but_nobody_is_accused(
    make_averagers: MakeAveragers,
) -> None:
    """Two senders: no majority says which is wrong (honest pairs differ 100x in sparse chunks)."""
    config = replace(
        PATIENT, target_group_size=2, min_group_size=2, aggregation=AggregationConfig()
    )
    averagers = await make_averagers(2, config)
    tensors = gradients(seed=3)[:2]
    small = [t.copy() for t in tensors[0]]
    tensors[1] = [t * 1000 for t in tensors[1]]
    big = averagers[1].host.peer_id
    results = await run_round(averagers, tensors, "robust-pair")
    for result, mine in zip(results, tensors, strict=True):
        assert set(result.excluded) == {big}, result.summary()
        assert "nobody is accused" in result.excluded[big] or result.index == 1
        assert result.findings == []
        for got, want in zip(mine, small, strict=True):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


async def test_centered_clip_alone_holds_where_the_plain_mean_is_wrecked(
    make_averagers: MakeAveragers,
) -> None:
    """The norm check off: the plain mean takes the x1000 sender in, CenteredClip clips it."""
    errors = {}
    for method in Method:
        averagers = await make_group(
            make_averagers, AggregationConfig(method, norm_ratio_limit=math.inf)
        )
        tensors = gradients(seed=2)
        expected = honest_mean(tensors)
        spread = max(error(t, expected) for t in tensors[:BAD])  # one honest gradient's noise
        tensors[BAD] = [t * 1000 for t in tensors[BAD]]
        results = await run_round(averagers, tensors, f"alone-{method}")
        errors[method] = max(error(tensors[i], expected) for i in range(BAD))
        bad = averagers[BAD].host.peer_id
        for index, result in enumerate(results):
            assert result.complete, result.summary()  # nobody excluded: clipping only weighs
            if method is Method.CENTERED_CLIP:
                # (the bad member's own reducer clipped itself too, but accuses nobody)
                assert {f.peer for f in result.findings} == (set() if index == BAD else {bad})
                assert {f.statistic for f in result.findings} <= {"clip_weight"}
                assert all(f.value < 0.01 for f in result.findings)
            else:
                assert result.findings == []
    assert errors[Method.MEAN] > 100  # visibly wrong: the outlier owns the average
    assert errors[Method.CENTERED_CLIP] < spread  # within one honest member's own noise


async def test_honest_rounds_with_centered_clip_are_the_exact_weighted_mean_with_codecs(
    make_averagers: MakeAveragers,
) -> None:
    averagers = await make_group(make_averagers, AggregationConfig(Method.CENTERED_CLIP))
    weights = [1.0, 2.0, 3.0, 10.0]
    for codec, tolerance in ((NONE, 1e-5), (FP16, 5e-3)):
        tensors = gradients(seed=3)
        expected = [
            sum(w * t[k] for t, w in zip(tensors, weights, strict=True)) / sum(weights)
            for k in range(len(SHAPES))
        ]
        pending = await asyncio.gather(
            *(a.prepare(f"honest-{codec}", timeout=HANG_GUARD) for a in averagers)
        )
        results = await asyncio.gather(
            *(
                p.run(t, weight=w, codec=codec)
                for p, t, w in zip(pending, tensors, weights, strict=True)
            )
        )
        for result, mine in zip(results, tensors, strict=True):
            assert result.complete, result.summary()
            assert result.findings == []
            assert result.group_weight == pytest.approx(16.0)
            for got, want in zip(mine, expected, strict=True):
                np.testing.assert_allclose(got, want, rtol=0, atol=tolerance)


async def test_a_chunk_screened_out_does_not_lower_what_the_round_held(
    make_averagers: MakeAveragers,
) -> None:
    """One sender's short tensor is far larger than the others' (an embedding's rare rows that only
    its batch touched): the chunk holding it is averaged without that sender, every other chunk
    with it. The round held every sender's weight; only that chunk's average is over less."""
    averagers = await make_group(make_averagers, AggregationConfig(Method.CENTERED_CLIP))
    tensors = gradients(seed=5)
    tensors[BAD][1] *= 1000
    results = await run_round(averagers, tensors, "robust-sparse")
    for result in results:
        assert averagers[BAD].host.peer_id in result.excluded, result.summary()
        assert result.group_weight == pytest.approx(SIZE - 1)
        assert result.held_weight == pytest.approx(SIZE)


@pytest.mark.parametrize("codec", [NONE, FP16])
@pytest.mark.parametrize("rows", ["theirs", "ours"])
async def test_what_the_screens_left_out_is_not_sent_again(
    make_averagers: MakeAveragers, codec: Codec, rows: str
) -> None:
    """Error feedback keeps what a round did not hold of a member's values for the next round,
    but not a chunk the screens left out: sent again (with the next round's work added) it would
    be screened again, larger each round, until the screens' repeats accuse an honest member. Here
    the rare rows of one member's batch are 1000x the others' in round one, in a chunk another
    member reduces (``theirs``: it went out in the codec) or in one of its own part (``ours``); in
    round two every member sends new work plus what its feedback kept, and nobody is left out."""
    averagers = await make_group(make_averagers, AggregationConfig(Method.CENTERED_CLIP))
    bad = averagers[BAD].host.peer_id
    tensor, rare = (0, slice(0, 500)) if rows == "theirs" else (1, slice(None))
    feedback = [[np.zeros(s, np.float32) for s in SHAPES] for _ in averagers]
    for key, seed in (("first", 5), ("second", 6)):
        tensors = [
            [t + f for t, f in zip(ts, fb, strict=True)]
            for ts, fb in zip(gradients(seed), feedback, strict=True)
        ]
        if key == "first":
            tensors[BAD][tensor][rare] *= 1000
            sent = tensors[BAD][tensor][rare].copy()
        results = await asyncio.gather(
            *(
                a.average(
                    t,
                    weight=1.0,
                    round_key=f"screened-{codec}-{rows}-{key}",
                    timeout=HANG_GUARD,
                    codec=codec,
                    feedback=f,
                )
                for a, t, f in zip(averagers, tensors, feedback, strict=True)
            )
        )
        if key == "first":
            for result in results:
                assert set(result.excluded) == {bad}, result.summary()
            # of the screened rows, only what the codec did not send waits (nothing in float32,
            # nor of our own part, which its reducer takes uncoded)
            left = feedback[BAD][tensor][rare]
            if codec is NONE or rows == "ours":
                assert not left.any()
            else:
                np.testing.assert_array_equal(
                    left, sent - decode(codec, encode(codec, sent), sent.size)
                )
                assert np.abs(left).max() < 1e-2 * np.abs(sent).max()
        else:
            for result in results:
                assert result.complete, result.summary()
                assert result.findings == []


def test_a_chunk_trailer_says_whether_the_screens_left_us_out() -> None:
    assert _trailer([2, 3.0, True, False], 2) == (3.0, True, False)
    assert _trailer([2, 3.0, False, True], 2) == (3.0, False, True)
    assert _trailer([2, 3, False], 2) == (3.0, False, False)  # a reducer that does not say
    for wrong in ([2, 3.0, True, True], [2, 3.0, False, 1], [1, 3.0, False, False], [2, 3.0]):
        with pytest.raises(InvalidRequestError):
            _trailer(wrong, 2)


def test_what_a_round_held_is_the_weight_of_most_of_its_values() -> None:
    def held(values_by_weight: dict[float, int]) -> float:
        result = AveragingResult(b"", [], 0, sum(values_by_weight.values()))
        result.values_by_weight = values_by_weight
        return result.held_weight

    assert held({}) == 0.0
    assert held({512.0: 1000}) == 512.0
    assert held({464.0: 10, 512.0: 990}) == 512.0  # one chunk screened a sender out
    assert held({464.0: 1000}) == 464.0  # a sender that never came: every chunk without it
    assert held({512.0: 600, 9999.0: 400}) == 512.0  # a reducer inflating its own minority part
    assert held({400.0: 500, 512.0: 500}) == 400.0  # no majority: the lower of the two


@pytest.mark.parametrize("hooked", [True, False])
async def test_half_of_a_group_claiming_too_much_is_held_by_the_confirmed_claim(
    make_averagers: MakeAveragers, hooked: bool
) -> None:
    """Two honest members and two claiming 1000x their samples with their gradients x1000: every
    reducer reads the last confirmed round's typical claim when the round starts
    (``Averager.confirmed_claim``), and the inflated pair holds one vote each; without it, from
    the claims alone, they are the typical senders and their chunks pass."""
    config = replace(
        PATIENT,
        target_group_size=SIZE,
        min_group_size=SIZE,
        aggregation=AggregationConfig(Method.CENTERED_CLIP, weight_ratio_limit=4.0),
    )
    averagers = await make_averagers(SIZE, config)
    if hooked:
        for averager in averagers:
            averager.confirmed_claim = lambda: 10.0
    tensors = gradients(seed=5)
    good = [tensors[0], tensors[1]]
    expected = [np.mean([t[k] for t in good], axis=0) for k in range(len(SHAPES))]
    for bad in (2, 3):
        tensors[bad] = [t * 1000 for t in tensors[bad]]
    claims = [10.0, 10.0, 10_000.0, 10_000.0]
    results = await asyncio.gather(
        *(
            a.average(t, weight=w, round_key=f"confirmed-{hooked}", timeout=HANG_GUARD)
            for a, t, w in zip(averagers, tensors, claims, strict=True)
        )
    )
    inflated = {averagers[2].host.peer_id, averagers[3].host.peer_id}
    if hooked:
        for result in results:
            assert set(result.excluded) == inflated, result.summary()
        assert error(tensors[0], expected) < 1e-5
    else:
        assert all(result.excluded == {} for result in results)
        assert error(tensors[0], expected) > 100


async def test_a_round_is_measured_against_what_its_members_declared(
    make_averagers: MakeAveragers,
) -> None:
    """The round's typical claim: what the group's members declared, held by the last confirmed
    round's. A verifier recomputing a reducer's chunk may hold another confirmation, and a
    column's senders are groups: both measure each chunk by its own claims."""
    [averager] = await make_averagers(1, PATIENT)
    declared = [1e-3] * 4 + [10.0] * 4
    group = GroupSpec(
        b"g", "k", [MemberInfo(averager.host.peer_id, [], weight=w) for w in [0.0, *declared]]
    )

    def typical(column: bool = False) -> float | None:
        return averager.round_config(None, group, column=column).aggregation.typical_claim

    assert typical() == 2.5  # the tiny claims pull it no further than a quarter of the others
    assert typical(column=True) is None
    averager.confirmed_claim = lambda: 10.0
    assert typical() == 2.5  # within a quarter of the confirmed round's and it
    averager.confirmed_claim = lambda: 40.0
    assert typical() == 10.0  # no lower than a quarter of it
    averager.confirmed_claim = lambda: 2.0
    assert typical() == 2.0  # no higher than it
    averager.confirmed_claim = lambda: None
    assert typical() == 2.5
    averager.config = replace(
        averager.config, verification=replace(averager.config.verification, enabled=True)
    )
    assert typical() is None
