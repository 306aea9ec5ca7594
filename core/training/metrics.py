"""The collaboration's metrics per epoch, aggregated from everyone's progress records.

Each peer's record carries the loss totals of the last epoch it finished. The loss of an epoch is the
sum of all peers' losses over the sum of their mini-steps (so a fast peer weighs as much as its work);
samples and speed are summed; alive peers are the trainers with fresh records. An epoch is reported
once, a short grace after its first totals appear, so that slower peers' totals are included.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from core.training.progress import PeerProgress


@dataclass(frozen=True)
class EpochMetrics:
    epoch: int
    loss: float | None
    """None when no peer reported a finite loss for this epoch."""
    samples: int
    samples_per_second: float
    alive_peers: int
    time: float

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


@dataclass
class _Totals:
    first_seen: float
    by_peer: dict[str, tuple[float, int, int]] = field(default_factory=dict)


class MetricsAggregator:
    def __init__(self, grace: float = 1.0) -> None:
        self.grace = grace
        self._pending: dict[int, _Totals] = {}
        self._reported = -1

    def observe(self, records: list[PeerProgress], now: float) -> list[EpochMetrics]:
        """Take fresh records; return the epochs that are now complete, oldest first."""
        for record in records:
            epoch = record.last_epoch
            if epoch <= self._reported or record.mode == "aux":
                continue
            totals = self._pending.setdefault(epoch, _Totals(now))
            totals.by_peer[record.peer] = (
                record.last_loss_sum,
                record.last_mini_steps,
                record.last_samples,
            )
        trainers = [r for r in records if r.training]
        speed = sum(r.samples_per_second for r in trainers)
        newest = max((r.last_epoch for r in trainers), default=-1)
        done = []
        for epoch in sorted(self._pending):
            totals = self._pending[epoch]
            # an epoch is complete after the grace, or once a later one has also closed
            if now - totals.first_seen < self.grace and epoch >= newest:
                break
            done.append(self._finish(epoch, totals, speed, len(trainers), now))
        return done

    def _finish(
        self, epoch: int, totals: _Totals, speed: float, alive: int, now: float
    ) -> EpochMetrics:
        del self._pending[epoch]
        self._reported = max(self._reported, epoch)
        for stale in [e for e in self._pending if e <= epoch]:
            del self._pending[stale]
        loss_sum = sum(v[0] for v in totals.by_peer.values())
        steps = sum(v[1] for v in totals.by_peer.values())
        loss = loss_sum / steps if steps and math.isfinite(loss_sum) else None
        samples = sum(v[2] for v in totals.by_peer.values())
        return EpochMetrics(epoch, loss, samples, round(speed, 1), alive, now)


class MetricsLog:
    """Appends one JSON line per epoch (a file any tool can tail)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, metrics: EpochMetrics) -> None:
        with self.path.open("a", encoding="utf-8") as out:
            out.write(metrics.to_json() + "\n")
