"""Mending: when a peer that landed a round apart from most peers takes their outer parameters.

Two groups whose columns never met land different means, and the records' digests show it: the
smaller side downloads the larger side's outer state (``DilocoOptimizer._repair``). It does so
between round ends, as soon as it reads the majority, rather than at its next round's end: there
the download would hold back its exchange, and with it its group and its columns, so that a
round landed apart tends to make the next one land apart too. Not in a round's first half,
though: the others' landings of the last round may not be in their records yet, and a peer that
landed early would follow whoever else had.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass


@dataclass
class Mending:
    task: asyncio.Task[None] | None = None
    """The repair started between round ends, if any: a round's end waits for it."""
    tried: tuple[int, str] = (-1, "")
    """The (epoch, digest) this peer held when it last started one: once per landing."""

    @property
    def busy(self) -> bool:
        return self.task is not None and not self.task.done()


def mend_due(*, until_end: float, round_seconds: float, idle: bool, fresh: bool) -> bool:
    """Whether a peer may look for a majority to follow now: in the round's second half
    (``until_end`` seconds left of ``round_seconds``), ``idle`` (no exchange of its own in flight,
    whose landing moves it; not paused, not stopping, not repairing), with outer parameters it
    has not tried to mend yet (``fresh``)."""
    return idle and fresh and until_end <= round_seconds / 2
