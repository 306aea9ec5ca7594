"""RoundCredit: what a diloco member is credited where its rounds are replayed.

Three rules, one after the other. The claim is first cut to the weight the member's round
carried (``WorkScores.bounded``: a record claiming more than the round saw is cut, and its member
accused); its work score is not used, since scores that infer work from alignment underpay a
fast honest member and pay a copier. Then what is left follows the replays (``Standings``): held
until a replay of the member passes, paid while its replays pass, nothing from the first that
fails, and what it was paid on trust since its last pass withdrawn. Last, where the round began:
a claim whose record names the anchor the backbone held for its epoch (``Landed.began``) is one a
replay could judge, and is paid; any other (a round its member says cannot be replayed, or one
that began elsewhere) is paid from the member's ``Allowance``, since no check will ever judge it.

A member that labels a round replayable in its records and then, checked, files it as one that
cannot be (or as begun from another state) has lied in one of them: it is caught as by a failed
replay (``mislabeled``: the backbone accuses it, ``round_mislabeled``). Otherwise a member could
be paid on trust for its faked rounds and have each one that is checked judged neither way.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from core.training.credit.book import CREDITED_KEPT
from core.training.credit.checks.standing import Standings
from core.training.credit.scores import WorkScores
from core.training.diloco.checks.allowance import Allowance

KEPT = 4 * CREDITED_KEPT
"""(member, epoch) labels and unreplayable checks remembered: the claims the book may still take."""


class RoundCredit:
    """A ``Support`` (``core.training.credit.book``): the round's weight, the replays, then the
    allowance for rounds no replay can judge."""

    def __init__(
        self,
        scores: WorkScores,
        standings: Standings,
        state_at: Callable[[int], str | None] = lambda _epoch: None,
        allowance: Allowance | None = None,
    ) -> None:
        """``state_at``: the digest of the outer state the backbone held when the round of an
        epoch began (None: it did not hold one)."""
        self.scores = scores
        self.standings = standings
        self.state_at = state_at
        self.allowance = allowance or Allowance()
        self._labeled: OrderedDict[tuple[str, int], None] = OrderedDict()
        """Claims paid as replayable rounds."""
        self._unreplayable: OrderedDict[tuple[str, int], None] = OrderedDict()
        """Rounds a check found could not be replayed."""
        self._mislabeled: dict[str, int] = {}
        self._notes: dict[tuple[str, int], str] = {}

    def supported(
        self, peer: str, epoch: int, samples: int, now: float, began: str | None = None
    ) -> int | None:
        backed = self.standings.supported(
            peer, epoch, self.scores.bounded(peer, epoch, samples), now
        )
        if not backed:
            return backed  # waiting for a replay, or nothing to pay
        state = self.state_at(epoch)
        if began is not None and state is not None and state.startswith(began):
            if (peer, epoch) in self._unreplayable:
                self._mislabel(peer, epoch)
                return 0
            _remember(self._labeled, (peer, epoch))
            self.allowance.judged(peer, backed)
            return backed
        if self.allowance.take(peer, backed):
            return backed
        return None  # room comes with the member's later replayable rounds

    def unreplayable(self, peer: str, epoch: int) -> None:
        """A check found ``peer``'s round of ``epoch`` cannot be replayed (it says so, or it began
        from another outer state than the backbone's): if its records said it could, it lied."""
        if (peer, epoch) in self._labeled:
            self._mislabel(peer, epoch)
        _remember(self._unreplayable, (peer, epoch))

    def mislabeled(self) -> dict[str, int]:
        """Members found labelling a round replayable that they filed as not, since the last
        call, each with the epoch."""
        found, self._mislabeled = self._mislabeled, {}
        return found

    def _mislabel(self, peer: str, epoch: int) -> None:
        self._mislabeled.setdefault(peer, epoch)
        self._notes[(peer, epoch)] = (
            "its records said this round could be replayed from the anchor, and its receipt said "
            "it could not"
        )

    def why(self, peer: str, epoch: int) -> str:
        reasons = (
            self.scores.why(peer, epoch),
            self.standings.why(peer, epoch),
            self._notes.pop((peer, epoch), ""),
        )
        return "; ".join(r for r in reasons if r)


def _remember(kept: OrderedDict[tuple[str, int], None], key: tuple[str, int]) -> None:
    kept[key] = None
    kept.move_to_end(key)
    while len(kept) > KEPT:
        kept.popitem(last=False)
