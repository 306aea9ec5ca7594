"""Metering: turning the peer's running totals into ledger rows.

The peer only keeps running totals (samples, compute seconds, bytes); every few seconds the engine
takes the difference since its last look and adds it to the project's meter, and the meters are
flushed to the ledger now and then and at every stop. A rebuilt peer starts its totals from zero,
which is recognised by the peer object changing.
"""

from __future__ import annotations

import time
from typing import Any

from core.stats import Ledger, WorkDone, WorkMeter
from core.util.clock import SYSTEM_CLOCK, Clock

_TOTALS = ("samples", "compute_seconds", "bytes_sent", "bytes_received")


class Metering:
    def __init__(self, ledger: Ledger, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.ledger = ledger
        self._clock = clock
        self._meters: dict[str, WorkMeter] = {}
        self._seen: dict[str, tuple[int, dict[str, float]]] = {}
        self.session_samples = 0
        """Samples counted since this engine started."""
        self._month: tuple[float, int] | None = None

    def count(self, project: str, amounts: WorkDone) -> None:
        self._meters.setdefault(project, WorkMeter()).count(amounts)

    def observe(self, project: str, source: object | None, totals: dict[str, Any]) -> None:
        """Count what the running totals of ``source`` (the peer) grew by since the last look."""
        if source is None or not totals:
            return
        current = {k: float(totals.get(k, 0)) for k in _TOTALS}
        ident, last = self._seen.get(project, (id(source), dict.fromkeys(_TOTALS, 0.0)))
        if ident != id(source):
            last = dict.fromkeys(_TOTALS, 0.0)  # a new peer counts from zero
        grown = {k: max(0.0, current[k] - last[k]) for k in _TOTALS}
        self._seen[project] = (id(source), current)
        amounts = WorkDone(
            samples=int(grown["samples"]),
            compute_seconds=grown["compute_seconds"],
            bytes_sent=int(grown["bytes_sent"]),
            bytes_received=int(grown["bytes_received"]),
        )
        if not amounts.is_empty():
            self.session_samples += amounts.samples
            self.count(project, amounts)

    def flush_all(self) -> None:
        """Write every project's pending amounts (one transaction each); failures keep them."""
        now = self._clock.time()
        for project, meter in self._meters.items():
            if not meter.pending.is_empty():
                meter.flush(self.ledger, project, now)
        self._month = None

    def month_bytes(self, now: float) -> int:
        """Bytes this calendar month, ledger and pending together (cached between flushes)."""
        if self._month is None or now - self._month[0] > 60:
            offset = time.localtime(now).tm_gmtoff
            self._month = (now, self.ledger.month_bytes(now=now, utc_offset_seconds=offset))
        pending = sum(
            m.pending.bytes_sent + m.pending.bytes_received for m in self._meters.values()
        )
        return self._month[1] + pending
