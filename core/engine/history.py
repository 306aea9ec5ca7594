"""History: the collaboration's loss curve per project, as the engine's peer saw its epochs complete.

The peer reports each completed epoch of the whole collaboration (``metrics`` events: loss over all
peers' mini-steps, samples, speed, alive trainers). Each becomes an ``EpochPoint``: kept in memory
for the API's answers and written to the ledger's file, where the newest ``EPOCHS_KEPT`` of each
project survive restarts. A project's points are loaded from the ledger the first time they are
asked for.

A rebuilt peer (after a pause of the engine, a failure, a new run of the local swarm) reports once
more the last epoch it finds complete, which the engine has usually recorded already: a point with
the same epoch as the newest one is dropped. A smaller epoch is kept: a collaboration that was
started afresh counts from 0 again, and the curve should show that.
"""

from __future__ import annotations

import collections
import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

from core.api.schema import EpochPoint
from core.stats import EPOCHS_KEPT, EpochRow, Ledger, LedgerError

log = logging.getLogger(__name__)


class History:
    def __init__(
        self,
        ledger: Ledger,
        *,
        keep: int = EPOCHS_KEPT,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self._ledger = ledger
        self._keep = keep
        self._on_error = on_error
        self._points: dict[str, collections.deque[EpochPoint]] = {}

    def points(self, project: str) -> list[EpochPoint]:
        """The project's points, oldest first."""
        return list(self._loaded(project))

    def record(self, project: str, point: EpochPoint) -> bool:
        """Keep a new point; False (and nothing kept) when it repeats the newest epoch.

        A ledger that cannot be written is reported through ``on_error``; the point is still kept
        in memory, so the curve the user sees does not lose it."""
        points = self._loaded(project)
        if points and points[-1].epoch == point.epoch:
            return False
        points.append(point)
        try:
            self._ledger.add_epoch(project, _row(point), keep=self._keep)
        except LedgerError as exc:
            log.error("could not record epoch %d of %s: %s", point.epoch, project, exc)
            if self._on_error is not None:
                self._on_error(str(exc))
        return True

    def _loaded(self, project: str) -> collections.deque[EpochPoint]:
        points = self._points.get(project)
        if points is None:
            try:
                rows = self._ledger.epochs(project, self._keep)
            except LedgerError as exc:
                log.error("could not read the epochs of %s: %s", project, exc)
                rows = []
            points = collections.deque((_point(r) for r in rows), maxlen=self._keep)
            self._points[project] = points
        return points


def point_from_event(event: Mapping[str, Any]) -> EpochPoint | None:
    """The ``EpochPoint`` of a peer's ``metrics`` event; None (and a warning) if it is malformed."""
    try:
        epoch, samples, peers = (
            _whole(event[name]) for name in ("epoch", "samples", "alive_peers")
        )
        when, speed = (_finite(event[name]) for name in ("time", "samples_per_second"))
        loss = _loss(event.get("loss"))
    except (KeyError, TypeError, ValueError) as exc:
        log.warning("ignored a malformed metrics event %r: %s", dict(event), exc)
        return None
    if speed < 0:
        log.warning("ignored a metrics event with a negative speed: %r", dict(event))
        return None
    return EpochPoint(epoch, when, loss, samples, speed, peers)


def _whole(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected a whole number >= 0, got {value!r}")
    return value


def _finite(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected a number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {value!r}")
    return float(value)


def _loss(value: Any) -> float | None:
    """A diverged collaboration's loss (inf, NaN) is as unknown as a missing one."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected a number or None for the loss, got {value!r}")
    return float(value) if math.isfinite(value) else None


def _row(point: EpochPoint) -> EpochRow:
    return EpochRow(
        point.epoch, point.time, point.loss, point.samples, point.samples_per_second, point.peers
    )


def _point(row: EpochRow) -> EpochPoint:
    return EpochPoint(row.epoch, row.time, row.loss, row.samples, row.samples_per_second, row.peers)
