"""Rounds in a sparse codec (top-k with error feedback) on real loopback connections: members
agree bit for bit, the sparse reduce is the dense mean of the values that were kept, and what was
sent plus what was fed back is what went in."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np

from core.averaging import Averager, AveragingResult
from core.codecs.topk import top_k
from tests.averaging.conftest import PATIENT, MakeAveragers
from tests.support.leaks import HANG_GUARD

SIZES = (5000, 300, 12289)
CODEC = top_k(0.02, 2)


def vectors(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(n).astype(np.float32) for n in SIZES]


async def sparse_round(
    averagers: list[Averager], inputs: list[list[np.ndarray]], weights: list[float]
) -> tuple[list[list[np.ndarray]], list[list[np.ndarray]], list[AveragingResult]]:
    tensors = [[t.copy() for t in ts] for ts in inputs]
    feedback = [[np.full_like(t, 7.0) for t in ts] for ts in inputs]
    results = await asyncio.gather(
        *(
            a.average(t, weight=w, round_key="sparse", timeout=HANG_GUARD, codec=CODEC, feedback=f)
            for a, t, w, f in zip(averagers, tensors, weights, feedback, strict=True)
        )
    )
    return tensors, feedback, list(results)


async def test_members_agree_and_the_mean_keeps_its_largest_values_the_rest_goes_back(
    make_averagers: MakeAveragers,
) -> None:
    # chunks of 4096 values: the codec's blocks then start where the round's chunks start
    averagers = await make_averagers(3, replace(PATIENT, chunk_bytes=4 * 4096))
    inputs = [vectors(seed) for seed in range(3)]
    weights = [1.0, 2.0, 5.0]
    tensors, feedback, results = await sparse_round(averagers, inputs, weights)
    assert all(r.complete for r in results), [r.summary() for r in results]
    for other in tensors[1:]:
        for mine, theirs in zip(tensors[0], other, strict=True):
            assert mine.tobytes() == theirs.tobytes()
    for fb in feedback:
        assert not any(np.any(f == 7.0) for f in fb)  # every value of it was written
    # what of each member's values the result holds: the input less what waits in its feedback
    landed = [
        [i - f for i, f in zip(ins, fb, strict=True)]
        for ins, fb in zip(inputs, feedback, strict=True)
    ]
    total = sum(weights)
    for k, size in enumerate(SIZES):
        mean = tensors[0][k]
        blocks = -(-size // 4096) + 3  # a part boundary may cut one more block
        # the mean keeps one contribution's worth of values a block, though three members sent
        # about that many each at (mostly) different positions
        assert np.count_nonzero(mean) <= 0.02 * size + blocks
        for member in range(3):
            # nothing of ours landed where the mean holds nothing: it all waits in the feedback
            assert np.array_equal(feedback[member][k][mean == 0], inputs[member][k][mean == 0])
            assert np.count_nonzero(landed[member][k][mean == 0]) == 0
        # where it holds something, it is the weighted mean of what was sent there (whoever
        # did not send a position adds 0 to it), its only error the 8-bit codes it travels in:
        # at most half of one of the 127 levels between a block's smallest and largest magnitude
        dense = sum(w * s[k] for w, s in zip(weights, landed, strict=True)) / total
        error = np.abs(mean - dense)
        assert error.max() <= np.abs(dense).max() / 254 + 1e-7
        assert error.max() > 0  # not float32 (the test would not see the codes otherwise)
    # the largest values of the mean are the ones kept: every member's share of the largest
    # dense position landed, since the mean cannot have dropped it
    for k in range(len(SIZES)):
        sent_anywhere = sum(np.abs(s[k]) for s in landed)
        assert np.count_nonzero(sent_anywhere) == np.count_nonzero(tensors[0][k])
    # what one member sent is a few percent of a float32 round
    dense_bytes = 4 * sum(SIZES)
    assert all(0 < r.bytes_sent < 0.1 * dense_bytes for r in results), [
        r.bytes_sent for r in results
    ]


async def test_a_member_whose_data_the_mean_lacks_keeps_all_of_it(
    make_averagers: MakeAveragers,
) -> None:
    averagers = await make_averagers(3, replace(PATIENT, chunk_bytes=4 * 4096))
    inputs = [vectors(seed) for seed in range(3)]
    # the last member brings nothing (weight 0): the others' mean lands on it too, and all of
    # its own values wait in its feedback for a later round
    tensors, feedback, _ = await sparse_round(averagers, inputs, [1.0, 3.0, 0.0])
    for mine, theirs in zip(tensors[0], tensors[2], strict=True):
        assert mine.tobytes() == theirs.tobytes()
    for values, left in zip(inputs[2], feedback[2], strict=True):
        assert np.array_equal(values, left)
    for values, left in zip(inputs[1], feedback[1], strict=True):
        assert not np.array_equal(values, left)  # a member whose data landed keeps less
