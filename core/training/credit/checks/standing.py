"""Standings: what the checks support of each peer's claims, as a pure rule of what was seen.

A newcomer's claims wait until a check of it passes, as BOINC holds a new host's credit until a
result of it is validated. They wait however long that takes, and whether or not the newcomer is
still there: fresh identities are free, so a claim paid after a wait, or when its maker went away
before a check, is an epoch's credit for nothing per identity. An honest newcomer's first check
comes at its first epoch (dedloc: within seconds) or its first replayable round (diloco); one
whose computer goes off before that keeps its claims, paid if it comes back under the same
identity and a check of it passes, until the credit book drops them (``book.CREDITED_KEPT``
epochs). From then on its claims are credited as made while it stays in good standing, and its
epochs are checked at random (``rate``): BOINC's adaptive replication, which checks trusted hosts
less. A check that fails, or finds claimed samples that no receipt backs, catches the peer: nothing
of it is credited from then on, its waiting claims included, and it is accused, and what it was
credited since the last check it passed is withdrawn (``withdrawals``: the backbone takes it back
from its credit book and tells the coordinator).

A newcomer that could not be reached for a check (a dial that failed, a timeout, a busy or closing
peer) is not caught: it is asked again at its next epoch, and its claims stay held. A member that
answers with a refusal has failed the check (``checker.refused``), or a member would refuse its
checks to be paid unchecked. A check that finds the member computed at other parameters than the
backbone's replica holds (``apart``: one of them missed a state round) judges nothing either, and
counts as one that could not reach it.

A trusted member is credited on trust only while its checks can judge it: after ``UNJUDGED``
checks in a row that could not (unreached or apart), its claims are held until one passes. An
honest trainer that went apart is back in step within a state round, and then passes; a member
that keeps its checks from judging it would otherwise be paid on trust for ever.
"""

from __future__ import annotations

from dataclasses import dataclass

UNJUDGED = 3
"""Checks in a row that could not judge a trusted member, after which its claims are held."""


@dataclass(slots=True)
class Standing:
    vouched: int = -1
    """The newest epoch a passed check covers (claims up to it are credited)."""
    caught: bool = False
    withdrawn: bool = False
    """Its credit since ``vouched`` was withdrawn (once, when it was caught)."""
    checks: int = 0
    passed: int = 0
    unjudged: int = 0
    """Checks in a row that could not judge the peer: unreached, or apart (a newcomer's claims
    wait until one passes, a trusted member's from ``UNJUDGED``)."""


class Standings:
    def __init__(self, rate: float) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError("the share of epochs checked is in [0, 1]")
        self.rate = rate
        self._peers: dict[str, Standing] = {}

    def of(self, peer: str) -> Standing:
        return self._peers.setdefault(peer, Standing())

    def peers(self) -> dict[str, Standing]:
        return dict(self._peers)

    # ---- what to check ---------------------------------------------------------------------------

    def due(self, peer: str, draw: float) -> bool:
        """Whether to check ``peer``'s epoch that just landed (``draw``: uniform in [0, 1))."""
        if self.rate == 0.0:
            return False
        s = self.of(peer)
        return not s.caught and (s.vouched < 0 or draw < self.rate)

    # ---- what the checks found -------------------------------------------------------------------

    def passed(self, peer: str, epoch: int) -> None:
        s = self.of(peer)
        s.checks += 1
        s.passed += 1
        s.unjudged = 0
        s.vouched = max(s.vouched, epoch)

    def failed(self, peer: str) -> None:
        s = self.of(peer)
        s.checks += 1
        s.caught = True

    def unjudged(self, peer: str, epoch: int) -> None:
        """A check of ``peer``'s ``epoch`` could not judge it (unreached, or apart): asked again
        at its next epoch."""
        self.of(peer).unjudged += 1

    # ---- credit ----------------------------------------------------------------------------------

    def withdrawals(self) -> dict[str, int]:
        """The peers caught since the last call, each with the newest epoch a passed check covers
        (-1: none did): their credit for the epochs after it was given on trust, and is taken
        back. Each caught peer is named once."""
        found = {}
        for peer, s in self._peers.items():
            if s.caught and not s.withdrawn:
                s.withdrawn = True
                found[peer] = s.vouched
        return found

    def why(self, peer: str, epoch: int) -> str:
        """Why a claim of ``peer`` was credited less than claimed: only a caught peer's is."""
        return "a work check caught this peer faking work" if self.of(peer).caught else ""

    def supported(self, peer: str, epoch: int, samples: int, now: float) -> int | None:
        """What to credit of ``peer``'s claim of ``samples`` for ``epoch``: a number of samples,
        or None while it waits for a check to pass (``now`` is not needed: no claim is paid for
        having waited)."""
        if self.rate == 0.0:
            return samples
        s = self.of(peer)
        if s.caught:
            return 0
        if s.vouched >= 0 and s.unjudged < UNJUDGED:
            return samples  # trusted, and its checks still judge it
        return None
