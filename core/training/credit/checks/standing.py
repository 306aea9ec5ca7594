"""Standings: what the checks support of each peer's claims, as a pure rule of what was seen.

A newcomer's claims wait until a check of it passes, as BOINC holds a new host's credit until a
result of it is validated. How long they wait for a check that does not come is the mode's
``hold``: a few seconds where a check takes a second or two (dedloc: a check the backbone cannot
make, its replica behind the epoch, must not hold credit until the peer is gone); for ever where
a check takes a round, and rounds may judge nothing for a while (diloco, ``hold`` None: a newcomer
whose first rounds cannot be replayed, or that is gone first, is never paid unchecked, since
fresh identities are free). From then on its claims are credited as made while it stays in good
standing, and its epochs are checked at random (``rate``): BOINC's adaptive replication, which
checks trusted hosts less. A check that fails, or finds claimed samples that no receipt backs,
catches the peer: nothing of it is credited from then on, its waiting claims included, and it is
accused, and what it was credited since the last check it passed is withdrawn
(``withdrawals``: the backbone takes it back from its credit book and tells the coordinator).

With a ``hold``, a newcomer that goes away (its records stopped, or it said it left) before a
check caught it is credited what it claimed: a volunteer whose computer went off must not lose an
epoch to a check it could not answer, and a cheat that leaves within a check's second of each
epoch gains an epoch per identity at most. Without one, its claims keep waiting: they are paid if
it comes back under the same identity and a check of it passes, until the credit book drops them
(``book.CREDITED_KEPT`` epochs).

A newcomer that could not be reached for a check (a dial that failed, a timeout, a busy or closing
peer) is not caught: it is asked again at its next epoch, and while no check of it has passed its
claims are held, whatever the hold: an unchecked claim is not paid, or a member would refuse its
checks by dropping the backbone's calls. (A member that answers with a
refusal has failed the check: ``checker.refused``.) A check that finds the member computed at
other parameters than the backbone's replica holds (``apart``: one of them missed a state round)
judges nothing either, and counts as one that could not reach it.

A trusted member is credited on trust only while its checks can judge it: after ``UNJUDGED``
checks in a row that could not (unreached or apart), its claims are held until one passes, and
not paid when it goes away. An honest trainer that went apart is back in step within a state
round, and then passes; a member that keeps its checks from judging it would otherwise be paid on
trust for ever.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GONE_AFTER = 30.0
"""Seconds without a fresh record before a newcomer waiting for its first check counts as gone
(records live 10 s)."""
UNJUDGED = 3
"""Checks in a row that could not judge a trusted member, after which its claims are held."""
HOLD = 10.0
"""Seconds at most a newcomer's claim waits for a check: a check takes a second or two, and one the
backbone cannot make (its replica behind the epoch) must not hold credit until the peer is gone."""


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
    wait while it is more than zero, a trusted member's from ``UNJUDGED``)."""
    seen: float = 0.0
    """When its last fresh record was read."""
    waiting: dict[int, float] = field(default_factory=dict)
    """A newcomer's claims waiting for a check: epoch, and when the wait began."""


class Standings:
    def __init__(self, rate: float, hold: float | None = HOLD) -> None:
        """``hold``: seconds at most a newcomer's claim waits for a check that is not coming, after
        which it is paid, as is the claim of a newcomer gone before its check (``HOLD``); None: a
        newcomer's claims are paid only once a check of it passes."""
        if not 0.0 <= rate <= 1.0:
            raise ValueError("the share of epochs checked is in [0, 1]")
        if hold is not None and not hold >= 0:
            raise ValueError("a hold is 0 seconds or more, or None (until a check passes)")
        self.rate = rate
        self.hold = hold
        self._peers: dict[str, Standing] = {}

    def of(self, peer: str) -> Standing:
        return self._peers.setdefault(peer, Standing())

    def peers(self) -> dict[str, Standing]:
        return dict(self._peers)

    def seen(self, peers: set[str], now: float) -> None:
        """These peers have fresh records now."""
        for peer in peers:
            self.of(peer).seen = now

    def left(self, peers: set[str]) -> None:
        """These peers said they left (a clean stop): gone from now on, without the wait."""
        for peer in peers:
            self.of(peer).seen = -GONE_AFTER

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
        or None while a newcomer waits for its first check."""
        if self.rate == 0.0:
            return samples
        s = self.of(peer)
        since = s.waiting.pop(epoch, now)
        if s.caught:
            return 0
        if s.vouched >= 0 and s.unjudged < UNJUDGED:
            return samples  # trusted, and its checks still judge it
        if self.hold is not None:
            if s.vouched < 0 and now - s.seen > GONE_AFTER:
                return samples  # a newcomer gone before a check could catch it
            if now - since > self.hold and s.unjudged == 0:
                return samples  # no check came in time (the backbone could not make one)
        s.waiting[epoch] = since
        return None
