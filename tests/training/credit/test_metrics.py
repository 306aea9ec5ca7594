"""The collaboration's per-epoch metrics from progress records (pure: no swarm), the trainer's
``metrics`` event made from them, and the backbone's held-out evaluations its records carry, each
told once."""

from __future__ import annotations

import asyncio
import contextlib
import math

from core.training.credit.metrics import EpochMetrics, MetricsAggregator
from core.training.curve import HeldOutFollower, follow_metrics, metrics_event
from core.training.progress import CollaborationView, HeldOut, PeerProgress
from core.worker.events import PeerEvaluation, PeerEvent, PeerMetrics, to_json


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


def aux_record(peer: str, held_out: HeldOut | None, role: str = "backbone") -> PeerProgress:
    return PeerProgress(peer, 9, 0, 0.0, 0.0, role, held_out=held_out)


def test_each_evaluation_is_told_once_and_the_newest_epochs_is_followed() -> None:
    follower = HeldOutFollower()
    assert follower.observe([record("a", 3, 12.0, 4, 64)], 1.0) is None  # no backbone record
    five = HeldOut(5, 3.5, 0.4, 256)
    told = follower.observe([record("a", 3, 12.0, 4, 64), aux_record("aux", five)], 2.0)
    assert told == PeerEvaluation(5, 3.5, 0.4, 256, tokens=0, seconds=0.0, time=2.0)
    assert follower.observe([aux_record("aux", five)], 3.0) is None  # the same epoch again
    # two backbones: the newest epoch's evaluation, whichever record carries it
    seven = HeldOut(7, None, 0.45, 256)
    both = [aux_record("old", HeldOut(6, 3.4, 0.42, 256)), aux_record("aux", seven)]
    assert follower.observe(both, 4.0) == PeerEvaluation(7, None, 0.45, 256, 0, 0.0, 4.0)
    assert follower.observe([aux_record("old", HeldOut(6, 3.4, 0.42, 256))], 5.0) is None
    # only aux records say what the backbone measured
    assert follower.observe([aux_record("t", HeldOut(9, 1.0, 0.9, 1), "trainer")], 6.0) is None


def test_the_floor_a_record_carries_is_handed_on() -> None:
    floored = aux_record("aux", HeldOut(5, 3.5, 0.4, 256, 6.25))
    told = HeldOutFollower().observe([floored], 2.0)
    assert told == PeerEvaluation(5, 3.5, 0.4, 256, 0, 0.0, 2.0, floor=6.25)
    # an older backbone's record has none: the event says so
    bare = HeldOutFollower().observe([aux_record("aux", HeldOut(5, 3.5, 0.4, 256))], 2.0)
    assert bare is not None
    assert bare.floor is None


def test_a_rebuilt_peer_tells_the_newest_evaluation_once_more() -> None:
    records = [aux_record("aux", HeldOut(4, 3.0, 0.5, 64))]
    assert HeldOutFollower().observe(records, 1.0) is not None
    again = HeldOutFollower()
    assert [again.observe(records, t) for t in (2.0, 3.0)] == [
        PeerEvaluation(4, 3.0, 0.5, 64, 0, 0.0, 2.0),
        None,
    ]


async def test_the_trainer_following_the_records_emits_each_evaluation_once() -> None:
    records: list[PeerProgress] = [record("a", -1, 0.0, 0, 0)]
    emitted: list[PeerEvent] = []

    def view() -> CollaborationView:
        return CollaborationView(0, 0, 0.0, list(records), 1)

    follower = asyncio.create_task(
        follow_metrics(view, MetricsAggregator(grace=0.0), emitted.append, interval=0.005)
    )
    try:
        await asyncio.sleep(0.05)
        records.append(aux_record("aux", HeldOut(2, 3.0, 0.5, 64)))
        await asyncio.sleep(0.05)
        records[-1] = aux_record("aux", HeldOut(3, 2.9, 0.52, 64))
        await asyncio.sleep(0.05)
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower
    told = [(e.epoch, e.loss) for e in emitted if isinstance(e, PeerEvaluation)]
    assert told == [(2, 3.0), (3, 2.9)]
