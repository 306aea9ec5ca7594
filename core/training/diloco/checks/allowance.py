"""Allowance: what a diloco member is paid for rounds that no replay can judge.

A replay starts from the anchor a round began at, with fresh moments. Some honest rounds cannot
be replayed: the one after a round that found no group (it goes on from where that one ended),
one whose anchor a download moved, one that carries a restart's unsent work, and the rounds of a
group that landed apart from the backbone's. A member says which of its rounds those are in its
records (``Landed.began``), before any check is drawn. Paid on trust, they would pay a member
that labels each round it faked so; paid nothing, they would underpay a volunteer whose network
dropped a round. So they are paid from an allowance: at most ``SHARE`` of what the member was
paid for rounds a replay could judge. An honest member's unreplayable rounds (one replay in
twenty judged nothing in the swarms measured) fit in it; a member that labels every round it
fakes so gains at most ``SHARE`` of what it computed. A claim over the allowance waits, whole,
until the member's later rounds make room (or the credit book drops it with its old epochs).
"""

from __future__ import annotations

SHARE = 0.125
"""What the rounds no replay can judge may be paid, as a share of the rounds one can."""


class Allowance:
    def __init__(self, share: float = SHARE) -> None:
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"the allowance is a share in [0, 1], got {share}")
        self.share = share
        self._judged: dict[str, int] = {}
        self._paid: dict[str, int] = {}

    def judged(self, peer: str, samples: int) -> None:
        """``peer`` was paid ``samples`` for a round a replay could judge."""
        self._judged[peer] = self._judged.get(peer, 0) + samples

    def take(self, peer: str, samples: int) -> bool:
        """Pay ``samples`` for a round no replay can judge, if the allowance holds them whole."""
        paid = self._paid.get(peer, 0) + samples
        if paid > self.share * self._judged.get(peer, 0):
            return False
        self._paid[peer] = paid
        return True

    def left(self, peer: str) -> float:
        """Samples the allowance still holds for ``peer``."""
        return self.share * self._judged.get(peer, 0) - self._paid.get(peer, 0)
