"""RoundClock: rounds on the wall clock that every peer shares (a mode's ``clock_rounds``: DiLoCo's).

Round ``i`` is ``[i * seconds, (i + 1) * seconds)`` in Unix time, so peers agree on when a round
ends without telling each other (their clocks are synchronised to well under a second by their
operating systems; matchmaking waits ``matchmaking_time`` for the rest). A fast GPU and a slow
laptop end the same round at the same moment, each with what it computed: nobody waits for the
slowest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class RoundClock:
    seconds: float

    def __post_init__(self) -> None:
        if not self.seconds > 0:
            raise ValueError(f"a round lasts more than 0 s, got {self.seconds}")

    def index(self, now: float) -> int:
        """The round ``now`` (Unix time) is in."""
        return math.floor(now / self.seconds)

    def end_of(self, index: int) -> float:
        return (index + 1) * self.seconds

    def until_end(self, now: float) -> float:
        """Seconds until the round ``now`` is in ends (never 0: a boundary starts a round)."""
        return self.end_of(self.index(now)) - now
