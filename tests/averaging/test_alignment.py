"""How far each sender went along the others' mean: the sums a reducer keeps for scoring work."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.averaging.robust.aggregation import AggregationConfig, Method, aggregate_chunk
from core.averaging.robust.alignment import Alignment, leave_one_out


def exact(rows: list[np.ndarray], weights: list[float]) -> list[tuple[float, float, float]]:
    """The sums computed the long way: each sender against the weighted mean of the others."""
    found = []
    for i, row in enumerate(rows):
        others = [j for j in range(len(rows)) if j != i]
        total = sum(weights[j] for j in others)
        ref = sum(weights[j] * rows[j].astype(np.float64) for j in others) / total
        x = row.astype(np.float64)
        found.append((float(x @ ref), float(x @ x), float(ref @ ref)))
    return found


def test_the_sums_are_each_sender_against_the_others_mean() -> None:
    rng = np.random.default_rng(3)
    rows = [rng.standard_normal(500).astype(np.float32) for _ in range(4)]
    weights = [1.0, 2.0, 0.5, 3.0]
    got = leave_one_out(rows, weights)
    assert got is not None
    for mine, theirs in zip(got, exact(rows, weights), strict=True):
        assert mine == pytest.approx(theirs, rel=1e-4, abs=1e-3)


def test_a_sender_alone_has_no_others() -> None:
    row = np.ones(8, dtype=np.float32)
    assert leave_one_out([row], [1.0]) is None
    assert leave_one_out([row, row], [1.0, 0.0]) is None


def test_work_not_claims_sets_the_score() -> None:
    """Members moving the same way: the score grows with how far each moved, not with what it
    claimed; zeros score nothing and a flip scores below zero."""
    rng = np.random.default_rng(0)
    direction = rng.standard_normal(2000).astype(np.float32)

    def update(steps: float) -> np.ndarray:
        noise = 0.3 * rng.standard_normal(2000).astype(np.float32)
        return (steps * direction + math.sqrt(steps) * noise).astype(np.float32)

    rows = [update(1), update(1), update(2), np.zeros(2000, np.float32), -3 * update(1)]
    claims = [100.0, 100.0, 200.0, 100.0, 100.0]
    out = aggregate_chunk(
        dict(enumerate(rows)),
        dict(enumerate(claims)),
        AggregationConfig(method=Method.CENTERED_CLIP, screen=False, alignments=True),
    )
    sums = {s: Alignment(claims[s], *v) for s, v in out.along.items()}
    along = {s: c.along for s, c in sums.items()}
    per_sample = {s: c.projection / c.weight for s, c in sums.items()}
    assert per_sample[0] == pytest.approx(per_sample[1], rel=0.1)
    assert per_sample[2] == pytest.approx(
        per_sample[0], rel=0.15
    )  # twice the steps, twice the claim
    assert along[3] == 0.0
    assert along[4] < 0


def test_a_claim_raised_does_not_raise_the_score() -> None:
    """Leave one out: a sender's own weight in the aggregate adds nothing to its score."""
    rng = np.random.default_rng(1)
    rows = [rng.standard_normal(300).astype(np.float32) for _ in range(4)]
    config = AggregationConfig(weight_ratio_limit=4.0, alignments=True)
    low = aggregate_chunk(dict(enumerate(rows)), {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0}, config)
    high = aggregate_chunk(dict(enumerate(rows)), {0: 1.0, 1: 1.0, 2: 1.0, 3: 100.0}, config)
    assert high.along[3][0] == pytest.approx(low.along[3][0], rel=1e-4)  # float32 sums


def test_screened_senders_have_no_sums() -> None:
    rows = {0: np.ones(64, np.float32), 1: np.ones(64, np.float32), 2: np.ones(64, np.float32)}
    rows[2] = rows[2] * 1000
    out = aggregate_chunk(rows, {0: 1.0, 1: 1.0, 2: 1.0}, AggregationConfig(alignments=True))
    assert 2 in out.screened
    assert set(out.along) == {0, 1}


def test_only_a_mode_that_scores_pays_for_the_sums() -> None:
    rows = {i: np.full(64, i + 1.0, np.float32) for i in range(3)}
    weights = dict.fromkeys(rows, 1.0)
    assert aggregate_chunk(rows, weights, AggregationConfig()).along == {}
    assert set(aggregate_chunk(rows, weights, AggregationConfig(alignments=True)).along) == {
        0,
        1,
        2,
    }


def test_a_contribution_adds_up_over_chunks() -> None:
    c = Alignment(10.0).plus(2.0, 4.0, 1.0).plus(1.0, 5.0, 3.0)
    assert (c.weight, c.along, c.norm2, c.reference2) == (10.0, 3.0, 9.0, 4.0)
    assert c.cosine == pytest.approx(3.0 / 6.0)
    assert c.projection == pytest.approx(3.0 / 2.0)
    assert Alignment(1.0).cosine == Alignment(1.0).projection == 0.0
