"""The sketch a replayer answers: the same on every machine, linear, and a measure of relative
distance close enough to the blocks' own that no verdict changes."""

from __future__ import annotations

import numpy as np
import pytest

from core.training.diloco.checks.replay import LIMITS, judge
from core.training.diloco.checks.sketch import MAX_KEY, WIDTH, size, sketch


def test_known_answers_pin_the_hash() -> None:
    """Worked once and written down: a numpy or platform that buckets otherwise would make every
    honest replayer look false to a backbone that does not."""
    values = np.arange(1, 9, dtype=np.float32)
    assert sketch(values, 1, 4).tolist() == [-7.0, 2.0, 8.0, 7.0]
    assert sketch(values, 2, 4).tolist() == [-2.0, 3.0, -3.0, -2.0]
    assert sketch(values, MAX_KEY, 4).shape == (4,)


def test_values_no_more_than_the_buckets_are_answered_as_they_are() -> None:
    """A small model's blocks (a test's) are smaller than a sketch: sent whole, judged exactly."""
    values = np.linspace(-1, 1, WIDTH, dtype=np.float32)
    assert sketch(values, 8).tobytes() == values.tobytes()
    assert (size(WIDTH), size(WIDTH + 1), size(10)) == (WIDTH, WIDTH, 10)
    assert sketch(np.append(values, 2.0), 8).shape == (WIDTH,)


def test_the_same_values_and_key_give_the_same_bytes() -> None:
    rng = np.random.default_rng(1)
    values = rng.standard_normal(70_000).astype(np.float32)
    first = sketch(values, 12345)
    assert first.dtype == np.float32
    assert first.shape == (WIDTH,)
    assert sketch(values.copy(), 12345).tobytes() == first.tobytes()
    assert sketch(values, 12346).tobytes() != first.tobytes()  # another key, other buckets


def test_a_sketch_is_linear() -> None:
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((2, 50_000))
    together = sketch(a - b, 7).astype(np.float64)
    apart = sketch(a, 7).astype(np.float64) - sketch(b, 7).astype(np.float64)
    np.testing.assert_allclose(together, apart, rtol=0, atol=1e-4)


def test_its_length_estimates_the_values_length() -> None:
    """Over many keys and heavy-tailed values (the spread of a model's work across layers): the
    length within a few percent, as the variance of a count sketch says (sqrt(1 / (2 * WIDTH)):
    1.1 % in standard deviation)."""
    rng = np.random.default_rng(3)
    errors = []
    for _ in range(100):
        values = rng.standard_normal(65_536) * np.exp(2 * rng.standard_normal(65_536))
        key = int(rng.integers(0, 1 << 62))
        errors.append(float(np.linalg.norm(sketch(values, key)) / np.linalg.norm(values)) - 1)
    assert abs(float(np.mean(errors))) < 0.005
    assert float(np.std(errors)) < 0.02
    assert max(abs(e) for e in errors) < 0.08


@pytest.mark.parametrize(
    ("kind", "distance"),
    [
        ("float32 equal", 0.0),
        ("float16 autocast", 0.0096),  # the honest members measured by diloco_replay
        ("bfloat16", 0.020),
        ("at the float32 limit", 0.05),
        ("twice the steps claimed", 0.63),  # the nearest cheat measured
        ("a partner's update", 1.03),
    ],
)
def test_judged_on_sketches_the_distance_is_the_blocks_within_a_few_percent(
    kind: str, distance: float
) -> None:
    rng = np.random.default_rng(4)
    replayed = (rng.standard_normal(65_536) * np.exp(rng.standard_normal(65_536))).astype(
        np.float32
    )
    off = rng.standard_normal(65_536)
    off *= distance * np.linalg.norm(replayed) / np.linalg.norm(off)
    work = (replayed + off).astype(np.float32)
    full = judge(work, replayed, "float32").distance
    for key in (1, 99, 1 << 40):
        sketched = judge(sketch(work, key), sketch(replayed, key), "float32").distance
        assert sketched == pytest.approx(full, rel=0.05, abs=1e-6), kind
    if distance == 0.0:
        assert judge(sketch(work, 5), sketch(replayed, 5), "float32").distance == 0.0
    for precision, limit in LIMITS.items():
        # a verdict the blocks give with a margin of 10 % is the verdict the sketches give
        if abs(full - limit) > 0.1 * limit:
            blocks = judge(work, replayed, precision).passed
            assert judge(sketch(work, 3), sketch(replayed, 3), precision).passed == blocks


@pytest.mark.parametrize(("key", "width"), [(-1, WIDTH), (MAX_KEY + 1, WIDTH), (1, 0)])
def test_a_bad_key_or_width_is_refused(key: int, width: int) -> None:
    with pytest.raises(ValueError, match=r"key|buckets"):
        sketch(np.ones(4), key, width)
