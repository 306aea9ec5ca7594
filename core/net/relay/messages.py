"""What relays and their clients say to each other: reserve, connect, incoming circuits, outcomes.

Three methods make up the relay protocol (``relay_service`` serves the first two, ``relay_client``
the third):

- ``relay.reserve`` (unary, peer to relay): keep me reachable through you. Answered with a
  ``RelayStatus``; on ``OK`` the reservation's lifetime, the relay's limits and where the relay
  itself can be dialed. Calling it again renews the reservation.
- ``relay.connect`` (stream, source to relay): join me to ``target``. The relay either ends the call
  at once with a ``CircuitEnd`` saying why not, or sends one ``CircuitAccepted`` message, after which
  the stream carries raw bytes both ways (the end-to-end TLS connection's ciphertext).
- ``relay.incoming`` (stream, relay to target): ``source`` wants a circuit to you. The target answers
  ``CircuitAccepted`` and then carries raw bytes, or ends the call with a ``CircuitEnd`` refusal.

Once a circuit carries bytes, the peers send only raw data on it; the relay alone may send one last
message, a ``CircuitEnd`` with the reason, right before it ends the stream.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from core.net.errors import DialError
from core.net.wire.rpc import Method, StreamMethod
from core.trust.peer_id import PeerID
from core.util.wire import WireMessage


class RelayStatus(enum.Enum):
    """Why a reservation or a circuit was refused or ended (``OK``: it was not)."""

    OK = "ok"
    NO_RESERVATION = "no_reservation"
    """The target holds no live reservation on this relay."""
    RELAYED_LINK = "relayed_link"
    """The asking connection itself runs through a relay: relays are never chained."""
    LIMIT = "limit"
    """A relay limit (reservations, circuits) is reached."""
    PERMISSION = "permission"
    """Not allowed for another reason (connecting to oneself, not a relay client)."""
    TARGET_REFUSED = "target_refused"
    TARGET_UNREACHABLE = "target_unreachable"
    MALFORMED = "malformed"
    """A side broke the protocol (data before acceptance, a message on an open circuit)."""
    CLOSED = "closed"
    """One side closed the circuit."""
    BYTE_LIMIT = "byte_limit"
    TIME_LIMIT = "time_limit"
    RELAY_CLOSING = "relay_closing"


@dataclass(frozen=True, slots=True)
class RelayTerms(WireMessage):
    """The limits a relay applies to every circuit, as it tells its clients."""

    reservation_seconds: float
    circuit_seconds: float
    circuit_bytes: int
    """Bytes each way a circuit may carry before the relay ends it."""


@dataclass(frozen=True, slots=True)
class ReserveRequest(WireMessage):
    """Keep me reachable through you (or: renew my reservation). No fields yet."""


@dataclass(frozen=True, slots=True)
class ReserveResponse(WireMessage):
    status: RelayStatus
    reason: str = ""
    expires_in: float = 0.0
    """Seconds from now (relative: the two clocks need not agree)."""
    terms: RelayTerms | None = None
    addresses: list[str] = field(default_factory=list)
    """Where the relay itself can be dialed, so others can reach it to reach us."""


@dataclass(frozen=True, slots=True)
class ConnectRequest(WireMessage):
    target: PeerID


@dataclass(frozen=True, slots=True)
class IncomingCircuit(WireMessage):
    source: PeerID
    """Who asked, as the relay authenticated it; the end-to-end TLS handshake proves it again."""
    terms: RelayTerms


@dataclass(frozen=True, slots=True)
class CircuitAccepted(WireMessage):
    """The circuit is open: from now on the stream carries raw bytes."""

    seconds: float
    circuit_bytes: int


@dataclass(frozen=True, slots=True)
class CircuitEnd(WireMessage):
    """Why a circuit was refused or ended, and what it carried (bytes each way, as the relay saw)."""

    status: RelayStatus
    reason: str
    source_to_target: int = 0
    target_to_source: int = 0


RESERVE = Method("relay.reserve", ReserveRequest, ReserveResponse)
CONNECT = StreamMethod("relay.connect", ConnectRequest, CircuitEnd)
INCOMING = StreamMethod("relay.incoming", IncomingCircuit, CircuitEnd)

OFFER = "relay"
"""The hello extension a relay offers (``Host.offer``); its value is ``terms_to_offer(terms)``."""


def terms_to_offer(terms: RelayTerms) -> dict[str, object]:
    return {
        "reservation_seconds": terms.reservation_seconds,
        "circuit_seconds": terms.circuit_seconds,
        "circuit_bytes": terms.circuit_bytes,
    }


class RelayRefused(DialError):
    """A relay (or a relayed target) refused or ended a reservation or circuit, with its reason."""

    def __init__(self, status: RelayStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
