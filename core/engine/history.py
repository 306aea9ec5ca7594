"""History: the collaboration's loss curve per project, as the engine's peer saw its epochs complete.

The peer reports each completed epoch of the whole collaboration (``PeerMetrics`` events: loss over
all peers' mini-steps, samples, speed, alive trainers). Each becomes an ``EpochPoint``: kept in memory
for the API's answers and written to the ledger's file, where the newest ``EPOCHS_KEPT`` of each
project survive restarts. A project's points are loaded from the ledger the first time they are
asked for.

A rebuilt peer (after a pause of the engine, a failure, a new run of the local swarm) reports once
more the last epoch it finds complete, which the engine has usually recorded already: a point with
the same epoch as the newest one is dropped. A smaller epoch is kept: a collaboration that was
started afresh counts from 0 again, and the curve should show that.

The backbone's held-out evaluations (``PeerEvaluation`` events, which a trainer reads in the
backbone's progress record) are kept beside the points the same way, as ``HeldOutPoint``s in a
ledger table of their own: an evaluation may be seen before its epoch completes, or after. Each
keeps the unigram floor its event carried (a floor that is not finite is as unknown as none).
"""

from __future__ import annotations

import collections
import logging
import math
from collections.abc import Callable

from core.api.schema import EpochPoint, HeldOutPoint
from core.stats import EPOCHS_KEPT, EpochRow, HeldOutRow, Ledger, LedgerError
from core.worker.events import PeerEvaluation, PeerMetrics

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
        self._held_out: dict[str, collections.deque[HeldOutPoint]] = {}

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

    def held_out(self, project: str) -> list[HeldOutPoint]:
        """The project's held-out evaluations, oldest first."""
        return list(self._held_out_loaded(project))

    def record_held_out(self, project: str, point: HeldOutPoint) -> bool:
        """Keep a new evaluation; False (and nothing kept) when it repeats the newest epoch. A
        ledger that cannot be written is reported as ``record`` does."""
        kept = self._held_out_loaded(project)
        if kept and kept[-1].epoch == point.epoch:
            return False
        kept.append(point)
        row = HeldOutRow(
            point.epoch, point.time, point.loss, point.accuracy, point.samples, point.floor
        )
        try:
            self._ledger.add_held_out(project, row, keep=self._keep)
        except LedgerError as exc:
            log.error("could not record the evaluation of epoch %d of %s: %s", point.epoch,
                      project, exc)  # fmt: skip
            if self._on_error is not None:
                self._on_error(str(exc))
        return True

    def _held_out_loaded(self, project: str) -> collections.deque[HeldOutPoint]:
        kept = self._held_out.get(project)
        if kept is None:
            try:
                rows = self._ledger.held_out(project, self._keep)
            except LedgerError as exc:
                log.error("could not read the evaluations of %s: %s", project, exc)
                rows = []
            kept = collections.deque(
                (
                    HeldOutPoint(r.epoch, r.time, r.loss, r.accuracy, r.samples, r.floor)
                    for r in rows
                ),
                maxlen=self._keep,
            )
            self._held_out[project] = kept
        return kept

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


def point_from_event(event: PeerMetrics) -> EpochPoint | None:
    """The ``EpochPoint`` of a peer's metrics; None (and a warning) if a value is out of range.

    The types were checked where the event was made (or read from JSON); its values are checked
    here: counts of at least 0, a finite time, a finite speed of at least 0."""
    counts = (event.epoch, event.samples, event.alive_peers)
    if min(counts) < 0 or not math.isfinite(event.time):
        log.warning("ignored a metrics event with impossible values: %r", event)
        return None
    if not math.isfinite(event.samples_per_second) or event.samples_per_second < 0:
        log.warning("ignored a metrics event with an impossible speed: %r", event)
        return None
    # a diverged collaboration's loss (inf, NaN) is as unknown as a missing one
    loss = event.loss if event.loss is not None and math.isfinite(event.loss) else None
    return EpochPoint(
        event.epoch, event.time, loss, event.samples, event.samples_per_second, event.alive_peers
    )


def held_out_from_event(event: PeerEvaluation) -> HeldOutPoint | None:
    """The ``HeldOutPoint`` of an evaluation; None (and a warning) if a value is out of range:
    counts of at least 0, a finite time, an accuracy of 0 to 1 (a loss or floor that is not finite
    is unknown)."""
    if min(event.epoch, event.samples) < 0 or not math.isfinite(event.time):
        log.warning("ignored an evaluation event with impossible values: %r", event)
        return None
    if not (math.isfinite(event.accuracy) and 0 <= event.accuracy <= 1):
        log.warning("ignored an evaluation event with an impossible accuracy: %r", event)
        return None
    loss = event.loss if event.loss is not None and math.isfinite(event.loss) else None
    floor = event.floor if event.floor is not None and math.isfinite(event.floor) else None
    return HeldOutPoint(event.epoch, event.time, loss, event.accuracy, event.samples, floor)


def _row(point: EpochPoint) -> EpochRow:
    return EpochRow(
        point.epoch, point.time, point.loss, point.samples, point.samples_per_second, point.peers
    )


def _point(row: EpochRow) -> EpochPoint:
    return EpochPoint(row.epoch, row.time, row.loss, row.samples, row.samples_per_second, row.peers)
