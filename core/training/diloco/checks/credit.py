"""RoundCredit: what a diloco member is credited where its rounds are replayed.

Two rules, one after the other. The claim is first cut to the weight the member's round carried
(``WorkScores.bounded``: a record claiming more than the round saw is cut, and its member
accused); its work score is not used, since scores that infer work from alignment underpay a
fast honest member and pay a copier. Then what is left follows the replays (``Standings``): held
until a replay of the member passes, paid while its replays pass, nothing from the first that
fails, and what it was paid on trust since its last pass withdrawn.
"""

from __future__ import annotations

from core.training.credit.checks.standing import Standings
from core.training.credit.scores import WorkScores


class RoundCredit:
    """A ``Support`` (``core.training.credit.book``): the round's weight, then the replays."""

    def __init__(self, scores: WorkScores, standings: Standings) -> None:
        self.scores = scores
        self.standings = standings

    def supported(self, peer: str, epoch: int, samples: int, now: float) -> int | None:
        return self.standings.supported(peer, epoch, self.scores.bounded(peer, epoch, samples), now)

    def why(self, peer: str, epoch: int) -> str:
        reasons = (self.scores.why(peer, epoch), self.standings.why(peer, epoch))
        return "; ".join(r for r in reasons if r)
