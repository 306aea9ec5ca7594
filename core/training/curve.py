"""The collaboration's loss curve as a trainer peer follows it.

Each completed epoch of the whole collaboration (loss = sum of all peers' losses over the sum of
their mini-steps, samples, speed, alive trainers) is aggregated from the progress records the
peer's optimizer fetches anyway, about once a second: following the curve adds no DHT traffic.
Each is handed on as a ``PeerMetrics`` event, the same event an auxiliary peer emits.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable

from core.training.metrics import EpochMetrics, MetricsAggregator
from core.training.progress import CollaborationView
from core.worker.events import PeerEvent, PeerMetrics

log = logging.getLogger(__name__)

METRICS_INTERVAL = 1.0
"""Seconds between looks at the progress records for completed epochs."""


def metrics_event(metrics: EpochMetrics, *, by_user: bool = False) -> PeerMetrics:
    """The event of one completed epoch of the whole collaboration (a diverged loss as None);
    ``by_user``: with the samples per user (an auxiliary peer's, which reports them)."""
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


async def follow_metrics(
    view: Callable[[], CollaborationView],
    aggregator: MetricsAggregator,
    emit: Callable[[PeerEvent], None],
    *,
    interval: float = METRICS_INTERVAL,
) -> None:
    """Emit each completed epoch found in ``view()``'s records (the optimizer's, already fetched:
    this loop asks the DHT nothing), until cancelled."""
    while True:
        await asyncio.sleep(interval)
        try:
            for metrics in aggregator.observe(view().reports, time.time()):
                emit(metrics_event(metrics))
        except Exception:  # one bad report must not end the curve for the rest of the run
            log.exception("reporting the collaboration's metrics failed")
