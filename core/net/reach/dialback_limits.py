"""DialbackLimits and DialbackBudget: how many dial-backs a peer serves, and to whom.

A dial-back costs the server a TCP connection and a TLS handshake towards an address it did not
choose, so it is rationed, in sliding one-minute windows: overall, per asking IP (one household or
one attacker with many identities), per network prefix (one attacker with a block of addresses) and
per asking PeerID, plus a bound on dial-backs in flight at
once. A request over a limit is refused at once and dials nothing; it does not wait in a queue,
because the asker can simply ask another peer.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.net.host.admission import network_prefix
from core.util.clock import SYSTEM_CLOCK, Clock
from core.util.errors import ConfigError
from core.util.recent import RecentEvents

WINDOW = 60.0


@dataclass(frozen=True)
class DialbackLimits:
    """Rations of one dial-back server (counts per sliding minute, and at once)."""

    per_minute: int = 60
    """All askers together: one a second is far above what honest peers need (one check each
    30 minutes, a few on start) and far below anything useful for scanning."""
    per_ip_per_minute: int = 8
    """One public IP (a NAT with several volunteers behind it shares it)."""
    per_prefix_per_minute: int = 16
    """One /24 (IPv4) or /56 (IPv6): an attacker holding a block of addresses gets no more."""
    per_peer_per_minute: int = 3
    """One identity: a start-up check and a couple of network changes."""
    in_flight: int = 8
    """Dial-backs running at once; each holds a socket for up to ``dial_timeout``."""
    dial_timeout: float = 10.0
    """Seconds a dial-back (TCP connect and TLS handshake) may take before it counts as failed."""

    def __post_init__(self) -> None:
        for name in (
            "per_minute",
            "per_ip_per_minute",
            "per_prefix_per_minute",
            "per_peer_per_minute",
            "in_flight",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1")
        if not self.dial_timeout > 0:
            raise ConfigError("dial_timeout must be positive")


class DialbackBudget:
    """Admits or refuses dial-backs under ``DialbackLimits``; tracks those in flight."""

    def __init__(self, limits: DialbackLimits, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.limits = limits
        self._clock = clock
        self._by_ip = RecentEvents(WINDOW)  # the total over all IPs is the global count
        self._by_prefix = RecentEvents(WINDOW)
        self._by_peer = RecentEvents(WINDOW)
        self.in_flight = 0

    def admit(self, ip: str, peer: str) -> str | None:
        """Take one dial-back for (``ip``, ``peer``) and return None, or return why not."""
        now = self._clock.monotonic()
        limits = self.limits
        if self.in_flight >= limits.in_flight:
            return f"too many dial-backs in progress ({limits.in_flight}); ask again later"
        if self._by_ip.total(now) >= limits.per_minute:
            return f"this peer serves at most {limits.per_minute} dial-backs a minute"
        if self._by_ip.count(ip, now) >= limits.per_ip_per_minute:
            return f"at most {limits.per_ip_per_minute} dial-backs a minute to one IP address"
        prefix = network_prefix(ip)
        if self._by_prefix.count(prefix, now) >= limits.per_prefix_per_minute:
            return f"at most {limits.per_prefix_per_minute} dial-backs a minute to one network"
        if self._by_peer.count(peer, now) >= limits.per_peer_per_minute:
            return f"at most {limits.per_peer_per_minute} dial-backs a minute to one peer"
        self._by_ip.add(ip, now)
        self._by_prefix.add(prefix, now)
        self._by_peer.add(peer, now)
        self.in_flight += 1
        return None

    def done(self) -> None:
        """An admitted dial-back finished (either way)."""
        self.in_flight -= 1


__all__ = ["DialbackBudget", "DialbackLimits"]
