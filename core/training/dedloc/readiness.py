"""How close the collaboration is to the target batch: a pure function of the records and the time.

A trainer asks this at every microbatch to decide how often to publish and read progress. Each other
trainer counts with the samples it reported plus its speed times the seconds since it reported (the
records are a few tenths of a second old when read, and a fast peer adds many samples meanwhile). A
peer whose last record is from the epoch before ours most likely stepped with us and has not reported
yet: it counts at its speed since our epoch began. Records that say nothing about the work towards our
epoch count for nothing: a paused peer, a backbone, one that left, one whose record has not
been refreshed within ``RECORD_TTL`` (it vanished: a killed process or a lost link), and a late joiner
still at an older epoch (it will download the state before it contributes).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from core.training.progress import RECORD_TTL, PeerProgress


@dataclass(frozen=True)
class Own:
    """What this peer knows of itself: its id, epoch, samples, speed and when its epoch began."""

    peer: str
    epoch: int
    samples: int
    speed: float
    epoch_started: float


def fresh(record: PeerProgress, now: float, ttl: float = RECORD_TTL) -> bool:
    """Whether ``record`` was refreshed recently enough to speak for a live peer."""
    return now - record.time <= ttl


def estimate(records: Iterable[PeerProgress], own: Own, now: float) -> float:
    """Samples towards ``own.epoch``, the others' extrapolated from their speed since they reported.

    Infinite while some live trainer's speed is unknown and we have none to assume either: the
    caller should then watch at every step."""
    total = float(own.samples)
    for record in records:
        if record.peer == own.peer or not record.training or not fresh(record, now):
            continue
        speed = record.samples_per_second or own.speed  # unknown yet: assume ours
        if record.epoch == own.epoch:
            if speed == 0:
                return math.inf
            total += record.samples + speed * max(0.0, now - record.time)
        elif record.epoch == own.epoch - 1:
            if speed == 0:
                return math.inf
            total += speed * max(0.0, now - own.epoch_started)
    return total
