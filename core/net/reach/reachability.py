"""Reachability: can peers on the internet open a connection to us? A pure classifier.

It is fed the outcomes of dial-backs (``core.net.reach.dialback``): a peer was asked to open a fresh
connection to our observed IP and listening port, and it either met our TLS identity there or not.

How it decides:

- **Distinct peers.** Only each asked peer's *latest* answer counts, so one peer answering ten
  times is one vote, and a peer whose answer changed is heard at its newest.
- **Enough of them.** PUBLIC needs ``confidence`` successes (default 3), PRIVATE as many failures,
  but never more than the number of distinct peers we could ask (``available``): a project whose
  backbone is one public server (the NAT lab, a small project) has only that one to ask, and its
  one answer must be allowed to decide. At least one answer is always needed.
- **Recent weighs more.** An answer older than ``max_age`` counts for nothing, and a newer answer of
  the same peer replaces an older one. With no answer left, the state falls back to UNKNOWN.
- **A flip needs fresh evidence.** Leaving PUBLIC for PRIVATE (or back) needs the threshold met by
  answers given *after* the current state was reached, and the new side must outnumber the other;
  a single peer that fails to dial us once does not take a confirmed address away.

A success outweighs a failure when both meet the threshold: a peer that met our identity at the
address proves it is dialable, while a failure may be the asked peer's own firewall.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from core.util.clock import SYSTEM_CLOCK, Clock


class Reachability(enum.Enum):
    PUBLIC = "public"
    """Peers on the internet can dial us at our observed IP and listening port."""
    PRIVATE = "private"
    """They cannot (a NAT or a firewall in the way): we need relays or hole punching."""
    UNKNOWN = "unknown"
    """Not enough answers yet (or they grew old, or the network changed)."""


CONFIDENCE = 3
"""Agreeing peers needed to decide, when that many can be asked (libp2p's AutoNAT uses 3 too)."""
MAX_AGE = 3 * 3600.0
"""Seconds an answer counts: several periodic re-checks (30 min) fit in it, a night does not."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """One peer's answer to a dial-back request."""

    peer: str
    reachable: bool
    at: float
    address: str | None = None
    """The address the peer dialed (``ip:port``), when it answered at all."""


class Classifier:
    """Reachability from dial-back outcomes (see the module's docstring)."""

    def __init__(
        self,
        *,
        confidence: int = CONFIDENCE,
        max_age: float = MAX_AGE,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if confidence < 1:
            raise ValueError("confidence must be at least 1")
        self.confidence = confidence
        self.max_age = max_age
        self._clock = clock
        self._latest: dict[str, Outcome] = {}
        self._state = Reachability.UNKNOWN
        self._since = clock.monotonic()

    @property
    def state(self) -> Reachability:
        return self._state

    @property
    def since(self) -> float:
        """When the current state was reached (clock time)."""
        return self._since

    def needed(self, available: int) -> int:
        """Agreeing answers that decide, when ``available`` distinct peers can be asked."""
        return max(1, min(self.confidence, available))

    def add(self, outcome: Outcome, *, available: int) -> Reachability:
        """Take one answer; return the state after it."""
        known = self._latest.get(outcome.peer)
        if known is None or known.at <= outcome.at:
            self._latest[outcome.peer] = outcome
        return self.update(available=available)

    def update(self, *, available: int) -> Reachability:
        """Re-decide now (answers may have aged out); return the state."""
        now = self._clock.monotonic()
        self._latest = {p: o for p, o in self._latest.items() if now - o.at <= self.max_age}
        if not self._latest:
            return self._enter(Reachability.UNKNOWN, now)
        need = self.needed(available)
        current = self._state
        fresh = [
            o
            for o in self._latest.values()
            if current is Reachability.UNKNOWN or o.at >= self._since
        ]
        fresh_ok = sum(o.reachable for o in fresh)
        fresh_failed = len(fresh) - fresh_ok
        ok = sum(o.reachable for o in self._latest.values())
        failed = len(self._latest) - ok
        if current is not Reachability.PUBLIC and fresh_ok >= need and ok >= failed:
            return self._enter(Reachability.PUBLIC, now)
        if current is not Reachability.PRIVATE and fresh_failed >= need and failed > ok:
            return self._enter(Reachability.PRIVATE, now)
        return current

    def reset(self) -> None:
        """Forget every answer (our address changed: they were about another one)."""
        self._latest.clear()
        self._enter(Reachability.UNKNOWN, self._clock.monotonic())

    def outcomes(self) -> list[Outcome]:
        """The answers that count now, newest first."""
        return sorted(self._latest.values(), key=lambda o: o.at, reverse=True)

    def reached_address(self) -> str | None:
        """The address most successful answers dialed (what PUBLIC confirms), or None."""
        tally: dict[str, int] = {}
        for outcome in self._latest.values():
            if outcome.reachable and outcome.address:
                tally[outcome.address] = tally.get(outcome.address, 0) + 1
        return max(tally, key=lambda a: tally[a], default=None)

    def _enter(self, state: Reachability, now: float) -> Reachability:
        if state is not self._state:
            self._state = state
            self._since = now
        return state


__all__ = ["CONFIDENCE", "MAX_AGE", "Classifier", "Outcome", "Reachability"]
