"""The collaboration's per-epoch metrics from progress records (pure: no swarm), and the trainer's
``metrics`` event made from them."""

from __future__ import annotations

import math

from core.training.curve import metrics_event
from core.training.metrics import EpochMetrics, MetricsAggregator
from core.training.progress import PeerProgress
from core.worker.events import PeerMetrics, to_json


def record(peer: str, last_epoch: int, loss_sum: float, steps: int, samples: int) -> PeerProgress:
    """A trainer's record after it finished ``last_epoch`` with these totals."""
    return PeerProgress(
        peer,
        last_epoch + 1,
        0,
        50.0,
        0.0,
        "trainer",
        last_epoch=last_epoch,
        last_loss_sum=loss_sum,
        last_mini_steps=steps,
        last_samples=samples,
    )


def test_loss_is_the_sum_of_losses_over_the_sum_of_mini_steps() -> None:
    aggregator = MetricsAggregator(grace=1.0)
    records = [record("a", 3, 12.0, 4, 64), record("b", 3, 4.0, 2, 32)]
    assert aggregator.observe(records, now=100.0) == []  # within the grace: slower peers may add
    (done,) = aggregator.observe(records, now=101.5)
    assert (done.epoch, done.samples, done.alive_peers) == (3, 96, 2)
    assert done.loss is not None
    assert math.isclose(done.loss, 16.0 / 6)
    assert aggregator.observe(records, now=110.0) == []  # reported once


def test_epochs_before_the_floor_are_never_reported() -> None:
    # a peer joining at collaboration epoch 10 sets the floor at 8: epoch 9, the last complete
    # one, starts its curve; a lagging peer's record of epoch 6 does not become a point
    aggregator = MetricsAggregator(grace=0.0, after_epoch=8)
    done = aggregator.observe([record("late", 6, 9.0, 3, 48), record("a", 9, 5.0, 2, 32)], 1.0)
    assert [m.epoch for m in done] == [9]


def test_a_record_of_no_finished_epoch_is_never_an_epoch() -> None:
    # a trainer joining a fresh collaboration (epoch 0) sets the floor at -2; the records say
    # last_epoch -1 until an epoch ends, and that is not an epoch of the curve
    aggregator = MetricsAggregator(grace=0.0, after_epoch=-2)
    fresh = [record("a", -1, 0.0, 0, 0), record("b", -1, 0.0, 0, 0)]
    assert aggregator.observe(fresh, 1.0) == []
    (first,) = aggregator.observe([record("a", 0, 4.0, 2, 32), record("b", 0, 2.0, 1, 16)], 2.0)
    assert first.epoch == 0


def test_the_event_has_the_fields_the_engine_reads_and_no_infinite_loss() -> None:
    metrics = EpochMetrics(7, 3.25, 512, 120.5, 3, 1_700_000_000.0)
    assert metrics_event(metrics) == PeerMetrics(7, 3.25, 512, 120.5, 3, 1_700_000_000.0)
    assert to_json(metrics_event(metrics)) == {
        "event": "metrics",
        "epoch": 7,
        "loss": 3.25,
        "samples": 512,
        "samples_per_second": 120.5,
        "alive_peers": 3,
        "time": 1_700_000_000.0,
        "contributions": {},
    }
    assert metrics_event(EpochMetrics(8, math.inf, 512, 1.0, 3, 0.0)).loss is None
    assert metrics_event(EpochMetrics(9, None, 512, 1.0, 3, 0.0)).loss is None
