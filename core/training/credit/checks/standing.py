"""Standings: what the checks support of each peer's claims, as a pure rule of what was seen.

A newcomer's claims wait until a check of it passes, as BOINC holds a new host's credit until a
result of it is validated. They wait however long that takes, and whether or not the newcomer is
still there: fresh identities are free, so a claim paid after a wait, or when its maker went away
before a check, is an epoch's credit for nothing per identity. An honest newcomer's first check
comes at its first epoch (dedloc: within seconds) or its first replayable round (diloco), or at a
later one, in the order the newcomers came, while others' first checks take the checker's share
for newcomers (``verdict.NEWCOMER_BUDGET``); one whose computer goes off before that keeps its
claims, paid if it comes back under the same identity and a check of it passes, until the credit
book drops them (``book.CREDITED_KEPT`` epochs). From then on its claims are credited as made
while it stays in good standing, and its epochs are checked at random (``rate``): BOINC's adaptive
replication, which checks trusted hosts less. A check that fails, or finds claimed samples that no
receipt backs, catches the peer: nothing of it is credited from then on, its waiting claims
included, and it is accused, and what it was credited since the last check it passed is withdrawn
(``withdrawals``: the backbone takes it back from its credit book and tells the coordinator).

A check that could not reach the peer (a dial that failed, a timeout, a busy or closing peer)
judges nothing, so it is not over: its epoch stays *open* and is asked again at the next landings
(``open_checks``), and while a check of the peer is open none of its claims is paid, trusted or
not. A member that answers with a refusal has failed the check (``checker.refused``). A member
that knows which of its epochs is checked (it is asked) and hides from the checks of those it
faked would otherwise be paid for them on trust, or at its next passed check. When the checker can
no longer make an open check (its parameters or the member's work are no longer kept: a few
epochs), it *expires* (``expired``): the peer's credit since its last passed check is withdrawn,
as a caught peer's is but without accusing it, its claims up to the newest epoch are not paid,
and it starts over as a newcomer. An honest peer loses that only where it stopped answering for
that long: gone (its computer went off, or it left, within the seconds of a drawn check) or
unreachable throughout.

A check that finds the member computed at other parameters than the backbone's replica holds
(``apart``: one of them missed a state round) judges nothing either, but is not asked again
(the parameters will not meet). A trusted member is credited on trust only while its checks can
judge it: after ``UNJUDGED`` checks in a row that could not (unreached or apart), its claims are
held until one passes. An honest trainer that went apart is back in step within a state round,
and then passes; a member that keeps its checks from judging it would otherwise be paid on trust
for ever.
"""

from __future__ import annotations

from dataclasses import dataclass, field

UNJUDGED = 3
"""Checks in a row that could not judge a trusted member, after which its claims are held."""


@dataclass(slots=True)
class Standing:
    vouched: int = -1
    """The newest epoch a passed check covers (claims up to it are credited)."""
    caught: bool = False
    withdrawn: bool = False
    """Credit it was given on trust was withdrawn (it was caught, or an open check expired)."""
    checks: int = 0
    passed: int = 0
    unjudged: int = 0
    """Checks in a row that could not judge the peer: unreached, or apart (a newcomer's claims
    wait until one passes, a trusted member's from ``UNJUDGED``)."""
    seen: int = 0
    """When the checker first heard of the peer, in order (the newcomers first seen are checked
    first when not all can be)."""
    open: set[int] = field(default_factory=set)
    """Epochs whose check could not reach the peer: asked again; its claims wait meanwhile."""
    voided: list[tuple[int, int]] = field(default_factory=list)
    """Epochs whose claims are not paid, each range ``(after, upto]``: from its last passed check
    to the landing at which an open check of it expired."""

    def void(self, epoch: int) -> bool:
        return any(after < epoch <= upto for after, upto in self.voided)


class Standings:
    def __init__(self, rate: float) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError("the share of epochs checked is in [0, 1]")
        self.rate = rate
        self._peers: dict[str, Standing] = {}
        self._heard = 0
        self._withdrawals: dict[str, int] = {}

    def of(self, peer: str) -> Standing:
        found = self._peers.get(peer)
        if found is None:
            self._heard += 1
            found = self._peers[peer] = Standing(seen=self._heard)
        return found

    def seen(self, peer: str) -> int:
        """When the checker first heard of ``peer``, in order."""
        return self.of(peer).seen

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
        s.open.discard(epoch)

    def failed(self, peer: str) -> None:
        s = self.of(peer)
        s.checks += 1
        if not s.caught:
            s.caught = True
            self._withdraw(peer, s.vouched)

    def unjudged(self, peer: str, epoch: int) -> None:
        """A check of ``peer``'s ``epoch`` could not judge it (apart): the next is drawn as
        usual."""
        self.of(peer).unjudged += 1

    def unreached(self, peer: str, epoch: int) -> None:
        """A check of ``peer``'s ``epoch`` could not reach it: asked again (``open_checks``)."""
        s = self.of(peer)
        s.unjudged += 1
        if not s.caught:
            s.open.add(epoch)

    def open_checks(self) -> list[tuple[str, int]]:
        """The checks to ask again, oldest first: (peer, epoch)."""
        found = [(p, e) for p, s in self._peers.items() if not s.caught for e in s.open]
        return sorted(found, key=lambda item: item[1])

    def expired(self, peer: str, epoch: int, newest: int) -> None:
        """The open check of ``peer``'s ``epoch`` can no longer be made (``newest``: the newest
        epoch landed): what it was credited on trust since its last passed check is withdrawn,
        its claims after that check up to ``newest`` are not paid, and it starts over as a
        newcomer."""
        s = self.of(peer)
        if epoch not in s.open:
            return
        s.open.clear()  # the withdrawal covers every epoch the others were opened for
        s.voided.append((s.vouched, newest))
        if s.vouched >= 0:
            self._withdraw(peer, s.vouched)
        s.vouched = -1

    def _withdraw(self, peer: str, after: int) -> None:
        s = self.of(peer)
        s.withdrawn = True
        self._withdrawals[peer] = min(after, self._withdrawals.get(peer, after))

    # ---- credit ----------------------------------------------------------------------------------

    def withdrawals(self) -> dict[str, int]:
        """The peers whose credit given on trust is taken back since the last call, each with the
        newest epoch a passed check covered (-1: none did): their credit for the epochs after it
        is withdrawn. A caught peer is named once; one whose open check expired, each time."""
        found, self._withdrawals = self._withdrawals, {}
        return found

    def why(self, peer: str, epoch: int) -> str:
        """Why a claim of ``peer`` was credited less than claimed."""
        s = self.of(peer)
        if s.caught:
            return "a work check caught this peer faking work"
        if s.void(epoch):
            return (
                "a work check of this peer could not reach it while it kept that work: "
                "its credit since its last passed check is not paid"
            )
        return ""

    def supported(
        self, peer: str, epoch: int, samples: int, now: float, began: str | None = None
    ) -> int | None:
        """What to credit of ``peer``'s claim of ``samples`` for ``epoch``: a number of samples,
        or None while it waits for a check to pass (``now`` is not needed: no claim is paid for
        having waited; ``began`` is diloco's, ``core.training.diloco.checks.credit``)."""
        if self.rate == 0.0:
            return samples
        s = self.of(peer)
        if s.caught or s.void(epoch):
            return 0
        if s.open:
            return None  # a check it has not answered yet
        if s.vouched >= 0 and s.unjudged < UNJUDGED:
            return samples  # trusted, and its checks still judge it
        return None
