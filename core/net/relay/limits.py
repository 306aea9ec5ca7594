"""RelayLimits: what a relay grants, with the reason for each default.

A relay spends its organizer's bandwidth on other people's traffic, so every resource it hands out
is bounded: how many peers it keeps reachable (and how many from one address, so one household or
one attacker cannot take every slot), how many circuits run at once, and how long and how much each
circuit may carry. A circuit that reaches its limit ends with the reason; the peers simply open a new
one (their next call redials), so the limits cap a relay's commitment without stopping training.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.net.config import MiB
from core.net.relay.messages import RelayTerms
from core.util.errors import ConfigError


@dataclass(frozen=True)
class RelayLimits:
    """Limits of a ``RelayService``. Times in seconds, sizes in bytes."""

    reservation_seconds: float = 3600.0
    """A reservation lasts an hour; clients renew it well before (``RelayClient`` at half-life), so
    a peer that vanished without closing its connection frees its slot within the hour."""
    max_reservations: int = 512
    """Peers kept reachable at once. A reservation costs one idle TCP connection and a few hundred
    bytes of memory, so a small server holds hundreds."""
    max_reservations_per_ip: int = 16
    """Peers behind one public address: a household or a lab shares one, and carrier-grade NAT
    puts several subscribers behind one, but a flood of fresh identities from one address stops here."""
    max_reservations_per_prefix: int = 64
    """Peers behind one /24 (IPv4) or /56 (IPv6): a provider's customers spread over a block, an
    attacker holding a block cannot take every slot either."""
    reserve_calls_per_minute: int = 12
    """Reservation requests one peer may make per minute. A peer holds one reservation per relay
    (asking again renews it); this bounds the work a peer that asks in a loop makes us do."""
    circuit_seconds: float = 20 * 60.0
    """A circuit lasts up to 20 minutes, then the peers open a new one. Peers that failed to punch a
    hole must still train through the relay: an averaging round moves each peer's share of the
    gradients (tens to hundreds of MB) and takes minutes on a home uplink, so a short limit (the
    libp2p default is 2 minutes) would cut rounds mid-way."""
    circuit_bytes: int = 512 * MiB
    """Bytes each way per circuit: several averaging rounds of a model with a few hundred million
    fp16 parameters' worth of shares. Bounds what one pair costs the relay per circuit."""
    max_circuits: int = 64
    """Circuits relayed at once: about what a 1 Gbit/s server can carry at a useful speed each."""
    max_circuits_per_peer: int = 8
    """Circuits one peer takes part in at once (as source or target): an averaging group is usually
    smaller, and one peer cannot take every circuit of the relay."""
    max_circuits_per_ip: int = 16
    """Circuits asked for from one address at once, whatever identities it uses: fresh PeerIDs
    cost nothing, so ``max_circuits_per_peer`` alone would let one attacker take every circuit."""
    accept_timeout: float = 10.0
    """How long the target may take to accept a circuit before the source is told it is unreachable."""

    def __post_init__(self) -> None:
        for name in ("reservation_seconds", "circuit_seconds", "accept_timeout"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"relay limit {name} must be positive")
        for name in (
            "max_reservations",
            "max_reservations_per_ip",
            "max_reservations_per_prefix",
            "reserve_calls_per_minute",
            "max_circuits",
            "max_circuits_per_peer",
            "max_circuits_per_ip",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"relay limit {name} must be at least 1")
        if self.circuit_bytes < 64 * 1024:
            raise ConfigError("relay limit circuit_bytes must be at least 64 KiB (a TLS handshake)")

    @property
    def terms(self) -> RelayTerms:
        """What clients are told about every circuit and reservation."""
        return RelayTerms(self.reservation_seconds, self.circuit_seconds, self.circuit_bytes)
