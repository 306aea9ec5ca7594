"""WorkScores: what a diloco member's pseudo-gradients show of the samples it claims, as a
pure rule of what the backbone's part of each round saw.

No checker can recompute a diloco microbatch: its gradient is taken at parameters of the member's
own inner steps, and fetching them would cost thousands of times what a sparse round sends. What
the backbone does hold is every member's chunk of the part it reduces, each with the samples its
sender claimed. How far a member's update went along the others' (``core.averaging.robust.
alignment``: leave one out) grows with the inner steps it took, so per claimed sample it is about
the same for every honest member, and a claim ten times the work scores a tenth of the rest.

- **A round's ratios.** Per sender: its score per claimed sample over the round's median of them.
  Each sender counts in the medians by its vote (``core.averaging.robust.medians``: whole for
  typical work or more, a share of one for less), so identities claiming a thousandth of a sample
  and copying an honest update (a thousand times its score per sample) do not set the median that
  every honest member is measured by. A round proves something only with senders worth
  ``SENDERS`` votes or more (a majority sets the median) whose median cosine with the others' mean
  is at least ``MIN_COSINE``: while the model learns. Once its
  loss is flat the updates are mostly noise, a fast member's overshoots, and its score says little
  of its work; such a round is left out, and credit follows the standing from rounds that proved
  something (a newcomer that has none is credited unscored).
- **A standing**: the median of a member's last ``WINDOW`` ratios. One round proves little (a chunk
  screened out, a round after a download), so credit follows the standing: the claim as made at
  ``FULL`` or above; between ``ACCUSE_BELOW`` and ``FULL`` the claim times the standing, which is
  what the work supports; below ``ACCUSE_BELOW`` nothing. There the member is caught faking work
  (a member that sends nothing, a flipped update, a claim five times its work), as a failed
  dedloc check catches one, and what it did compute buys no credit: with the claim times the
  standing, a free rider computing a tenth was credited 7 % and 10.3 % of its claim in two runs,
  its standing's noise around the tenth.
- **Accused** when its standing is below ``ACCUSE_BELOW`` over ``WINDOW`` rounds or more. Once,
  until it recovers.
- **Never more than the round saw.** A member's record says what it claims for an epoch; the
  round it sent in says what weight it declared. An honest member's record is that weight (both
  count the same samples). Credit is at most the weight the backbone's part saw for that epoch, and
  for an epoch whose round the backbone did not see, the claim times the lowest share of its
  claims the rounds it did see supported (``agreement``). A record above the weight by more than
  ``RECORD_SLACK`` (and a sample) is a lie no rounding explains: the member is accused of it
  (``record_accusations``). Where the backbone replays rounds, a member of another group's round
  is bound the same way by what its receipt backs (``backed``: the samples of a round it could
  replay, none when it kept no receipt of it).
- **Waiting.** A share waits for the backbone's round of its epoch (``hold`` seconds at most), and
  a newcomer's for its first scored round (``newcomer_hold``) when the backbone's group was
  another; after that it is credited as claimed, unscored: a member never grouped with the
  backbone must not hold a volunteer's credit for ever. A newcomer's share of a round that proved
  nothing (too few senders: a swarm of two) has nothing to wait for and goes out unscored at once.
"""

from __future__ import annotations

import math
import statistics
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field

from core.averaging import Alignment
from core.averaging.robust.medians import typical_claim, voters, votes, weighted_median

SENDERS = 3
MIN_COSINE = 0.5
"""A round proves something when its members' updates agree this well with the others' (the
median cosine). While the model learns they sit at 0.7-0.95, and each member's score is its work:
with speeds spread 4x, every honest score within 0.86-1.1 of the median. Once the loss is flat they
fall to 0.1-0.5 and the scores turn to noise: the fastest member, overshooting, scored 0.6, 0.29,
0.43 and -0.23 in a row and lost a tenth of its credit (with the floor at 0.05)."""
WINDOW = 5
FULL = 0.5
"""A standing at or above this is credited in full. Honest members sat between 0.7 and 1.5 in the
benchmark's rounds; the most an honest-computing member gains by claiming more is 1/FULL."""
ACCUSE_BELOW = 0.2
"""Below this a standing is credited nothing, and after ``WINDOW`` rounds accused."""
KEPT = 128
"""Ratios kept per member, by epoch."""
RECORD_SLACK = 1.25
"""A record claiming more than this times the weight its round saw (plus one sample) is accused:
an honest record is the round's weight to the sample."""


@dataclass(slots=True)
class Scored:
    ratios: OrderedDict[int, float] = field(default_factory=OrderedDict)
    """Epoch -> its ratio in that round (rounds that proved something only)."""
    waiting: dict[int, float] = field(default_factory=dict)
    """Epoch -> when its claim began to wait."""
    weights: OrderedDict[int, float] = field(default_factory=OrderedDict)
    """Epoch -> the weight it declared in that round, as the backbone's part saw it."""
    agreement: float = 1.0
    """The lowest share of a record the weight of its round supported (1: every record was)."""
    receipted: set[int] = field(default_factory=set)
    """Epochs of ``weights`` that its receipts said, not the backbone's part (``backed``)."""
    overclaimed: tuple[int, int, float] | None = None
    """(epoch, samples recorded, weight seen) of the first record found above its round's weight."""
    overclaim_accused: bool = False
    notes: dict[int, str] = field(default_factory=dict)
    """Epoch -> why its last credit was below the claim (until ``why`` reads it)."""
    accused: bool = False
    credited: int = 0
    withheld: int = 0
    """Samples claimed that the standing did not support."""
    unscored: int = 0
    """Samples credited with no standing to judge them (waits over)."""


class WorkScores:
    def __init__(self, hold: float, newcomer_hold: float) -> None:
        self.hold = hold
        self.newcomer_hold = newcomer_hold
        self._peers: dict[str, Scored] = {}
        self._newest = -1
        """The newest epoch of a round the backbone saw (proving something or not)."""
        self._proved: OrderedDict[int, None] = OrderedDict()
        """The last ``KEPT`` epochs whose round proved something."""
        self.cosines: OrderedDict[int, float] = OrderedDict()
        """The last ``KEPT`` rounds' median cosine (whether they proved something)."""

    def of(self, peer: str) -> Scored:
        return self._peers.setdefault(peer, Scored())

    def peers(self) -> dict[str, Scored]:
        return dict(self._peers)

    # ---- what the rounds showed ------------------------------------------------------------------

    def observe(
        self, epoch: int, alignments: Mapping[str, Alignment], confirmed: float | None = None
    ) -> dict[str, float]:
        """The backbone's part of the round of ``epoch``: each sender's ratio (empty when the
        round proves nothing); ``confirmed``: the last confirmed round's typical claim
        (``medians.typical_claim``)."""
        self._newest = max(self._newest, epoch)
        senders = {p: c for p, c in alignments.items() if c.weight > 0}
        for peer, sender in senders.items():
            scored = self.of(peer)
            seen = scored.weights
            seen[epoch] = sender.weight
            scored.receipted.discard(epoch)
            while len(seen) > KEPT:
                old, _ = seen.popitem(last=False)
                scored.receipted.discard(old)
        claims = [c.weight for c in senders.values()]
        held = votes(claims, typical_claim(claims, confirmed))
        if voters(held) < SENDERS - 0.5:
            return {}
        cosine = weighted_median([c.cosine for c in senders.values()], held)
        self.cosines[epoch] = cosine
        while len(self.cosines) > KEPT:
            self.cosines.popitem(last=False)
        if cosine < MIN_COSINE:
            return {}
        per_sample = {p: c.projection / c.weight for p, c in senders.items()}
        reference = weighted_median(list(per_sample.values()), held)
        if reference <= 0:
            return {}
        ratios = {p: q / reference for p, q in per_sample.items()}
        self._proved[epoch] = None
        while len(self._proved) > KEPT:
            self._proved.popitem(last=False)
        for peer, ratio in ratios.items():
            kept = self.of(peer).ratios
            kept[epoch] = ratio
            while len(kept) > KEPT:
                kept.popitem(last=False)
        return ratios

    def backed(self, peer: str, epoch: int, samples: int) -> None:
        """What ``peer``'s round of ``epoch`` carried by its receipt, where the backbone's part
        did not see the round (a member of another group): ``samples`` of a round the backbone
        could replay, 0 when the member kept no receipt of it. Its records are then bound by it
        as by a weight seen. What the backbone's part saw stays the authority."""
        s = self.of(peer)
        if epoch in s.weights and epoch not in s.receipted:
            return
        s.weights[epoch] = float(samples)
        s.receipted.add(epoch)
        while len(s.weights) > KEPT:
            old, _ = s.weights.popitem(last=False)
            s.receipted.discard(old)

    def receipted(self, peer: str, epoch: int) -> bool:
        """Whether the weight bounding ``peer``'s ``epoch`` is what its receipt said."""
        return epoch in self.of(peer).receipted

    def standing(self, peer: str, epoch: int | None = None) -> float | None:
        """The median of ``peer``'s last ``WINDOW`` ratios up to ``epoch``; for an epoch before
        its first, of its first ones after (a newcomer's first rounds judge the claims it made
        before the backbone's group met it). None: no ratio yet."""
        ratios = self.of(peer).ratios
        recent = [r for e, r in ratios.items() if epoch is None or e <= epoch][-WINDOW:]
        if not recent:
            recent = [r for e, r in ratios.items() if epoch is not None and e > epoch][:WINDOW]
        return statistics.median(recent) if recent else None

    def accusations(self) -> dict[str, float]:
        """Members newly found claiming work their updates do not show, with their standing."""
        found = {}
        for peer, s in self._peers.items():
            standing = self.standing(peer)
            if standing is None or len(s.ratios) < WINDOW:
                continue
            if standing < ACCUSE_BELOW and not s.accused:
                s.accused = True
                found[peer] = standing
            elif standing >= FULL:
                s.accused = False
        return found

    def record_accusations(self) -> dict[str, tuple[int, int, float]]:
        """Members newly found recording more samples than their round's weight: (epoch, samples
        recorded, weight seen). Once each."""
        found = {}
        for peer, s in self._peers.items():
            if s.overclaimed is not None and not s.overclaim_accused:
                s.overclaim_accused = True
                found[peer] = s.overclaimed
        return found

    # ---- credit ----------------------------------------------------------------------------------

    def supported(
        self, peer: str, epoch: int, samples: int, now: float, began: str | None = None
    ) -> int | None:
        """What to credit of ``peer``'s claim of ``samples`` for ``epoch``, or None while it
        waits for the round's scores (``began`` is not used: a score needs no replay)."""
        s = self.of(peer)
        s.notes.pop(epoch, None)
        samples = self._bounded(s, epoch, samples)
        since = s.waiting.pop(epoch, now)
        standing = self.standing(peer, epoch)
        seen = epoch in s.ratios or epoch <= self._newest
        if standing is not None and seen:
            return self._credit(s, epoch, samples, standing)
        if standing is None and seen and epoch not in self._proved:
            return self._unscored(s, samples)  # no score is coming: the round proved nothing
        limit = self.hold if standing is not None else self.newcomer_hold
        if now - since < limit:
            s.waiting[epoch] = since
            return None
        if standing is not None:
            return self._credit(s, epoch, samples, standing)
        return self._unscored(s, samples)

    def bounded(self, peer: str, epoch: int, samples: int) -> int:
        """``peer``'s claim of ``samples`` for ``epoch`` cut to the weight its round saw, and
        nothing judged of its score (what credit is bounded by where another check judges the
        work: replayed rounds, ``core.training.diloco.checks``)."""
        s = self.of(peer)
        s.notes.pop(epoch, None)
        return self._bounded(s, epoch, samples)

    def why(self, peer: str, epoch: int) -> str:
        """Why the last credit of ``peer``'s claim for ``epoch`` was below it ("" if it was not)."""
        return self.of(peer).notes.pop(epoch, "")

    def _bounded(self, s: Scored, epoch: int, samples: int) -> int:
        """The claim, cut to the weight its round saw, or for a round not seen to the share of its
        claims that the rounds seen supported."""
        weight = s.weights.get(epoch)
        if weight is None:
            bounded = int(samples * s.agreement)
            if bounded < samples:
                s.notes[epoch] = (
                    f"cut to {s.agreement:.0%} of the claim: the rounds the backbone saw carried "
                    f"that share of what this peer's records claimed"
                )
            return bounded
        if samples > weight * RECORD_SLACK + 1 and s.overclaimed is None:
            s.overclaimed = (epoch, samples, weight)
        if samples > 0:
            s.agreement = min(s.agreement, max(0.0, weight) / samples)
        bounded = min(samples, math.floor(weight + 0.5))
        if bounded < samples:
            s.notes[epoch] = (
                f"cut to the weight its round carried ({bounded} samples; the record claimed "
                f"{samples})"
            )
        return bounded

    def _unscored(self, s: Scored, samples: int) -> int:
        s.unscored += samples
        s.credited += samples
        return samples

    def _credit(self, s: Scored, epoch: int, samples: int, standing: float) -> int:
        credit = credited(samples, standing)
        if credit < samples:
            shown = (
                f"its updates show {standing:.2f} of the work per sample that the round's median "
                + ("shows: caught claiming work it did not do" if credit == 0 else "shows")
            )
            s.notes[epoch] = "; ".join(filter(None, (s.notes.get(epoch), shown)))
        s.credited += credit
        s.withheld += samples - credit
        return credit


def credited(samples: int, standing: float) -> int:
    """What a claim of ``samples`` is worth at ``standing``: whole from ``FULL``, the claim times
    the standing from ``ACCUSE_BELOW``, nothing below."""
    if standing >= FULL:
        return samples
    if standing >= ACCUSE_BELOW:
        return int(samples * standing)
    return 0
