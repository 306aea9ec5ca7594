"""The hole-punching protocol's messages (``punch.connect``, ``punch.sync``) and its counters.

The candidate addresses themselves travel as ``punch_candidates.PunchOffer``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.net.punch.candidates import PunchOffer
from core.net.wire.rpc import Method
from core.trust.peer_id import PeerID
from core.util.wire import WireMessage

RECENT = 32
"""Peers whose last punch outcome ``PunchStats.recent`` keeps."""


@dataclass(frozen=True, slots=True)
class PunchSync(WireMessage):
    """Fire now. ``rtt`` is the initiator's estimate, which sizes the responder's window."""

    attempt: int
    rtt: float


@dataclass(frozen=True, slots=True)
class PunchSyncReply(WireMessage):
    dialing: int
    """How many of the initiator's addresses the responder dials."""


CONNECT: Method[PunchOffer, PunchOffer] = Method("punch.connect", PunchOffer, PunchOffer)
SYNC: Method[PunchSync, PunchSyncReply] = Method("punch.sync", PunchSync, PunchSyncReply)


@dataclass
class PunchStats:
    """Counters for diagnostics. Punches are counted by the side that started them."""

    attempted: int = 0
    succeeded: int = 0
    failed: int = 0
    last_reason: str | None = None
    """Why the last failed punch failed."""
    answered: int = 0
    """Rounds we took part in as the responder."""
    refused: int = 0
    last_refusal: str | None = None
    recent: dict[str, str] = field(default_factory=dict)
    """Outcome of the last punch per peer (PeerID text -> "direct" or the reason), newest last,
    at most ``RECENT`` peers (an engine runs for weeks)."""

    def note(self, peer: PeerID, outcome: str) -> None:
        self.recent.pop(str(peer), None)
        self.recent[str(peer)] = outcome
        while len(self.recent) > RECENT:
            del self.recent[next(iter(self.recent))]
