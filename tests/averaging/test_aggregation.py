"""Screening and CenteredClip on one chunk (pure functions), and the reducer that applies them."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from core.averaging.robust import aggregation
from core.averaging.robust.aggregation import (
    AggregationConfig,
    ChunkAggregate,
    Method,
    Workspace,
    aggregate_chunk,
    bounded_weights,
    weighted_mean,
)
from core.averaging.robust.medians import lower_median, typical_claim
from core.averaging.robust.screening import (
    NEVER,
    NORM_SIZE,
    OPPOSED_FROM,
    OPPOSED_SIZE,
    screen,
)
from core.averaging.round.reducer import PartReducer
from core.averaging.round.tensors import Span
from core.codecs import NONE
from core.trust.identity import Identity
from core.util.errors import ConfigError

SIZE = 5000
CC = AggregationConfig(method=Method.CENTERED_CLIP)
MEAN = AggregationConfig(method=Method.MEAN)
OFF = math.inf
"""``norm_ratio_limit`` with the norm check off: CenteredClip alone against the outlier."""


def honest(count: int, seed: int = 0, size: int = SIZE) -> dict[int, np.ndarray]:
    """Gradients of one model from different batches: a shared signal plus each sender's noise."""
    rng = np.random.default_rng(seed)
    signal = rng.standard_normal(size).astype(np.float32)
    return {i: signal + rng.standard_normal(size).astype(np.float32) for i in range(count)}


def ones(inputs: dict[int, np.ndarray]) -> dict[int, float]:
    return dict.fromkeys(inputs, 1.0)


def relative(values: np.ndarray | None, reference: np.ndarray) -> float:
    assert values is not None
    return float(np.linalg.norm(values - reference) / np.linalg.norm(reference))


def read_only(inputs: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """As received frames are: aggregation must never write into its inputs."""
    for values in inputs.values():
        values.flags.writeable = False
    return inputs


# ---- CenteredClip against the mean ----------------------------------------------------------------


def test_one_sender_x1000_barely_moves_centered_clip_while_the_mean_goes_far() -> None:
    good = honest(3)
    mean = np.mean(list(good.values()), axis=0)
    inputs = read_only({**good, 3: good[0] * 1000})
    plain = aggregate_chunk(inputs, ones(inputs), AggregationConfig(norm_ratio_limit=OFF))
    robust = aggregate_chunk(
        inputs, ones(inputs), AggregationConfig(Method.CENTERED_CLIP, norm_ratio_limit=OFF)
    )
    assert relative(plain.values, mean) > 100  # the mean is wherever the outlier wants it
    # CenteredClip stays within the honest senders' own spread of their mean
    spread = np.mean([relative(v, mean) for v in good.values()])
    assert relative(robust.values, mean) < spread
    assert robust.included == frozenset(range(4))  # clipped, not excluded
    assert set(robust.clipped) == {3}
    assert robust.clipped[3] < 0.01


@pytest.mark.parametrize("position", range(5))
def test_a_sign_flipped_sender_with_a_normal_norm_is_clipped_wherever_it_sits(
    position: int,
) -> None:
    # the norm check cannot see it; the medoid start and the clipping must
    rng = np.random.default_rng(14)
    signal = rng.standard_normal(SIZE).astype(np.float32)
    good = [signal + 0.1 * rng.standard_normal(SIZE).astype(np.float32) for _ in range(4)]
    mean = np.mean(good, axis=0)
    rows = [*good[:position], -good[0], *good[position:]]
    inputs = read_only(dict(enumerate(rows)))
    result = aggregate_chunk(inputs, ones(inputs), CC)
    assert result.screened == {}
    assert set(result.clipped) == {position}
    spread = np.mean([relative(v, mean) for v in good])
    assert relative(result.values, mean) < spread  # the plain mean would be off by about 0.5
    assert relative(aggregate_chunk(inputs, ones(inputs), MEAN).values, mean) > 0.4


def test_among_three_a_far_sender_is_clipped_but_not_accused() -> None:
    # with three senders τ is the nearer of two distances: honest sparse chunks sit that far too
    rng = np.random.default_rng(15)
    signal = rng.standard_normal(SIZE).astype(np.float32)
    good = [signal + 0.1 * rng.standard_normal(SIZE).astype(np.float32) for _ in range(2)]
    inputs = read_only({0: good[0], 1: good[1], 2: -good[0]})
    result = aggregate_chunk(inputs, ones(inputs), CC)
    assert result.screened == {}
    assert result.clipped == {}
    # the clipping itself still holds it: far nearer the two than the plain mean is
    mean = np.mean(good, axis=0)
    assert relative(result.values, mean) < 0.5 * relative(
        aggregate_chunk(inputs, ones(inputs), MEAN).values, mean
    )


def test_without_outliers_centered_clip_is_the_weighted_mean() -> None:
    inputs = read_only(honest(5, seed=1))
    weights = {0: 1.0, 1: 2.0, 2: 3.0, 3: 10.0, 4: 0.5}
    expected = sum(w * inputs[i] for i, w in weights.items()) / sum(weights.values())
    for config in (CC, MEAN):
        result = aggregate_chunk(inputs, weights, config)
        assert result.values is not None
        np.testing.assert_allclose(result.values, expected, rtol=0, atol=2e-6)
        assert result.weight == pytest.approx(16.5)
        assert result.clipped == {}
        assert result.screened == {}


def test_sample_weights_decide_where_centered_clip_goes() -> None:
    # two camps; the heavier one wins, and by the right amount when nobody is clipped
    a = np.full(SIZE, 1.0, dtype=np.float32)
    b = np.full(SIZE, 2.0, dtype=np.float32)
    inputs = read_only({0: a, 1: b})
    light = aggregate_chunk(inputs, {0: 3.0, 1: 1.0}, CC)
    heavy = aggregate_chunk(inputs, {0: 1.0, 1: 3.0}, CC)
    assert light.values is not None
    assert heavy.values is not None
    np.testing.assert_allclose(light.values, 1.25, atol=1e-6)
    np.testing.assert_allclose(heavy.values, 1.75, atol=1e-6)


def test_more_iterations_approach_the_fixed_point() -> None:
    good = honest(3, seed=2)
    inputs = read_only({**good, 3: -10 * good[0]})
    results = [
        aggregate_chunk(
            inputs, ones(inputs), AggregationConfig(Method.CENTERED_CLIP, clip_iterations=k)
        ).values
        for k in (1, 3, 50)
    ]
    assert results[0] is not None
    assert results[1] is not None
    converged = results[2]
    assert converged is not None
    assert relative(results[1], converged) < relative(results[0], converged)
    assert relative(results[1], converged) < 0.05


# ---- claimed weights ------------------------------------------------------------------------------

BOUNDED = 4.0
"""The manifest's default ``weight_ratio_limit``."""


@pytest.mark.parametrize(
    ("claims", "limit", "typical", "expected"),
    [
        ([1.0, 2.0, 3.0, 4.0], BOUNDED, None, [1.0, 2.0, 3.0, 4.0]),  # within the limit: as claimed
        ([10.0, 10.0, 10.0, 1000.0], BOUNDED, None, [10.0, 10.0, 10.0, 40.0]),  # one claiming 100x
        ([10.0] * 3 + [1000.0] * 2, BOUNDED, None, [10.0] * 3 + [40.0] * 2),  # fewer than half
        # half of the senders: from claims alone, the same numbers as honest members beside tiny
        # identities (the next row), so the larger claims are typical; the round's typical claim,
        # held by the last confirmed round's, says otherwise
        ([10.0, 10.0, 1000.0, 1000.0], BOUNDED, None, [10.0, 10.0, 1000.0, 1000.0]),
        ([10.0, 10.0, 1000.0, 1000.0], BOUNDED, 10.0, [10.0, 10.0, 40.0, 40.0]),
        ([1e-3, 1e-3, 10.0, 10.0], BOUNDED, None, [1e-3, 1e-3, 10.0, 10.0]),  # tiny: cannot pull it
        ([1e-3] * 9 + [10.0] * 3, BOUNDED, None, [1e-3] * 9 + [4e-3] * 3),  # more: they do
        (
            [1e-3] * 9 + [10.0] * 3,
            BOUNDED,
            10.0,
            [1e-3] * 9 + [10.0] * 3,
        ),  # not past a confirmation
        ([0.0, 0.0, 10.0, 20.0, 30.0], BOUNDED, None, [0.0, 0.0, 10.0, 20.0, 30.0]),  # zeros: none
        ([10.0, 1000.0], BOUNDED, None, [10.0, 40.0]),  # a pair: the smaller sets the ceiling
        ([10.0, 1000.0], math.inf, None, [10.0, 1000.0]),  # off
        ([1000.0], BOUNDED, None, [1000.0]),  # alone: nothing to compare with, nobody to steer
        ([3.0, 5.0, 100.0], 1.0, None, [3.0, 5.0, 5.0]),  # 1: nobody above the lower median
    ],
)
def test_claimed_weights_are_bounded_by_the_median_by_votes(
    claims: list[float], limit: float, typical: float | None, expected: list[float]
) -> None:
    assert bounded_weights(claims, limit, typical) == pytest.approx(expected, rel=1e-12)


def inflated_flip(claim: float, strength: float) -> tuple[dict[int, np.ndarray], dict[int, float]]:
    """Three honest senders of 10 samples each, and one sending their gradient x``strength``
    (negative: sign-flipped) while claiming ``claim`` times their samples."""
    rng = np.random.default_rng(21)
    signal = rng.standard_normal(SIZE).astype(np.float32)
    good = [signal + 0.5 * rng.standard_normal(SIZE).astype(np.float32) for _ in range(3)]
    inputs = read_only({0: good[0], 1: good[1], 2: good[2], 3: strength * good[0]})
    return inputs, {0: 10.0, 1: 10.0, 2: 10.0, 3: 10.0 * claim}


@pytest.mark.parametrize("claim", [10.0, 100.0])
@pytest.mark.parametrize("strength", [-3.0, -10.0])
def test_a_flip_claiming_many_samples_steers_centered_clip_no_more_than_an_honest_claim(
    claim: float, strength: float
) -> None:
    inputs, weights = inflated_flip(claim, strength)
    honest_mean = np.mean([inputs[i] for i in range(3)], axis=0)
    config = replace(CC, weight_ratio_limit=BOUNDED)
    fair = aggregate_chunk(inputs, ones(inputs), config)
    claimed = aggregate_chunk(inputs, weights, config)
    # the attack passes the norm screen (3x and 10x are within 10x): only clipping holds it
    assert claimed.screened == {}
    assert relative(claimed.values, honest_mean) <= relative(fair.values, honest_mean) * 1.05
    assert relative(claimed.values, honest_mean) < 0.35
    # the attack is real: the mean weighing the claim as made goes far the wrong way
    as_claimed = aggregate_chunk(inputs, weights, MEAN)
    assert relative(as_claimed.values, honest_mean) > 3
    # and the result says what each claim counted for, and what the round held
    assert claimed.capped == {3: 40.0}
    assert claimed.weight == pytest.approx(30.0 + 10.0 * claim)


def test_the_plain_mean_counts_an_inflated_claim_at_the_bound() -> None:
    inputs, weights = inflated_flip(100.0, 1.0)  # honest data, a claim of 100x
    inputs = read_only({**inputs, 3: np.full(SIZE, 5.0, dtype=np.float32)})
    mean = aggregate_chunk(inputs, weights, replace(MEAN, weight_ratio_limit=BOUNDED))
    expected = (10 * (inputs[0] + inputs[1] + inputs[2]) + 40 * inputs[3]) / 70
    assert mean.values is not None
    np.testing.assert_allclose(mean.values, expected, rtol=0, atol=2e-6)


def test_a_clipped_sender_pulls_with_no_more_than_the_median_share() -> None:
    # the bound off, so that only CenteredClip's own rule is at work: a far sender's claim of
    # 1000x must not buy it more pull than an honest claim would
    inputs, weights = inflated_flip(1000.0, -3.0)
    honest_mean = np.mean([inputs[i] for i in range(3)], axis=0)
    unbounded = replace(CC, weight_ratio_limit=math.inf)
    fair = aggregate_chunk(inputs, ones(inputs), unbounded)
    claimed = aggregate_chunk(inputs, weights, unbounded)
    assert set(claimed.clipped) == {3}
    assert relative(claimed.values, honest_mean) < 1.05 * relative(fair.values, honest_mean)


# ---- identities that cost nothing -----------------------------------------------------------------

DILOCO = AggregationConfig(
    Method.CENTERED_CLIP, weight_ratio_limit=BOUNDED, opposed_from=0.2, accuse_from=3.0
)
"""What a diloco swarm's reducer runs with at the manifest's defaults (``Mode.aggregation``)."""


def crowd(kind: str, count: int = 4) -> tuple[dict[int, np.ndarray], dict[int, float]]:
    """``count`` honest senders of 100 samples, and as many identities claiming a thousandth of
    a sample each: sending small noise (a hundredth of an honest norm) or copies of sender 0."""
    good = honest(count, seed=31)
    rng = np.random.default_rng(32)
    scale = 0.01 * float(np.linalg.norm(good[0])) / math.sqrt(SIZE)
    fake = {
        count + i: (
            (scale * rng.standard_normal(SIZE)).astype(np.float32)
            if kind == "noise"
            else good[0].copy()
        )
        for i in range(count)
    }
    inputs = read_only({**good, **fake})
    return inputs, {s: 100.0 if s < count else 0.1 for s in inputs}


@pytest.mark.parametrize("kind", ["noise", "copies"])
@pytest.mark.parametrize("config", [DILOCO, CC, MEAN], ids=["diloco", "centered_clip", "mean"])
def test_as_many_tiny_identities_as_honest_senders_set_no_reference(
    kind: str, config: AggregationConfig
) -> None:
    inputs, weights = crowd(kind)
    honest_mean = np.mean([inputs[i] for i in range(4)], axis=0)
    result = aggregate_chunk(inputs, weights, config)
    assert not set(result.screened) & set(range(4))
    assert not set(result.clipped) & set(range(4))
    assert result.capped == {}  # the honest claims are not brought down to the identities'
    assert relative(result.values, honest_mean) < 0.01
    # the attack is real: counted one per sender (equal claims), the noise sets the reference
    # and every honest chunk is screened out and accused
    if kind == "noise" and config is DILOCO:
        counted = aggregate_chunk(inputs, ones(inputs), config)
        assert set(counted.screened) == set(range(4))
        assert not counted.unattributed & set(range(4))


@pytest.mark.parametrize("kind", ["noise", "copies"])
def test_an_honest_sender_late_for_a_chunk_leaves_it_to_the_rounds_typical_claim(kind: str) -> None:
    """One of four honest members missing from a chunk leaves more identities than honest
    senders in it: the chunk's claims alone would make theirs typical, the round's (what every
    member declared when the group formed) does not."""
    inputs, weights = crowd(kind)
    late = read_only({s: v for s, v in inputs.items() if s != 3})
    claims = {s: w for s, w in weights.items() if s != 3}
    honest_mean = np.mean([inputs[i] for i in range(3)], axis=0)
    declared = typical_claim(list(weights.values()))
    result = aggregate_chunk(late, claims, replace(DILOCO, typical_claim=declared))
    assert result.screened == {}
    assert relative(result.values, honest_mean) < 0.01
    if kind == "noise":  # the chunk's claims alone: the noise sets the reference
        alone = aggregate_chunk(late, claims, DILOCO)
        assert set(alone.screened) == {0, 1, 2}


def test_two_honest_senders_and_tiny_identities_are_still_a_pair() -> None:
    # an embedding chunk one batch touched far more than the other: 20x apart is honest in a pair
    good = honest(2, seed=33)
    inputs = read_only({0: good[0], 1: good[1] * 20, 2: good[0] * 0.01, 3: good[0] * 0.01})
    result = aggregate_chunk(inputs, {0: 100.0, 1: 100.0, 2: 0.1, 3: 0.1}, CC)
    assert result.screened == {}
    # counted, the identities make it a group of four whose median the larger chunk is far above
    counted = aggregate_chunk(inputs, ones(inputs), CC)
    assert 1 in counted.screened


def test_half_of_the_senders_claiming_too_much_is_held_by_the_confirmed_claim() -> None:
    good = honest(4, seed=34)
    inputs = read_only({**good, 4: good[0] * 1000, 5: good[1] * 1000})
    weights = {0: 100.0, 1: 100.0, 2: 100.0, 3: 100.0, 4: 1e5, 5: 1e5}
    held = aggregate_chunk(inputs, weights, replace(CC, weight_ratio_limit=BOUNDED))
    assert set(held.screened) == {4, 5}  # fewer than half: held by the claims alone
    inputs = read_only({**good, 4: good[0] * 1000, 5: good[1] * 1000, 6: good[2] * 1000,
                        7: good[3] * 1000})  # fmt: skip
    weights = {**weights, 6: 1e5, 7: 1e5}
    # the round's typical claim, held by the last confirmed round's (``Averager.round_config``)
    confirmed = replace(CC, weight_ratio_limit=BOUNDED, typical_claim=100.0)
    result = aggregate_chunk(inputs, weights, confirmed)
    assert set(result.screened) == {4, 5, 6, 7}
    assert result.values is not None
    np.testing.assert_allclose(result.values, np.mean(list(good.values()), axis=0), atol=1e-5)
    # from the claims alone, half of the senders at a thousand times the claim are the typical
    # ones (the same numbers as honest senders beside tiny identities): they set the reference,
    # and their chunks pass
    alone = aggregate_chunk(inputs, weights, replace(CC, weight_ratio_limit=BOUNDED))
    assert alone.screened == {}
    assert relative(alone.values, np.mean(list(good.values()), axis=0)) > 100


def test_honest_claims_within_twice_of_each_other_count_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every sender then holds a whole vote: the medians are the counted ones, to the last bit,
    by the chunk's claims or by the round's typical claim."""
    good = honest(5, seed=35)
    inputs = read_only({**good, 5: good[0] * -3})
    claims = {0: 100.0, 1: 120.0, 2: 70.0, 3: 180.0, 4: 100.0, 5: 100.0}
    configs = (DILOCO, CC, replace(DILOCO, typical_claim=100.0))
    voted = [aggregate_chunk(inputs, claims, config) for config in configs]
    # one per sender, whatever the claims, as the medians were counted before votes
    monkeypatch.setattr(aggregation, "votes", lambda found, typical=None: [1.0] * len(found))
    counted = [aggregate_chunk(inputs, claims, config) for config in configs]
    for by_votes, by_count in zip(voted, counted, strict=True):
        assert by_votes.values is not None
        np.testing.assert_array_equal(by_votes.values, by_count.values)
        assert by_votes.screened == by_count.screened
        assert by_votes.capped == by_count.capped
        assert by_votes.clipped == by_count.clipped


# ---- screening ------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("config", [CC, MEAN], ids=["centered_clip", "mean"])
def test_a_chunk_with_nan_or_inf_is_screened_out(bad: float, config: AggregationConfig) -> None:
    good = honest(3, seed=3)
    broken = good[1].copy()
    broken[[7, 70, 700]] = bad
    inputs = read_only({0: good[0], 1: broken, 2: good[2]})
    result = aggregate_chunk(inputs, ones(inputs), config)
    assert result.included == frozenset({0, 2})
    statistic, value, reason = result.screened[1]
    assert statistic == "nonfinite"
    assert value == 3
    assert "3 of its 5000 values are NaN or infinite" in reason
    assert result.values is not None
    assert np.isfinite(result.values).all()
    np.testing.assert_allclose(result.values, (good[0] + good[2]) / 2, atol=2e-6)
    assert result.weight == 2.0


@pytest.mark.parametrize("config", [CC, MEAN], ids=["centered_clip", "mean"])
def test_a_norm_far_above_the_groups_is_screened_with_its_ratio(config: AggregationConfig) -> None:
    good = honest(4, seed=4)
    inputs = read_only({**good, 4: good[0] * 50, 5: good[1] * 3})
    result = aggregate_chunk(inputs, ones(inputs), config)
    assert set(result.screened) == {4}  # 3x the others is within the limit of 10x
    statistic, ratio, reason = result.screened[4]
    assert statistic == "norm_ratio"
    assert 40 < ratio < 60
    assert "the group's median (limit 10x)" in reason
    assert result.included == frozenset({0, 1, 2, 3, 5})


@pytest.mark.parametrize(
    ("factor", "noise", "left_out"),
    [
        (-9.5, 1.0, True),  # flipped, just under the norm limit: points away from the others
        (-9.5, 3.0, True),  # the same where the others agree little (a noisy round)
        (7.0, 1.0, False),  # a sender that did seven times the work: large, but with the others
        (-3.0, 1.0, True),  # flipped x3: far under the norm limit, above twice the median
        (-1.5, 1.0, False),  # flipped, within twice the median: CenteredClip's to bound
        (2.5, 3.0, False),  # a fast member where the others agree little: with them still
    ],
)
def test_a_large_chunk_pointing_away_from_the_others_is_screened(
    factor: float, noise: float, left_out: bool
) -> None:
    rng = np.random.default_rng(5)
    signal = rng.standard_normal(SIZE).astype(np.float32)
    rows = [signal + noise * rng.standard_normal(SIZE).astype(np.float32) for _ in range(4)]
    rows[3] = (factor * rows[3] / np.linalg.norm(rows[3]) * np.linalg.norm(rows[0])).astype(
        np.float32
    )
    inputs = read_only(dict(enumerate(rows)))
    checks = screen(inputs, CC.norm_ratio_limit, OPPOSED_FROM)
    assert (3 in checks.screened) is left_out
    assert set(checks.screened) <= {3}
    if left_out:
        statistic, cosine, reason = checks.screened[3]
        assert statistic == "opposed"
        assert cosine < 0
        assert "points away from the others" in reason
        # left out but no finding: an honest member far ahead in inner steps can overshoot
        assert checks.unattributed == {3}
    # a mode that does not screen by direction (dedloc's one-batch gradients) lets it through
    assert screen(inputs, CC.norm_ratio_limit).screened == {}
    on = aggregate_chunk(inputs, ones(inputs), replace(CC, opposed_from=OPPOSED_FROM))
    assert (3 not in on.included) is left_out
    assert (on.unattributed == {3}) is left_out


def test_a_chunk_too_small_to_have_a_direction_is_not_screened_by_it() -> None:
    # a bias of a few values has a cosine of about +-1 whoever sent it: an honest one 6.5x the
    # median with the other sign was accused that way
    rng = np.random.default_rng(6)
    small = OPPOSED_SIZE - 1
    rows = [np.abs(rng.standard_normal(small)).astype(np.float32) for _ in range(4)]
    rows[3] = -7.0 * rows[3]
    assert screen(read_only(dict(enumerate(rows))), 10.0, OPPOSED_FROM).screened == {}
    rows = [np.abs(rng.standard_normal(OPPOSED_SIZE)).astype(np.float32) for _ in range(4)]
    rows[3] = -7.0 * rows[3]
    assert set(screen(read_only(dict(enumerate(rows))), 10.0, OPPOSED_FROM).screened) == {3}


def test_a_chunk_too_small_for_statistics_is_left_out_but_nobody_is_accused() -> None:
    # an output bias: one honest sender's was 10-27x another's in four-trainer dedloc runs
    small = [np.full(1, v, dtype=np.float32) for v in (0.001, 0.002, 0.0015, 0.03)]
    checks = screen(read_only(dict(enumerate(small))), 10.0)
    assert set(checks.screened) == {3}
    statistic, ratio, reason = checks.screened[3]
    assert statistic == "norm_ratio"
    assert ratio == pytest.approx(20.0)
    assert "too small to tell" in reason
    assert checks.unattributed == {3}
    # a chunk of NORM_SIZE values or more accuses as before
    rng = np.random.default_rng(9)
    rows = [rng.standard_normal(NORM_SIZE).astype(np.float32) for _ in range(4)]
    rows[3] = rows[3] * 20
    checks = screen(read_only(dict(enumerate(rows))), 10.0)
    assert set(checks.screened) == {3}
    assert checks.unattributed == set()


@pytest.mark.parametrize(
    ("factor", "accused"), [(11.0, False), (29.0, False), (31.0, True), (1000.0, True)]
)
def test_a_mode_may_accuse_only_far_above_the_limit(factor: float, accused: bool) -> None:
    rng = np.random.default_rng(10)
    rows = [rng.standard_normal(1024).astype(np.float32) for _ in range(4)]
    rows[3] = rows[3] * np.float32(factor)
    inputs = read_only(dict(enumerate(rows)))
    checks = screen(inputs, 10.0, accuse_from=3.0)
    assert set(checks.screened) == {3}  # left out either way
    assert (checks.unattributed == set()) is accused
    if not accused:
        assert "not accused below 30x" in checks.screened[3][2]
    assert screen(inputs, 10.0).unattributed == set()  # by default every one is a finding


@pytest.mark.parametrize("factor", [11.0, 31.0, 14_080.0])
def test_a_mode_that_never_accuses_by_norm_leaves_out_all_the_same(factor: float) -> None:
    """diloco's: an honest trainer's chunk measured 14,080x the median near the end of the inner
    schedule; left out, no finding, and its reason says its norms."""
    rng = np.random.default_rng(11)
    rows = [rng.standard_normal(1024).astype(np.float32) for _ in range(4)]
    rows[3] = rows[3] * np.float32(factor)
    checks = screen(read_only(dict(enumerate(rows))), 10.0, accuse_from=NEVER)
    assert set(checks.screened) == {3}
    assert checks.unattributed == {3}
    assert "accuses nobody" in checks.screened[3][2]
    assert "[its norm" in checks.screened[3][2]


def test_a_pair_screens_only_what_no_honest_pair_shows() -> None:
    # a pair has no majority: a chunk 12x its partner's is as likely an honest sparse one as a
    # liar, so the pair's limit is five times the group's; x1000 is still far beyond it
    good = honest(1, seed=5)[0]
    sparse = read_only({0: good, 1: good * 12})
    result = aggregate_chunk(sparse, ones(sparse), CC)
    assert result.screened == {}
    assert result.included == frozenset({0, 1})
    inputs = read_only({0: good, 1: good * 1000})
    result = aggregate_chunk(inputs, ones(inputs), CC)
    assert set(result.screened) == {1}
    statistic, ratio, reason = result.screened[1]
    assert (statistic, round(ratio)) == ("norm_ratio", 1000)
    assert "(limit 50x; with two senders nobody can tell which is wrong" in reason
    assert result.values is not None
    np.testing.assert_array_equal(result.values, good)
    # left out, but nobody is accused: honest pairs cross the limit too (a sparse embedding chunk)
    assert result.unattributed == frozenset({1})
    broken = good.copy()
    broken[7] = np.nan
    inputs = read_only({0: good, 1: broken})
    nonfinite = aggregate_chunk(inputs, ones(inputs), CC)
    assert nonfinite.screened[1][0] == "nonfinite"
    assert nonfinite.unattributed == frozenset()  # NaN is wrong whoever sends it
    # a third sender with data makes a majority: the group's own limit applies again, and accuses
    third = read_only({0: good, 1: good * 12, 2: honest(1, seed=6)[0]})
    majority = aggregate_chunk(third, ones(third), CC)
    assert set(majority.screened) == {1}
    assert majority.unattributed == frozenset()


def test_zero_chunks_set_no_scale_and_accuse_nobody() -> None:
    # a chunk of rows that three peers' batches never touched: the fourth's data is not an outlier
    zero = np.zeros(SIZE, dtype=np.float32)
    data = honest(1, seed=6)[0]
    inputs = read_only({0: zero, 1: zero.copy(), 2: zero.copy(), 3: data})
    for config in (CC, MEAN):
        result = aggregate_chunk(inputs, ones(inputs), config)
        assert result.screened == {}
        assert result.clipped == {}
        assert result.values is not None
        np.testing.assert_allclose(result.values, data / 4, atol=1e-6)
    everything_zero = read_only({i: np.zeros(SIZE, dtype=np.float32) for i in range(3)})
    result = aggregate_chunk(everything_zero, ones(everything_zero), CC)
    assert result.values is not None
    assert not result.values.any()
    assert result.screened == {}
    assert result.included == frozenset(range(3))


def test_replicas_that_differ_in_the_last_bits_are_not_outliers() -> None:
    # parameters most peers hold bit for bit: the spread is 0 without the floor
    same = honest(1, seed=7)[0]
    nudged = np.nextafter(same, np.float32(np.inf)).astype(np.float32)
    inputs = read_only({0: same, 1: same.copy(), 2: same.copy(), 3: nudged})
    result = aggregate_chunk(inputs, ones(inputs), CC)
    assert result.clipped == {}
    assert result.values is not None
    np.testing.assert_allclose(result.values, same, rtol=1e-6)


def test_screening_off_lets_nan_through() -> None:
    inputs = read_only({0: np.ones(10, np.float32), 1: np.full(10, np.nan, np.float32)})
    result = aggregate_chunk(inputs, ones(inputs), AggregationConfig(screen=False))
    assert result.screened == {}
    assert result.values is not None
    assert np.isnan(result.values).all()


def test_lower_median_and_the_screening_reference() -> None:
    assert lower_median([3.0]) == 3.0
    assert lower_median([5.0, 1.0]) == 1.0
    assert lower_median([4.0, 1.0, 9.0]) == 4.0
    assert lower_median([4.0, 1.0, 9.0, 2.0]) == 2.0
    with pytest.raises(ValueError, match="no values"):
        lower_median([])
    checks = screen({0: np.full(4, 3.0, np.float32), 1: np.zeros(4, np.float32)}, 10.0)
    assert checks.reference == 6.0  # the zero chunk is not part of it
    assert checks.norms == {0: 6.0, 1: 0.0}


# ---- exact cases and determinism ------------------------------------------------------------------


@pytest.mark.parametrize("count", [2, 3, 4, 7])
def test_equal_inputs_give_exactly_that_value(count: int) -> None:
    value = honest(1, seed=8)[0]
    inputs = read_only({i: value.copy() for i in range(count)})
    weights = {i: float(i + 1) for i in range(count)}
    result = aggregate_chunk(inputs, weights, CC)
    assert result.values is not None
    np.testing.assert_array_equal(result.values, value)
    assert result.clipped == {}


def test_one_sender_gets_its_own_values_in_a_new_array() -> None:
    value = honest(1, seed=9)[0]
    for config in (CC, MEAN):
        result = aggregate_chunk(read_only({5: value.copy()}), {5: 7.0}, config)
        assert result.values is not None
        np.testing.assert_array_equal(result.values, value)
        assert result.values.flags.writeable
        assert result.weight == 7.0
        assert result.included == frozenset({5})


def test_nothing_to_aggregate() -> None:
    inputs = read_only({0: np.full(8, np.nan, np.float32)})
    result = aggregate_chunk(inputs, ones(inputs), CC)
    assert result == ChunkAggregate(None, 0.0, frozenset(), result.screened, {})
    assert aggregate_chunk({}, {}, CC).values is None


def test_the_same_inputs_give_the_same_bits_in_any_order() -> None:
    good = honest(4, seed=10)
    good[4] = -8 * good[0]  # clipped, so that every iteration does real work
    weights = {0: 1.0, 1: 2.5, 2: 1.0, 3: 4.0, 4: 1.0}
    first = aggregate_chunk(good, weights, CC, Workspace())
    backwards = {i: good[i].copy() for i in reversed(good)}
    workspace = Workspace()
    aggregate_chunk(honest(6, seed=11), ones(honest(6, seed=11)), CC, workspace)  # dirty it
    second = aggregate_chunk(backwards, dict(reversed(weights.items())), CC, workspace)
    assert first.values is not None
    assert second.values is not None
    assert first.values.tobytes() == second.values.tobytes()
    assert first.clipped == second.clipped


def test_weighted_mean_scales_by_shares_so_huge_weights_cannot_overflow() -> None:
    rows = [np.full(4, 1e10, np.float32), np.full(4, 3e10, np.float32)]
    np.testing.assert_allclose(weighted_mean(rows, [1e30, 1e30]), 2e10, rtol=1e-6)
    np.testing.assert_allclose(weighted_mean(rows, [3e30, 1e30]), 1.5e10, rtol=1e-6)


# ---- configuration --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"method": "median"}, "must be one of 'mean', 'centered_clip'"),
        ({"clip_tau": 0.0}, "clip_tau must be a positive number"),
        ({"clip_tau": math.inf}, "clip_tau must be a positive number"),
        ({"clip_iterations": 0}, "clip_iterations must be 1 to 100"),
        ({"norm_ratio_limit": 1.0}, "norm_ratio_limit must be above 1"),
        ({"norm_ratio_limit": math.nan}, "norm_ratio_limit must be above 1"),
        ({"clip_finding_below": 1.5}, r"clip_finding_below must be in \[0, 1\]"),
        ({"spread_floor": 1.0}, r"spread_floor must be in \[0, 1\)"),
        ({"weight_ratio_limit": 0.5}, "weight_ratio_limit must be at least 1"),
        ({"weight_ratio_limit": math.nan}, "weight_ratio_limit must be at least 1"),
        ({"accuse_from": 0.5}, "accuse_from must be at least 1"),
        ({"opposed_from": 0.0}, r"opposed_from must be in \(0, 1\]"),
        ({"opposed_from": 1.5}, r"opposed_from must be in \(0, 1\]"),
        ({"typical_claim": 0.0}, "typical_claim must be a positive number"),
        ({"typical_claim": math.inf}, "typical_claim must be a positive number"),
    ],
)
def test_bad_settings_are_refused_with_the_reason(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        AggregationConfig(**changes)  # type: ignore[arg-type]


def test_the_method_may_be_given_as_text() -> None:
    assert AggregationConfig(method="centered_clip").method is Method.CENTERED_CLIP  # type: ignore[arg-type]


def test_inputs_must_be_consistent() -> None:
    one = np.ones(4, np.float32)
    with pytest.raises(ValueError, match="both a chunk and a weight"):
        aggregate_chunk({0: one}, {1: 1.0}, CC)
    with pytest.raises(ValueError, match="differ in length"):
        aggregate_chunk({0: one, 1: np.ones(5, np.float32)}, {0: 1.0, 1: 1.0}, CC)
    with pytest.raises(ValueError, match="not a flat float32"):
        aggregate_chunk({0: np.ones(4)}, {0: 1.0}, CC)
    with pytest.raises(ValueError, match="finite and positive"):
        aggregate_chunk({0: one}, {0: math.nan}, CC)


# ---- the reducer ----------------------------------------------------------------------------------


async def test_the_reducer_excludes_screened_senders_for_the_rest_of_the_round() -> None:
    peers = [Identity.generate().peer_id for _ in range(4)]
    spans = [Span(0, i * 100, (i + 1) * 100, NONE) for i in range(3)]
    reducer = PartReducer(spans, {0, 1, 2, 3}, 4, 30.0, aggregation=CC, peers=peers, part=2)
    data = honest(4, seed=13, size=300)
    broken = data[3].copy()
    broken[150] = np.nan  # chunk 1 of sender 3 is broken
    for sender in range(3):
        for index, span in enumerate(spans):
            reducer.contribute(sender, index, data[sender][span.start : span.end], 1.0)
    for index, span in enumerate(spans):
        reducer.contribute(3, index, broken[span.start : span.end], 1.0)
    outcomes = [await reducer.result(i) for i in range(3)]
    assert outcomes[0].included == frozenset(range(4))
    assert outcomes[1].included == outcomes[2].included == frozenset(range(3))
    assert reducer.excluded == {3: reducer.excluded[3]}
    assert "chunk 1 was screened out" in reducer.excluded[3]
    (finding,) = reducer.findings
    assert (finding.peer, finding.part, finding.chunk) == (peers[3], 2, 1)
    assert (finding.statistic, finding.value) == ("nonfinite", 1.0)
    assert outcomes[2].values is not None
    expected = np.mean([data[s][200:300] for s in range(3)], axis=0)
    np.testing.assert_allclose(outcomes[2].values, expected, atol=1e-6)
    reducer.fail("the round is over")


async def test_the_reducer_refuses_a_weight_that_is_not_a_finite_positive_number() -> None:
    peers = [Identity.generate().peer_id for _ in range(2)]
    spans = [Span(0, 0, 10, NONE)]
    reducer = PartReducer(spans, {0, 1}, 2, 30.0, peers=peers, part=0)
    reducer.contribute(1, 0, np.ones(10, np.float32), math.nan)
    reducer.contribute(0, 0, np.full(10, 2.0, np.float32), 1.0)
    outcome = await reducer.result(0)
    assert outcome.included == frozenset({0})
    assert "weight nan" in reducer.excluded[1]
    assert [f.statistic for f in reducer.findings] == ["weight"]
    reducer.fail("the round is over")
