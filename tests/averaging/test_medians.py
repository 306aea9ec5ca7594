"""The medians over a round's senders and what each sender counts for in them (pure functions)."""

from __future__ import annotations

import itertools
import math
import statistics

import numpy as np
import pytest

from core.averaging.robust.medians import (
    BLOCK,
    coordinate_median,
    lower_median,
    median_by,
    typical_claim,
    voters,
    votes,
    weighted_lower_median,
    weighted_median,
)


@pytest.mark.parametrize(
    ("values", "weights", "expected"),
    [
        ([1.0, 2.0, 3.0], [1.0, 1.0, 1.0], 2.0),
        ([1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 1.0, 1.0], 2.0),  # even: the lower middle
        ([1.0, 2.0, 3.0], [1.0, 1.0, 3.0], 3.0),  # 3 holds more than half
        ([1.0, 2.0, 3.0], [3.0, 1.0, 1.0], 1.0),
        ([1.0, 2.0], [1.0, 2.0], 2.0),
        ([1.0, 2.0, 3.0], [2.0, 1.0, 1.0], 1.0),  # exactly half up to 1: a tie goes low
        ([1.0, 2.0, 3.0], [2.0, 0.0, 2.0], 1.0),  # a zero weight counts for nothing
        ([5.0, 1.0], [0.0, 1.0], 1.0),  # and its value is never the median
        ([1.0, 2.0, 3.0], [0.25, 0.25, 0.5], 2.0),  # exactly half again
        # in floats 0.1 + 0.2 is the third weight, a tie; exactly, it falls short of half
        ([1.0, 2.0, 3.0], [0.1, 0.2, 0.30000000000000004], 3.0),
        ([7.0, 7.0, 1.0], [1.0, 1.0, 5.0], 1.0),
    ],
)
def test_the_weighted_lower_median(
    values: list[float], weights: list[float], expected: float
) -> None:
    assert weighted_lower_median(values, weights) == expected
    # the order the senders come in does not matter
    for order in itertools.permutations(range(len(values))):
        shuffled = [values[i] for i in order], [weights[i] for i in order]
        assert weighted_lower_median(*shuffled) == expected


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 8, 17])
@pytest.mark.parametrize("weight", [1.0, 0.1, 3e-7, 1e30])
def test_equal_weights_give_exactly_the_lower_median(count: int, weight: float) -> None:
    rng = np.random.default_rng(count)
    values = [float(v) for v in rng.standard_normal(count)] + [0.5, 0.5]  # with a tie
    weights = [weight] * len(values)
    assert weighted_lower_median(values, weights) == lower_median(values)
    assert weighted_median(values, weights) == statistics.median(values)


@pytest.mark.parametrize("identities", [1, 5, 6, 100, 10_000])
def test_tiny_weights_cannot_move_it(identities: int) -> None:
    honest = [10.0, 11.0, 12.0, 13.0, 14.0]
    for sent in (0.0, 1e9):  # below every honest value, then above
        values = honest + [sent] * identities
        weights = [100.0, 101.0, 99.0, 100.0, 102.0] + [1e-3] * identities
        assert weighted_lower_median(values, weights) == 12.0
        assert weighted_median(values, weights) == 12.0
    # counted per sender, as many identities as honest members already set it
    assert lower_median(honest + [0.0] * 5) == 0.0


@pytest.mark.parametrize(
    ("values", "weights", "message"),
    [
        ([], [], "no values"),
        ([1.0, 2.0], [1.0], "2 values but 1 weights"),
        ([1.0, 2.0], [1.0, -1.0], "not negative"),
        ([1.0, 2.0], [1.0, math.nan], "finite"),
        ([1.0, 2.0], [1.0, math.inf], "finite"),
        ([1.0, 2.0], [0.0, 0.0], "some positive"),
    ],
)
def test_weights_that_mean_nothing_are_refused(
    values: list[float], weights: list[float], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        weighted_lower_median(values, weights)
    with pytest.raises(ValueError, match=message):
        weighted_median(values, weights)


# ---- the typical claim and the votes -------------------------------------------------------------


@pytest.mark.parametrize(
    ("claims", "confirmed", "expected"),
    [
        ([10.0, 10.0, 10.0], None, 10.0),
        ([10.0, 12.0, 9.0, 11.0], None, 10.0),  # no claim tiny: the plain lower median
        ([10.0, 10.0, 10.0, 1000.0], None, 10.0),  # one inflated claim cannot lift it
        ([10.0] * 3 + [1000.0] * 2, None, 10.0),  # nor fewer than half
        ([1e-3] * 4 + [10.0] * 4, None, 2.5),  # as many tiny claims: a quarter of the others
        ([1e-3] * 4 + [10.0, 11.0, 12.0, 13.0], None, 2.5),
        ([1e-3] * 3 + [10.0] * 4, None, 10.0),  # fewer: not even that
        ([1e-3] * 5 + [10.0] * 4, None, 1e-3),  # more: from claims alone, they set it
        ([1e-3] * 5 + [10.0] * 4, 10.0, 2.5),  # not past a quarter of the last confirmed round's
        ([1e-3] * 50 + [10.0] * 4, 10.0, 2.5),  # however many
        ([6.0, 10.0, 30.0, 1e6], None, 10.0),  # slow and fast honest devices and one inflated
        ([1.0, 1.0, 10.0, 10.0], None, 2.5),  # two CPUs and two GPUs
        ([10.0, 10.0, 1000.0, 1000.0], None, 250.0),  # half inflated: claims cannot tell
        ([10.0, 10.0, 1000.0, 1000.0], 10.0, 10.0),  # the confirmation can
        ([10.0] * 2 + [1000.0] * 9, 10.0, 10.0),  # any number of them
        ([20.0, 20.0, 20.0], 10.0, 10.0),  # honest claims twice the last round's: held at it
        ([10.0, 1000.0], None, 10.0),  # a pair: the smaller claim
        ([1e-3, 10.0], None, 1e-3),
        ([7.0], None, 7.0),
        ([0.0, 0.0, 5.0], None, 5.0),  # a claim of 0 is no claim
        ([0.0, 0.0], None, 0.0),
        ([], None, 0.0),
        ([], 10.0, 2.5),
    ],
)
def test_the_typical_claim(claims: list[float], confirmed: float | None, expected: float) -> None:
    assert typical_claim(claims, confirmed) == pytest.approx(expected, rel=1e-12)
    # the senders' order does not matter
    assert typical_claim(claims[::-1], confirmed) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("claims", "confirmed", "expected"),
    [
        ([10.0, 10.0, 10.0], None, [1.0, 1.0, 1.0]),
        ([10.0, 6.0, 30.0, 1e6], None, [1.0, 1.0, 1.0, 1.0]),  # from half the typical claim up
        ([10.0, 10.0, 10.0, 2.0], None, [1.0, 1.0, 1.0, 0.4]),  # less work: a share of a vote
        ([10.0] * 4 + [1e-2] * 4, None, [1.0] * 4 + [8e-3] * 4),  # typical: 2.5
        ([10.0, 10.0, 1000.0, 1000.0], 10.0, [1.0] * 4),  # inflated: no more than one each
        ([0.0, 10.0, 10.0], None, [0.0, 1.0, 1.0]),  # a claim of 0: no vote
        ([0.0, 0.0], None, [1.0, 1.0]),  # nothing tells them apart: a whole vote each
        ([], None, []),
    ],
)
def test_what_a_sender_counts_for_in_a_median(
    claims: list[float], confirmed: float | None, expected: list[float]
) -> None:
    assert votes(claims, confirmed) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("count", [3, 4, 5, 8, 16, 33])
def test_no_sender_holds_more_than_one_vote(count: int) -> None:
    """Whatever it claims and however the others' claims are spread (slow devices included): a
    lone sender never holds half of the votes of three or more senders with typical claims."""
    rng = np.random.default_rng(count)
    for _ in range(200):
        others = [float(w) for w in np.exp(rng.uniform(-1, 1, count - 1))]
        for claim in (max(others) * 1e6, max(others), min(others)):
            held = votes([*others, claim])
            assert max(held) == 1.0
            assert held[-1] < math.fsum(held[:-1])


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_claims_that_mean_nothing_are_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="finite and not negative"):
        votes([1.0, bad, 2.0])
    with pytest.raises(ValueError, match="finite and not negative"):
        typical_claim([bad])


def test_votes_short_of_a_count_fall_back_to_counting() -> None:
    assert median_by([3.0, 1.0, 2.0], [0.0, 0.0, 0.0]) == 2.0
    assert median_by([3.0, 1.0, 2.0, 0.5], [1.0, 1e-3, 1.0, 1e-3]) == 2.0
    assert voters([1.0, 1.0, 0.25, 0.25]) == 2.5


# ---- the coordinate-wise median -------------------------------------------------------------------


def test_equal_weights_give_exactly_numpys_median() -> None:
    rng = np.random.default_rng(3)
    for count in (1, 2, 3, 4, 7):
        rows = [rng.standard_normal(300).astype(np.float32) for _ in range(count)]
        expected = np.median(np.stack(rows), axis=0).astype(np.float32)
        np.testing.assert_array_equal(coordinate_median(rows, [2.5] * count), expected)


@pytest.mark.parametrize("size", [50, BLOCK + 7])  # one block, then two
def test_each_coordinate_is_the_weighted_median_of_its_column(size: int) -> None:
    rng = np.random.default_rng(4)
    rows = [rng.standard_normal(size).astype(np.float32) for _ in range(5)]
    rows[3][:10] = rows[1][:10]  # ties
    weights = [1.0, 2.0, 0.5, 2.5, 1.0]  # 1 + 2 + 0.5 and 2.5 + 1 are half: lower and upper differ
    centre = coordinate_median(rows, weights)
    assert centre.dtype == np.float32
    for column in [*range(20), *range(size - 20, size)]:
        values = [float(row[column]) for row in rows]
        lower = weighted_lower_median(values, weights)
        upper = -weighted_lower_median([-v for v in values], weights)
        assert centre[column] == np.float32((np.float32(lower) + np.float32(upper)) * 0.5)


def test_tiny_weights_cannot_move_the_coordinate_wise_median() -> None:
    rng = np.random.default_rng(5)
    honest = [rng.standard_normal(400).astype(np.float32) for _ in range(5)]
    weights = [100.0, 101.0, 102.0, 103.0, 99.0]
    alone = coordinate_median(honest, weights)
    flipped = [-10 * row for row in honest]
    crowded = coordinate_median(honest + flipped, weights + [1e-3] * 5)
    np.testing.assert_array_equal(crowded, alone)
    # counted per sender, the same crowd would have set it
    assert not np.array_equal(np.median(np.stack(honest + flipped), axis=0), alone)
