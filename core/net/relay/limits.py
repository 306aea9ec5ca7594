"""RelayLimits: what a relay grants, with the reason for each default.

A relay spends its organizer's bandwidth on other people's traffic, so every resource it hands out
is bounded: how many peers it keeps reachable (and how many from one address or network, so one
household or one attacker cannot take every slot), how many circuits run at once (likewise), how
long and how much each circuit may carry, and how long one may sit silent or stalled. A circuit
that reaches its limit ends with the reason; the peers simply open a new one (their next call
redials), so the limits cap a relay's commitment without stopping training.
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
    max_circuits_per_prefix: int = 32
    """Circuits asked for from one /24 (IPv4) or /56 (IPv6) at once. An IPv6 home holds a whole
    prefix and can use a fresh address per circuit, which ``max_circuits_per_ip`` does not see; a
    provider's block holds many households, so it gets twice one address's share, and still at most
    half of the relay."""
    circuit_idle_seconds: float = 300.0
    """A circuit on which no byte moved either way for this long ends. A circuit costs its holder
    nothing to keep, and a peer whose computer slept or lost its network leaves its link to us open
    until TCP gives up, so without this a silent circuit keeps its slot for ``circuit_seconds``. A
    working circuit is silent only while a call waits for its answer (a connection without calls is
    closed by the peers' own idle sweeper after ``NetConfig.idle_timeout``, 120 s): an all-reduce
    waits up to its timeout (60 s by default), and a matchmaking join up to the matchmaking time,
    which in diloco mode is a third of a round. Five minutes leaves room for rounds of up to 15
    minutes. A peer that keeps a circuit alive on purpose, a byte now and then, is bounded by the
    per-address limits and ``circuit_seconds`` instead."""
    stall_seconds: float = 60.0
    """A circuit ends when the bytes waiting for one side (one frame, as the other side sent it)
    are not taken within this long. Credit flow control keeps what we hold per direction to one
    stream window of our Host (``NetConfig.stream_window_bytes``) plus one frame, but a side that
    never reads would keep that memory and the circuit's slot until ``circuit_seconds``. A peer's
    frames on a circuit are at most 256 KiB (``circuit.READ_BYTES``): a minute moves one at
    4 KiB/s, slower than any link that can train, with room for our own bandwidth limit shared by
    every circuit."""
    accept_timeout: float = 10.0
    """How long the target may take to accept a circuit before the source is told it is unreachable."""

    def __post_init__(self) -> None:
        for name in (
            "reservation_seconds",
            "circuit_seconds",
            "circuit_idle_seconds",
            "stall_seconds",
            "accept_timeout",
        ):
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
            "max_circuits_per_prefix",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"relay limit {name} must be at least 1")
        if self.circuit_bytes < 64 * 1024:
            raise ConfigError("relay limit circuit_bytes must be at least 64 KiB (a TLS handshake)")

    @property
    def terms(self) -> RelayTerms:
        """What clients are told about every circuit and reservation."""
        return RelayTerms(self.reservation_seconds, self.circuit_seconds, self.circuit_bytes)
