"""Counting contributions in memory between writes to the ledger.

The engine reports every small delta (a batch, an averaging round, some bytes) to a
``WorkMeter``, which is cheap; once in a while it ``flush``es the sum into the ledger in a
single ``add``. A failed write keeps the sum pending, so the next flush retries it.
"""

from __future__ import annotations

from core.stats.ledger import Ledger
from core.stats.work_done import WorkDone, validate_amounts


class WorkMeter:
    """The amounts counted since the last successful flush (single-threaded, like the ledger)."""

    def __init__(self) -> None:
        self._pending = WorkDone()

    @property
    def pending(self) -> WorkDone:
        """What has been counted and not yet written."""
        return self._pending

    def count(self, amounts: WorkDone) -> None:
        """Add a delta; an invalid one raises ``LedgerError`` now rather than poison every flush."""
        validate_amounts(amounts)
        self._pending = self._pending + amounts

    def flush(self, ledger: Ledger, project: str, now: float) -> None:
        """Write the pending sum to ``ledger`` as of ``now`` and clear it.

        If the write raises, the sum stays pending (nothing is lost) and the error propagates.
        """
        pending = self._pending
        if pending.is_empty():
            return
        ledger.add(project, pending, when=now)
        # Replacing rather than subtracting is safe: counting happens on this same thread, so
        # nothing was counted while the write ran.
        self._pending = WorkDone()
