"""The samples behind a checkpoint: the sum of the backbone's reported epochs before it, going on
from the checkpoint it resumed from, and no figure at all where one epoch of them is unknown."""

from __future__ import annotations

from core.training.credit.metrics import EpochMetrics
from core.training.credit.samples import SAMPLES_TOTAL, SamplesTally, samples_total


def epoch(number: int, samples: int = 256, **flags: bool) -> EpochMetrics:
    return EpochMetrics(number, 6.0, samples, 100.0, 3, 1_700_000_000.0, **flags)


def test_110_epochs_of_256_samples_are_28160() -> None:
    tally = SamplesTally()
    for number in range(110):
        tally.add(epoch(number))
    assert tally.before(110, 0) == 28_160
    assert tally.before(100, 0) == 25_600
    assert tally.before(0, 0) == 0
    assert tally.before(111, 0) is None  # epoch 110 is not reported yet


def test_late_credit_counts_and_withdrawn_credit_is_taken_back() -> None:
    tally = SamplesTally(open_epochs=4)
    for number in range(10):
        tally.add(epoch(number, 288))
    tally.add(epoch(3, 32, late=True))  # summed already: goes into the sum
    tally.add(epoch(9, 32, late=True))
    tally.add(epoch(8, 288, withdrawn=True))
    assert tally.before(10, 0) == 10 * 288 + 64 - 288


def test_epochs_reported_out_of_order_and_a_gap() -> None:
    tally = SamplesTally(open_epochs=8)
    for number in (0, 2, 1, 3):
        tally.add(epoch(number))
    assert tally.before(4, 0) == 4 * 256
    tally.add(epoch(5))
    assert tally.before(6, 0) is None  # epoch 4 is unknown
    assert tally.before(4, 0) == 4 * 256
    tally.add(epoch(4, 100, late=True))  # a record read late fills it
    assert tally.before(6, 0) == 5 * 256 + 100


def test_an_epoch_that_never_comes_loses_the_count_for_good() -> None:
    tally = SamplesTally(open_epochs=4)
    tally.add(epoch(0))
    for number in range(2, 8):  # epoch 1 is never reported
        tally.add(epoch(number))
    assert tally.before(1, 0) is None
    assert tally.before(8, 0) is None
    tally.add(epoch(1, late=True))
    assert tally.before(9, 0) is None


def test_a_resumed_backbone_goes_on_from_its_checkpoint() -> None:
    tally = SamplesTally()
    tally.resume({"epoch": 100, "samples": 288, SAMPLES_TOTAL: 25_600}, 100, 0)
    for number in range(95, 100):
        # the trainers' records still list epochs the checkpoint counted: credit again, ignored
        tally.add(epoch(number, late=True))
    for number in range(100, 110):
        tally.add(epoch(number))
    assert tally.before(110, 0) == 28_160
    assert tally.before(99, 0) is None  # before the checkpoint it went on from


def test_an_old_checkpoint_or_a_rollback_leaves_the_count_unknown() -> None:
    tally = SamplesTally()
    tally.resume({"epoch": 100, "samples": 288}, 100, 0)  # a checkpoint without the count
    for number in range(100, 110):
        tally.add(epoch(number))
    assert tally.before(110, 0) is None

    tally = SamplesTally()
    for number in range(10):
        tally.add(epoch(number))
    assert tally.before(10, 1) is None  # the replica went back to an older checkpoint's weights


def test_only_a_count_is_read_from_a_checkpoint() -> None:
    assert samples_total({SAMPLES_TOTAL: 28_160}) == 28_160
    assert samples_total({SAMPLES_TOTAL: 0}) == 0
    for odd in (None, True, -1, 2.5, "28160"):
        assert samples_total({SAMPLES_TOTAL: odd}) is None
    assert samples_total({"samples": 288}) is None
