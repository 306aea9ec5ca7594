"""What the engine says it is doing: a decision, and how the project's peer is, as (state, code, reason).

A pause says so at once (``waiting`` when the computer or the clock will end it, ``idle`` without a
project). A decision to run shows how the peer is: still joining the swarm, failed (for want of a
login, or otherwise, and tried again), or computing (``running``, or ``throttled`` part of the time).
The engine carries the decision out first and then asks this, so the peer's status is the one the
decision left; the fake engine asks it with a scripted status. A peer that runs but cannot load the
collaboration's state (no donor answers) says so: ``waiting`` for the collaboration, never
"Contributing" while nothing it computes would count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from core.policy.codes import WAITING_CODES, ReasonCode, StateName
from core.policy.decide import Decision

RunnerState = Literal["stopped", "starting", "ready", "failed"]
"""The peer of the active project: not built, joining the swarm, training, or failed to start."""


@dataclass(frozen=True)
class PeerStatus:
    state: RunnerState
    error: str | None = None
    """Why it failed, in words the user can act on."""
    needs_login: bool = False
    """It failed for want of a login at the project's coordinator."""
    waiting_for: str | None = None
    """It runs but cannot contribute yet, and why (e.g. no peer can give it the state)."""


@dataclass(frozen=True)
class Outcome:
    state: StateName
    code: ReasonCode
    reason: str


STARTING: Final = Outcome("starting", "starting", "Starting")
"""Before the engine's first decision."""


def outcome(decision: Decision, peer: PeerStatus | None) -> Outcome:
    """The engine's state for ``decision``, carried out, with its peer now in ``peer``."""
    code, reason = decision.code, decision.reason
    if decision.action == "pause":
        if code == "no_project":
            return Outcome("idle", code, reason)
        return Outcome("waiting" if code in WAITING_CODES else "paused", code, reason)
    return _peer_outcome(decision, peer or PeerStatus("stopped"))


def _peer_outcome(decision: Decision, peer: PeerStatus) -> Outcome:
    """A decision to run, as the peer carries it out."""
    if peer.state == "failed" and peer.needs_login:
        return Outcome("error", "login_required", f"Not logged in: {peer.error}")
    if peer.state == "failed":
        return Outcome("error", "peer_failed", f"Error: {peer.error} (trying again in a moment)")
    if peer.state != "ready":
        return Outcome("starting", decision.code, "Starting: joining the swarm")
    if peer.waiting_for is not None:
        return Outcome(
            "waiting", "collaboration", f"Waiting for the collaboration: {peer.waiting_for}"
        )
    if decision.action == "run":
        return Outcome("running", decision.code, decision.reason)
    return Outcome("throttled", decision.code, decision.reason)
