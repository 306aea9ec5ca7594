"""Which of its findings a member signs: a screen's verdict counts against a sender only when it
repeats.

The robust screens (``norm_ratio``, ``clip_weight``, ``opposed``) are statistics of one round: a
chunk far from the others' median. An honest sender lands there now and then (a batch that touched
embedding rows nobody else's did; the first epochs, when gradients are large and differ most:
the demo drew eight such findings against honest trainers in 40 epochs, all in epochs 2 to 5, no
sender in more than two epochs). A sender that attacks lands there in nearly every round it joins.
So a member holds a screen's finding against a sender until it has found that sender in
``REPEATS`` distinct epochs within ``WINDOW`` epochs; then it signs them all, and from then on
signs each new one at once while the sender keeps being found within the window. The screens
still leave the chunk out in every round: holding changes who is accused, not what is averaged.

The other findings (a non-finite value, a reducer's lie, a forged commitment, a work check that
failed) are facts, not statistics, and are signed at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from core.averaging import Finding
from core.averaging.robust.aggregation import CLIP_WEIGHT
from core.averaging.robust.screening import NORM_RATIO, OPPOSED
from core.trust.peer_id import PeerID

STATISTICAL = frozenset({NORM_RATIO, CLIP_WEIGHT, OPPOSED})
"""The screens' findings: a sender far from the others in one round."""
REPEATS = 3
"""Distinct epochs in which one member must find a sender before accusing it."""
WINDOW = 10
"""Epochs that count together: a finding older than this many epochs no longer adds up."""
HELD = 32
"""Findings held per sender (a round may find one sender in many chunks): enough to sign what
made the case, bounded against a flood."""


@dataclass(frozen=True, slots=True)
class Found:
    """A finding with the round it was made in."""

    round_key: str
    group: bytes
    epoch: int
    finding: Finding


class RepeatedFindings:
    """One member's held findings, per sender; ``admit`` says which to sign now."""

    def __init__(self, repeats: int = REPEATS, window: int = WINDOW) -> None:
        if repeats < 1 or window < 1:
            raise ValueError("a finding repeats at least once, within at least one epoch")
        self.repeats = repeats
        self.window = window
        self._held: dict[PeerID, list[Found]] = {}
        self._accused: dict[PeerID, int] = {}
        """Sender -> the newest epoch a signed screen finding against it was made in."""

    def admit(self, found: Iterable[Found]) -> list[Found]:
        """The findings to sign now: every fact, and the screens' findings against senders found
        in enough epochs lately (with those held against them until now)."""
        signed: list[Found] = []
        touched: set[PeerID] = set()
        newest = -1
        for item in found:
            peer, epoch = item.finding.peer, item.epoch
            newest = max(newest, epoch)
            if item.finding.statistic not in STATISTICAL:
                signed.append(item)
            elif epoch - self._accused.get(peer, -(2**62)) <= self.window:
                signed.append(item)
                self._accused[peer] = max(self._accused[peer], epoch)
            else:
                held = self._held.setdefault(peer, [])
                held.append(item)
                del held[:-HELD]
                touched.add(peer)
        for peer in touched:
            held = [h for h in self._held[peer] if newest - h.epoch < self.window]
            if len({h.epoch for h in held}) >= self.repeats:
                signed.extend(held)
                self._accused[peer] = max(h.epoch for h in held)
                del self._held[peer]
            else:
                self._held[peer] = held
        self._forget(newest)
        return signed

    def held(self, peer: PeerID) -> int:
        """Findings held against ``peer`` (not signed yet)."""
        return len(self._held.get(peer, ()))

    def _forget(self, newest: int) -> None:
        for peer in [p for p, held in self._held.items() if not held]:
            del self._held[peer]
        for peer in [p for p, e in self._accused.items() if newest - e > self.window]:
            del self._accused[peer]
        for peer, held in list(self._held.items()):
            kept = [h for h in held if newest - h.epoch < self.window]
            if kept:
                self._held[peer] = kept
            else:
                del self._held[peer]
