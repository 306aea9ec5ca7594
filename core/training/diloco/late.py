"""Carried: the samples of work that has not landed yet, and the round the oldest of it was done in.

A round that lands nothing here (no group, or this peer came late) carries its samples to a later
one; when work lands it is credited there, all of it at once, at its full sample weight (the
weight it goes out with is every carried sample: a late learner's work counts by its tokens, as
Decoupled DiLoCo merges it), and the report says how many rounds late the oldest of it was. Late
work is not discounted: it was measured from an anchor one or a few rounds old, which is what
overlapping rounds already accept, and it catches up on the newer anchor before it goes out.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Carried:
    samples: int = 0
    since: int | None = None
    """The epoch the oldest carried work was computed at (None: nothing carried)."""

    def add(self, samples: int, epoch: int) -> None:
        """``samples`` of work computed at ``epoch`` wait to land."""
        if samples and self.since is None:
            self.since = epoch
        self.samples += samples

    def land(self, epoch: int) -> tuple[int, int]:
        """All of it landed in the round of ``epoch``: its samples, and how many rounds late the
        oldest of it is (0: computed in that round); nothing is carried any more."""
        samples, since = self.samples, self.since
        self.samples, self.since = 0, None
        return samples, 0 if since is None else max(0, epoch - since)

    def take(self) -> int:
        """All of it, gone without landing (a clean stop keeps it in a file)."""
        samples, self.samples, self.since = self.samples, 0, None
        return samples
