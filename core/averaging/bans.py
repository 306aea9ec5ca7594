"""The members this peer refuses to average with, for a while: those it caught lying itself.

Only findings this peer proved against signed data go here (``verification.PROVEN``): a reducer whose
aggregate or seal it checked and found false, or a sender that handed over an input other than the
one it signed. Others' accusations do not (anyone can accuse anyone); those travel as evidence to
the coordinator, where moderators can ban for the whole project. A ban ends on its own after
``VerificationConfig.ban_seconds``, so that a peer wrongly banned (its key stolen and since replaced,
a bug) is not shut out for ever by every peer that saw it once.
"""

from __future__ import annotations

import logging

from core.trust.peer_id import PeerID
from core.util.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)

MAX_BANNED = 10_000
"""Bound on the list (each entry is tiny); past it the ban ending soonest makes room."""


class BanList:
    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._until: dict[PeerID, float] = {}

    def ban(self, peer: PeerID, seconds: float, reason: str) -> None:
        """Refuse ``peer`` for ``seconds`` from now (a longer ban already in place stays)."""
        if seconds <= 0:
            return
        until = self._clock.monotonic() + seconds
        if until <= self._until.get(peer, -float("inf")):
            return
        if peer not in self._until:
            log.warning("not averaging with %s for %g s: %s", peer, seconds, reason)
        self._until[peer] = until
        self._sweep()
        if len(self._until) > MAX_BANNED:
            del self._until[min(self._until, key=self._until.__getitem__)]

    def __contains__(self, peer: object) -> bool:
        if not isinstance(peer, PeerID):
            return False
        until = self._until.get(peer)
        if until is None:
            return False
        if until <= self._clock.monotonic():
            del self._until[peer]
            return False
        return True

    def peers(self) -> frozenset[PeerID]:
        self._sweep()
        return frozenset(self._until)

    def names(self) -> frozenset[str]:
        """The banned PeerIDs as text (as progress records name their peers)."""
        return frozenset(str(peer) for peer in self.peers())

    def __len__(self) -> int:
        self._sweep()
        return len(self._until)

    def _sweep(self) -> None:
        now = self._clock.monotonic()
        for peer in [p for p, until in self._until.items() if until <= now]:
            del self._until[peer]
