"""Helpers: the trainers a backbone can hand a round to replay (``replayer``), as it sees them.

A trainer helps once its own rounds passed their replays and nothing caught it (``Standings``),
while it takes part (a member of the newest landed round). It is not asked while it replays for
the backbone already, for a rest after it did not replay or not well, or past its share of
replays as the backbone counts its time (the wall time of each call, which bounds its compute);
one that answered it replays nothing is never asked again.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable

from core.training.credit.checks.budget import Budget
from core.training.credit.checks.standing import Standings
from core.training.diloco.checks.replayer import SHARE

REST_SECONDS = 300.0
"""Seconds a trainer that did not replay, or not well, is not asked again."""


class Helpers:
    def __init__(self, standings: Standings, rounds: int) -> None:
        """``rounds``: landed rounds whose members are kept (the newest is who takes part)."""
        self.standings = standings
        self._rounds = rounds
        self._members: OrderedDict[int, set[str]] = OrderedDict()
        self._helping: set[str] = set()
        self._resting: dict[str, float] = {}
        """Trainers not asked again before this (monotonic) time."""
        self._unable: set[str] = set()
        self._shares: dict[str, Budget] = {}
        self.helped = 0
        """Rounds trainers replayed for the backbone."""

    def met(self, epoch: int, members: Iterable[str]) -> None:
        """The round that began at ``epoch`` landed with these members, in every group."""
        self._members.pop(epoch, None)
        self._members[epoch] = set(members)
        while len(self._members) > self._rounds:
            self._members.popitem(last=False)

    def known(self) -> list[str]:
        """The trainers that replay rounds for the backbone, busy or not."""
        if not self._members:
            return []
        newest = self._members[next(reversed(self._members))]
        found = []
        for peer in sorted(newest - self._unable):
            standing = self.standings.of(peer)
            if not standing.caught and standing.vouched >= 0:
                found.append(peer)
        return found

    def idle(self, member: str | None = None) -> list[str]:
        """The known helpers that could replay a round of ``member`` now."""
        now = time.monotonic()
        return [
            peer
            for peer in self.known()
            if peer != member
            and peer not in self._helping
            and self._resting.get(peer, 0.0) <= now
            and self._share(peer).allows()
        ]

    def asked(self, helper: str) -> None:
        """A replay of ``helper``'s for the backbone is under way."""
        self._helping.add(helper)

    def answered(self, helper: str, seconds: float, replayed: bool) -> None:
        """``helper``'s call took ``seconds``; ``replayed``: it answered a replay."""
        self._helping.discard(helper)
        self._share(helper).spend(seconds)
        self.helped += replayed

    def rest(self, helper: str) -> None:
        """``helper`` did not replay, or not well: not asked for a while."""
        self._resting[helper] = time.monotonic() + REST_SECONDS

    def unable(self, helper: str) -> None:
        """``helper`` replays nothing: never asked again."""
        self._unable.add(helper)

    def _share(self, helper: str) -> Budget:
        return self._shares.setdefault(helper, Budget(SHARE))
