"""The collaboration's loss curve as a trainer peer follows it.

Each completed epoch of the whole collaboration (loss = sum of all peers' losses over the sum of
their mini-steps, samples, speed, alive trainers) is aggregated from the progress records the
peer's optimizer fetches anyway, about once a second: following the curve adds no DHT traffic.
Each is handed on as a ``PeerMetrics`` event, the same event a backbone emits.

The backbone's record carries its newest held-out evaluation (``HeldOut``, its unigram floor
included); each new one (by epoch, the newest of any backbone record's) is handed on as a
``PeerEvaluation`` event, once.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Iterable

from core.config.roles import BACKBONE
from core.training.credit.metrics import EpochMetrics, MetricsAggregator
from core.training.progress import CollaborationView, HeldOut, PeerProgress
from core.worker.events import PeerEvaluation, PeerEvent, PeerMetrics

log = logging.getLogger(__name__)

METRICS_INTERVAL = 1.0
"""Seconds between looks at the progress records for completed epochs."""


def metrics_event(metrics: EpochMetrics, *, by_user: bool = False) -> PeerMetrics:
    """The event of one completed epoch of the whole collaboration (a diverged loss as None);
    ``by_user``: with the samples per user (a backbone's, which reports them)."""
    loss = metrics.loss
    return PeerMetrics(
        epoch=metrics.epoch,
        loss=loss if loss is not None and math.isfinite(loss) else None,
        samples=metrics.samples,
        samples_per_second=metrics.samples_per_second,
        alive_peers=metrics.alive_peers,
        time=metrics.time,
        contributions=metrics.by_user() if by_user else {},
    )


def evaluation_event(held_out: HeldOut, now: float) -> PeerEvaluation:
    """The event of the backbone's evaluation as its record tells it (which carries neither the
    tokens nor the seconds it took: 0 here), seen at ``now``."""
    return PeerEvaluation(
        epoch=held_out.epoch,
        loss=held_out.loss,
        accuracy=held_out.accuracy,
        samples=held_out.samples,
        tokens=0,
        seconds=0.0,
        time=now,
        floor=held_out.floor,
    )


class HeldOutFollower:
    """The newest held-out evaluation in the records, each epoch's told once.

    When several backbone records carry one, the newest epoch's is followed; an evaluation of an epoch
    already told, or of an older one, is not told. A follower made afresh (a rebuilt peer) tells
    the newest one again, once, as the metrics do."""

    def __init__(self) -> None:
        self._told = -1

    def observe(self, records: Iterable[PeerProgress], now: float) -> PeerEvaluation | None:
        carried = [r.held_out for r in records if r.role == BACKBONE and r.held_out is not None]
        newest = max(carried, key=lambda h: h.epoch, default=None)
        if newest is None or newest.epoch <= self._told:
            return None
        self._told = newest.epoch
        return evaluation_event(newest, now)


async def follow_metrics(
    view: Callable[[], CollaborationView],
    aggregator: MetricsAggregator,
    emit: Callable[[PeerEvent], None],
    *,
    interval: float = METRICS_INTERVAL,
) -> None:
    """Emit each completed epoch and each new held-out evaluation found in ``view()``'s records
    (the optimizer's, already fetched: this loop asks the DHT nothing), until cancelled."""
    held_out = HeldOutFollower()
    while True:
        await asyncio.sleep(interval)
        try:
            now, seen = time.time(), view()
            for metrics in aggregator.observe(seen.reports, now):
                emit(metrics_event(metrics))
            evaluation = held_out.observe(seen.peers, now)
            if evaluation is not None:
                emit(evaluation)
        except Exception:  # one bad report must not end the curve for the rest of the run
            log.exception("reporting the collaboration's metrics failed")
