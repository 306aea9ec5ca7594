"""The samples behind a checkpoint: how many the collaboration had trained on when it was written.

The backbone's metrics give each epoch's samples (``EpochMetrics``: an epoch's line, credit found
late, credit withdrawn from a peer caught faking work), and a checkpoint of epoch E records the sum
over the epochs before E under ``SAMPLES_TOTAL`` (its ``samples`` key is the last epoch's alone).

The count goes on from the checkpoint the backbone resumes from, and says nothing (None) rather
than a figure it cannot stand behind: when an epoch before E was never reported (the backbone was
away, or started after the collaboration did), when the resumed checkpoint did not record a count,
and after a rollback (the replica's weights then come from an older checkpoint, the epochs between
no longer behind them).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from core.training.credit.metrics import EpochMetrics

SAMPLES_TOTAL = "samples_total"
"""In a checkpoint's metadata: the collaboration's samples over every epoch before it (or None)."""
OPEN_EPOCHS = 256
"""Epochs counted one by one before they are summed: late credit and epochs reported out of order
land there; an epoch missing from the oldest of this many is never coming, and the count stops."""


def samples_total(metadata: Mapping[str, object]) -> int | None:
    """The samples a checkpoint's metadata records behind it; None when it records none (a
    backbone that missed epochs writes none) or something that is not a count."""
    value = metadata.get(SAMPLES_TOTAL)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


class SamplesTally:
    """The samples of the epochs the backbone reported, summed for its checkpoints.

    Fed on the event loop (``add``) and read where the checkpoint is saved, on the training
    thread (``before``), hence the lock."""

    def __init__(self, open_epochs: int = OPEN_EPOCHS) -> None:
        self._open_epochs = open_epochs
        self._lock = threading.Lock()
        self._base: int | None = 0
        """The samples of the epochs before ``_start``; None once the count is lost."""
        self._start = 0
        self._since = 0
        """Credit for epochs before this one is already in a resumed checkpoint's count."""
        self._rollback = 0
        self._open: dict[int, int] = {}
        """Samples of the epochs from ``_start`` on, each epoch present once it was reported."""

    def resume(self, metadata: Mapping[str, object], epoch: int, rollback: int) -> None:
        """Go on from a checkpoint of ``epoch`` the replica was restored from (its metadata;
        ``rollback``: the replica's last rollback order once restored)."""
        with self._lock:
            self._base = samples_total(metadata)
            self._start = self._since = epoch
            self._rollback = rollback
            self._open.clear()

    def add(self, metrics: EpochMetrics) -> None:
        """Count one report of the backbone's metrics (an epoch, late credit or a withdrawal)."""
        samples = -metrics.samples if metrics.withdrawn else metrics.samples
        epoch = metrics.epoch
        with self._lock:
            if self._base is None or epoch < self._since:
                # a restarted backbone hears again of epochs its checkpoint already counted
                return
            if epoch < self._start:
                self._base += samples
                return
            self._open[epoch] = self._open.get(epoch, 0) + samples
            while len(self._open) > self._open_epochs:
                if self._start not in self._open:
                    self._base = None
                    self._open.clear()
                    return
                self._base += self._open.pop(self._start)
                self._start += 1

    def before(self, epoch: int, rollback: int) -> int | None:
        """The samples of every epoch before ``epoch``, for a checkpoint of the replica at
        ``epoch`` whose last rollback order is ``rollback``; None when they are not all known."""
        with self._lock:
            if self._base is None or rollback != self._rollback or epoch < self._start:
                return None
            epochs = range(self._start, epoch)
            if any(e not in self._open for e in epochs):
                return None
            return self._base + sum(self._open[e] for e in epochs)
