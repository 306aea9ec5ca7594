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


async def test_members_agree_and_the_reduce_is_the_mean_of_the_kept_values(
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
    # sent + fed back == input, for every member and every value
    sent = [
        [i - f for i, f in zip(ins, fb, strict=True)]
        for ins, fb in zip(inputs, feedback, strict=True)
    ]
    for fb in feedback:
        assert not any(np.any(f == 7.0) for f in fb)  # every value of it was written
    # about the codec's share of each tensor went out (at most one value more per block)
    for member in range(3):
        for k, values in enumerate(inputs[member]):
            count = np.count_nonzero(sent[member][k])
            blocks = -(-len(values) // 4096) + 3  # a part boundary may cut one more block
            assert 0.02 * len(values) <= count <= 0.02 * len(values) + blocks
            kept = sent[member][k] != 0
            # the largest magnitudes are the ones kept: a dropped value is never the largest
            assert np.abs(values[~kept]).max() < np.abs(values).max()
    total = sum(weights)
    for k in range(len(SIZES)):
        dense = sum(w * s[k] for w, s in zip(weights, sent, strict=True)) / total
        kept = np.count_nonzero(np.stack([s[k] for s in sent]), axis=0) > 0
        assert np.count_nonzero(tensors[0][k][~kept]) == 0  # nothing appears where nobody sent
        # the mean travels back in 8-bit codes: that is its only error, at most half of one of
        # the 127 levels between a block's smallest and largest magnitude
        error = np.abs(tensors[0][k] - dense)
        assert error.max() <= np.abs(dense).max() / 254 + 1e-7
        assert error.max() > 0  # not float32 (the test would not see the codes otherwise)
    # what one member sent is a few percent of a float32 round
    dense_bytes = 4 * sum(SIZES)
    assert all(0 < r.bytes_sent < 0.2 * dense_bytes for r in results), [
        r.bytes_sent for r in results
    ]
