"""Verdicts: what both modes' checkers share around the work they check in their own way.

A landed round draws the members to check (``Verdicts.draw``): a newcomer whatever the draw, since
its credit waits for a check, unless a check of it is still under way (a replayed round can take
longer than the next round: drawing it again would only queue a second replay that vouches for
nothing more) or the newcomers' checks would take more than ``newcomer_budget`` of the backbone's
time; any other member at the project's rate while its checks stay within ``budget`` of it (each
budget counts the checks drawn under it, ``budget.Budget``: a quiet spell saves little for a
burst). Identities are free, and the backbone pays for every newcomer's first check (a diloco
replay costs a whole round): without a bound, a stream of fresh identities would keep the backbone
checking and queue their checks without end. Over the bound, newcomers wait for a later landing,
the one first seen first, their claims held; an honest newcomer in ordinary churn is checked at
its first landing. A check's body (the mode's: dedloc recomputes microbatches, diloco replays a
round) fills a ``Tally`` and raises what it found; ``Verdicts.run`` turns that into the verdict,
the member's standing, the record the audit reads, and signed evidence when it caught the member:

- nothing raised: ``passed``;
- ``Caught``, or the member's own refusal of a call (``refused``): ``caught``, with evidence;
- ``Apart``: ``apart`` (the work was done at parameters the checker does not hold);
- a dial that failed, a timeout, a busy or closing member: ``unreached``; so is a member that keeps
  nothing of the round and claims nothing of it (``Unclaimed``).

The last two judge nothing, and the member's claims are held. A check that could not reach its
member is made again at the next landings while the checker can still make it (``again``), and
then expires, withdrawing what the member was paid on trust (``standing.Standings``).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from core.net.errors import (
    InvalidRequestError,
    NetError,
    PermissionDeniedError,
    RemoteInternalError,
    RpcError,
    UnknownMethodError,
)
from core.training.credit.checks.budget import Budget
from core.training.credit.checks.standing import Standings
from core.training.moderation.evidence import EvidenceBoard
from core.trust.peer_id import PeerID
from core.util.clock import SYSTEM_CLOCK, Clock
from core.util.errors import BarnraiseError

log = logging.getLogger(__name__)

BUDGET = 0.05
"""Random checks stop above this share of the backbone's time."""
NEWCOMER_BUDGET = 0.5
"""Newcomers' first checks wait above this share of the backbone's time: fresh identities can
take at most half of it."""
KEPT_RECORDS = 1000
"""The newest records kept in memory (the log keeps them all)."""


@dataclass(frozen=True, slots=True)
class CheckRecord:
    """One check, as the backbone's ``checks.jsonl`` keeps it (the audit reads it)."""

    time: float
    epoch: int
    peer: str
    user: str | None
    verdict: str
    """``passed``, ``caught``, ``unreached`` or ``apart`` (the member computed at parameters
    the backbone's replica does not hold: nothing judged, its claims held)."""
    claimed: int
    backed: int
    """Samples the receipts account for."""
    sampled: int
    seconds: float
    """Wall time of the check (the calls wait on the network)."""
    compute: float = 0.0
    """Of which recomputing, on the backbone's training thread."""
    margin: float = 0.0
    """How close the recomputed work came to failing, in units of the tolerance (above 1
    fails)."""
    received: int = 0
    """Bytes of the member's replies (receipts, batches, work)."""
    reason: str = ""
    replayer: str = ""
    """The trainer that replayed the member's work for the checker, where one did (with
    ``compute`` above 0 the checker replayed it too: an audit, or the two disagreed)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class Tally:
    """What one check found so far (for its record)."""

    claimed: int = 0
    backed: int = 0
    sampled: int = 0
    compute: float = 0.0
    """Seconds spent recomputing, on the training thread."""
    margin: float = 0.0
    received: int = 0
    replayer: str = ""


class Caught(Exception):
    """The check caught the member: ``statistic`` names the evidence, ``chunk`` where it lies."""

    def __init__(self, statistic: str, value: float, reason: str, chunk: int = -1) -> None:
        super().__init__(reason)
        self.statistic, self.value, self.reason, self.chunk = statistic, value, reason, chunk


class Apart(Exception):
    """The member's work was done at parameters the checker does not hold: nothing to judge."""


class Unclaimed(Exception):
    """The member keeps nothing of the epoch and claims nothing of it (it did not send there):
    nothing to judge, and nothing to ask again."""


REFUSALS = (UnknownMethodError, InvalidRequestError, PermissionDeniedError, RemoteInternalError)
"""Answers a member that was reached gives instead of its work: each fails the check."""


def refused(exc: BaseException) -> bool:
    """Whether ``exc`` is the member's own answer refusing a check (not a dial that failed, a
    timeout, or a busy or closing peer)."""
    return isinstance(exc, RpcError) and exc.remote and isinstance(exc, REFUSALS)


Body = Callable[[Tally], Awaitable[None]]
"""One check's own work: fills the tally, raises ``Caught`` or ``Apart`` (or a network error)."""


class Verdicts:
    def __init__(
        self,
        kind: str,
        standings: Standings,
        evidence: EvidenceBoard,
        *,
        user_of: Callable[[str], str | None] = lambda _: None,
        on_check: Callable[[CheckRecord], None] | None = None,
        budget: float = BUDGET,
        newcomer_budget: float = NEWCOMER_BUDGET,
        rng: random.Random | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """``kind``: what is checked (``work``, ``round``), in log lines and evidence keys;
        ``clock``: the backbone's time, which the budgets are shares of."""
        self.kind = kind
        self.standings = standings
        self.evidence = evidence
        self.user_of = user_of
        self.on_check = on_check
        self.budget = Budget(budget, clock)
        self.newcomer_budget = Budget(newcomer_budget, clock)
        self.rng = rng or random.Random()
        self._checking: dict[str, int] = {}
        """Members with checks under way, and how many."""
        self.seconds = 0.0
        """Time spent checking (fetching and recomputing)."""
        self.compute_seconds = 0.0
        """Of which recomputing, on the training thread."""
        self._recomputed = 0
        """Checks that recomputed something."""
        self.records: list[CheckRecord] = []
        """The newest checks (for tests and the benchmark; the log keeps them all)."""

    def affordable(self, budget: Budget | None = None, drawn: int = 0) -> bool:
        """Whether one more check fits ``budget`` (the random checks' unless given), counting its
        checks under way and the ``drawn`` ones not started yet at what the checks done cost on
        average. While no check has recomputed anything, what one costs is unknown: one at a
        time."""
        chosen = budget or self.budget
        if not self._recomputed:
            return not self._checking and not drawn
        return chosen.allows((chosen.under_way + drawn) * self.cost())

    def cost(self) -> float:
        """What a check that recomputed took on average (0 before any did)."""
        return self.compute_seconds / self._recomputed if self._recomputed else 0.0

    def under_way(self) -> int:
        """Checks under way."""
        return sum(self._checking.values())

    def checking(self, peer: str) -> bool:
        """Whether a check of ``peer`` is under way."""
        return peer in self._checking

    def draw(self, members: Iterable[str], helpers: int | None = None) -> list[str]:
        """The members of a round that just landed to check (see the module's map): newcomers
        first, the one first seen first, then trusted members drawn at random. ``helpers``:
        where others can make checks for the checker (``diloco.checks.replayer``), how many they
        can make now: that many are drawn, and none for the checker's own time (its budgets),
        which then goes to the checks others disagreed on or it audits; the rest wait for a
        later landing (None: nobody else checks)."""
        newcomers, trusted = [], []
        for peer in members:
            if self.standings.due(peer, 1.0) and not self.checking(peer):
                newcomers.append(peer)  # due whatever the draw
                continue
            draw = self.rng.random()
            # at random, as a trusted member (a newcomer too while its first check runs)
            if self.standings.due(peer, draw) and draw < self.standings.rate:
                trusted.append(peer)
        every = self.standings.rate >= 1.0  # every check asked, whatever it costs
        drawn: list[str] = []
        for budget, due in ((self.newcomer_budget, sorted(newcomers, key=self.standings.seen)),
                            (self.budget, trusted)):  # fmt: skip
            picked = 0  # drawn under this budget, not started yet
            for peer in due:
                if every or (helpers is None and self.affordable(budget, picked)):
                    drawn.append(peer)
                    picked += 1
                elif helpers:
                    drawn.append(peer)
                    helpers -= 1
                elif budget is self.newcomer_budget:
                    # its credit waits for a later landing: said, since it may leave before one
                    log.info(
                        "%s check of newcomer %s waits for a later landing: no trainer is free "
                        "to check it, or the newcomers' checks are over their share of the time",
                        self.kind,
                        peer[:12],
                    )
        return drawn

    def again(self, checkable: Callable[[int], bool], newest: int) -> list[tuple[str, int]]:
        """The open checks (they could not reach their member) to make again now that ``newest``
        landed: those the checker can still make (``checkable(epoch)``: it keeps what to check
        that epoch against), one per member and none of a member being checked; the others
        expire (``Standings.expired``)."""
        found: list[tuple[str, int]] = []
        for peer, epoch in self.standings.open_checks():
            if self.checking(peer) or any(p == peer for p, _ in found):
                continue
            if checkable(epoch):
                found.append((peer, epoch))
                continue
            log.warning("%s check of %s at epoch %d could not reach it while it kept its work: "
                        "its credit since its last passed check withdrawn", self.kind, peer[:12],
                        epoch)  # fmt: skip
            self.standings.expired(peer, epoch, newest)
        return found

    async def run(self, peer: str, epoch: int, body: Body) -> CheckRecord:
        """Check ``peer``'s round of ``epoch`` with ``body``, and record what it found."""
        started = time.monotonic()
        # a newcomer's check is paid from the newcomers' budget, so that a stream of fresh
        # identities leaves the trusted members' random checks theirs
        budget = self.newcomer_budget if self.standings.of(peer).vouched < 0 else self.budget
        tally = Tally()
        verdict, reason = "passed", ""
        self._checking[peer] = self._checking.get(peer, 0) + 1
        budget.under_way += 1
        try:
            await body(tally)
            self.standings.passed(peer, epoch)
        except Caught as caught:
            verdict, reason = "caught", caught.reason
            self.standings.failed(peer)
            await self._accuse(peer, epoch, caught)
        except Apart as apart:
            verdict, reason = "apart", str(apart)
            self.standings.unjudged(peer, epoch)
        except Unclaimed as unclaimed:
            verdict, reason = "unreached", str(unclaimed)
            self.standings.unjudged(peer, epoch)
        except (NetError, TimeoutError, BarnraiseError) as exc:
            if refused(exc):
                verdict, reason = "caught", f"refused the check: {exc}"
                self.standings.failed(peer)
                await self._accuse(peer, epoch, Caught("work_refused", 0.0, reason))
            else:
                verdict, reason = "unreached", str(exc) or type(exc).__name__
                self.standings.unreached(peer, epoch)
        finally:
            budget.under_way -= 1
            left = self._checking.pop(peer) - 1
            if left:
                self._checking[peer] = left
        seconds = time.monotonic() - started
        self.seconds += seconds
        self.compute_seconds += tally.compute
        self._recomputed += tally.compute > 0
        budget.spend(tally.compute)
        record = CheckRecord(
            time.time(), epoch, peer, self.user_of(peer), verdict, tally.claimed, tally.backed,
            tally.sampled, round(seconds, 4), round(tally.compute, 4), round(tally.margin, 4),
            tally.received, reason, tally.replayer,
        )  # fmt: skip
        self.records = [*self.records[1 - KEPT_RECORDS :], record]
        if verdict != "passed":
            log.warning("%s check of %s at epoch %d: %s (%s)", self.kind, peer[:12], epoch,
                        verdict, reason)  # fmt: skip
        if self.on_check is not None:
            self.on_check(record)
        return record

    async def convict(self, peer: str, epoch: int, caught: Caught) -> None:
        """``peer`` was caught outside a check of its own work (a replayer that answered what
        no replay gives): its standing fails, and the evidence is signed."""
        log.warning("%s check at epoch %d caught %s: %s", self.kind, epoch, peer[:12],
                    caught.reason)  # fmt: skip
        self.standings.failed(peer)
        record = CheckRecord(
            time.time(), epoch, peer, self.user_of(peer), "caught", 0, 0, 0, 0.0,
            reason=caught.reason,
        )  # fmt: skip
        self.records = [*self.records[1 - KEPT_RECORDS :], record]
        if self.on_check is not None:
            self.on_check(record)
        await self._accuse(peer, epoch, caught)

    async def _accuse(self, peer: str, epoch: int, caught: Caught) -> None:
        evidence = self.evidence.accuse(
            PeerID.from_string(peer),
            round_key=f"{self.kind}.{epoch}",
            group=b"",
            chunk=caught.chunk,
            statistic=caught.statistic,
            value=caught.value if np.isfinite(caught.value) else 1e30,
            reason=caught.reason,
        )
        if evidence is not None:
            await self.evidence.publish_signed([evidence], f"{self.kind} check of epoch {epoch}")
