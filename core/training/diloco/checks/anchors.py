"""Anchors: the outer states a checker keeps, by epoch, to replay members' rounds from.

A round that began at epoch E is replayed from the anchor of E; with overlap, from the anchor of
E - 1, which the landing of the round before replaced mid-round (``replay.Arrival``). Whoever
replays (the backbone, or a trainer it asks) keeps the last few anchors it held as rounds began,
each with the digest of the outer state it belongs to, and ``start`` says where a receipt's round
is replayed from, or why it cannot be here: the anchor is not kept (``Unheld``: not the member's
doing), or the round began from another outer state (``Elsewhere``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core.training.diloco.checks.receipts import RoundReceipt
from core.training.diloco.checks.replay import Arrival, RoundStart


@dataclass(frozen=True, slots=True)
class Anchor:
    """What was held when a round began: where a replay starts."""

    state: str
    """The outer state's digest (``DilocoState.digest``)."""
    arrays: list[np.ndarray]

    @property
    def size(self) -> int:
        return sum(a.size for a in self.arrays)


class Unheld(Exception):
    """No anchor of the epoch a round needs is kept here."""


class Elsewhere(Exception):
    """The round began from another outer state than the anchor kept for its epoch."""


class Anchors:
    def __init__(self, kept: int) -> None:
        if kept < 1:
            raise ValueError(f"at least one anchor is kept, not {kept}")
        self.kept = kept
        self._anchors: OrderedDict[int, Anchor] = OrderedDict()

    def began(self, epoch: int, state: str, arrays: Sequence[np.ndarray]) -> None:
        """A round begins at ``epoch`` from these arrays (copied: the caller's move on)."""
        self._anchors.pop(epoch, None)
        self._anchors[epoch] = Anchor(state, [np.array(a, np.float32, copy=True) for a in arrays])
        while len(self._anchors) > self.kept:
            self._anchors.popitem(last=False)

    def get(self, epoch: int) -> Anchor | None:
        return self._anchors.get(epoch)

    def __contains__(self, epoch: int) -> bool:
        return epoch in self._anchors

    def epochs(self) -> list[int]:
        return sorted(self._anchors)

    def forget(self, epoch: int) -> None:
        self._anchors.pop(epoch, None)

    def start(self, receipt: RoundReceipt) -> RoundStart:
        """Where the round of ``receipt`` is replayed from: the anchor of its epoch, or with an
        opening (overlap) the anchor before it, replaced by the receipt's mid-round."""
        epoch = receipt.epoch
        anchor = self._anchors.get(epoch)
        if anchor is None:
            raise Unheld(f"no anchor of epoch {epoch} is kept")
        if receipt.state != anchor.state:
            raise Elsewhere(f"its round began from another outer state than epoch {epoch}'s")
        opening = receipt.opening
        if opening is None:
            return RoundStart(anchor.arrays, receipt.schedule, receipt.per_round)
        before = self._anchors.get(epoch - 1)
        if before is None:
            raise Unheld(f"no anchor of epoch {epoch - 1} is kept, where the round began")
        if opening.state != before.state:
            raise Elsewhere(f"its round began from another outer state than epoch {epoch - 1}'s")
        arrival = Arrival(
            opening.steps, anchor.arrays, receipt.schedule, receipt.per_round, opening.straddles
        )
        return RoundStart(before.arrays, opening.schedule, opening.per_round, arrival)
