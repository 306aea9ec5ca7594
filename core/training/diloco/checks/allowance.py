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

What a member has not spent does not pile up for ever: the allowance holds at most ``SHARE`` of
its last ``RECENT`` replayable rounds. Otherwise a member honest for a thousand rounds could then
fake a hundred and twenty-five in a row, each labelled unreplayable, and be paid for all of them.
An honest member whose network drops ``RECENT / 8`` rounds in a row is still paid for them at once.
"""

from __future__ import annotations

from collections import deque

SHARE = 0.125
"""What the rounds no replay can judge may be paid, as a share of the rounds one can."""
RECENT = 64
"""Replayable rounds whose share the allowance may hold at most, the last ones paid."""


class Allowance:
    def __init__(self, share: float = SHARE, recent: int = RECENT) -> None:
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"the allowance is a share in [0, 1], got {share}")
        if recent < 1:
            raise ValueError(f"the allowance holds the share of at least 1 round, got {recent}")
        self.share = share
        self.recent = recent
        self._rounds: dict[str, deque[int]] = {}
        """Per member: the samples paid for each of its last ``recent`` replayable rounds."""
        self._left: dict[str, float] = {}

    def judged(self, peer: str, samples: int) -> None:
        """``peer`` was paid ``samples`` for a round a replay could judge."""
        rounds = self._rounds.setdefault(peer, deque(maxlen=self.recent))
        rounds.append(samples)
        cap = self.share * sum(rounds)
        self._left[peer] = min(cap, self._left.get(peer, 0.0) + self.share * samples)

    def take(self, peer: str, samples: int) -> bool:
        """Pay ``samples`` for a round no replay can judge, if the allowance holds them whole."""
        left = self._left.get(peer, 0.0)
        if samples > left:
            return False
        self._left[peer] = left - samples
        return True

    def left(self, peer: str) -> float:
        """Samples the allowance still holds for ``peer``."""
        return self._left.get(peer, 0.0)
