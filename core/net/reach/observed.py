"""ObservedAddresses: the IP addresses other peers say they see us at.

Every hello carries ``observed``: the address the sender's socket sees the connection coming from.
Behind a NAT that is the router's public address, which nothing on this computer can tell us. One
peer's word proves little (it may lie, or sit on our own LAN), so candidates are ranked by how many
*distinct* observers report them, counted by the observer's network (its /24 for IPv4, /48 for
IPv6): a dozen peers in one data centre count as one witness.

Only direct connections teach us anything: through a relay the peer sees the relay, not us. An
observation that names a loopback, unspecified or link-local address is dropped unless we are
ourselves a loopback host (a swarm inside one computer), where 127.0.0.1 is the truth.

Observations of a closed connection are kept for ``forget_after`` seconds (a peer that dropped a
minute ago still witnessed our address), then forgotten. The *current* address is the best candidate
among open connections only, so that after a network change (a laptop moving from home to a café)
the new address wins as soon as new connections report it; ``on_change`` says when it moves.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.net.errors import AddressError, NetError
from core.net.host.address import PeerAddress
from core.net.host.advertise import IPAddress, is_shareable, parse_ip
from core.util.clock import SYSTEM_CLOCK, Clock

if TYPE_CHECKING:
    from core.net.host.host import Host
    from core.net.wire.connection import Connection
    from core.trust.peer_id import PeerID
    from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)

FORGET_AFTER = 600.0
"""Seconds an observation outlives its connection: long enough to count a peer that reconnects."""
MAX_OBSERVATIONS = 1024
"""A bound on what is remembered; the oldest closed observations go first."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """An IP that peers reported seeing us at, and how well it is witnessed."""

    ip: str
    observers: int
    """Distinct observer networks (/24 or /48) that reported it."""
    peers: int
    """Distinct observer PeerIDs that reported it."""
    open: int
    """Of those reports, how many come from connections still open."""


@dataclass(slots=True)
class _Observation:
    observer: PeerID
    observer_group: str
    ip: str
    closed_at: float | None = None


def observer_group(ip: IPAddress) -> str:
    """The network an observer stands for: peers in one /24 (IPv4) or /48 (IPv6) are one witness."""
    prefix = 24 if ip.version == 4 else 48
    return str(ipaddress.ip_network(f"{ip}/{prefix}", strict=False))


class ObservedAddresses:
    """Observations of our address, by connection; candidates ranked by distinct observers."""

    def __init__(
        self,
        *,
        loopback_host: bool = False,
        forget_after: float = FORGET_AFTER,
        on_change: Callable[[str | None, str | None], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.loopback_host = loopback_host
        """Whether loopback observations are true (a host listening on loopback alone)."""
        self.forget_after = forget_after
        self.on_change = on_change
        """Called with (previous, current) when the current observed IP changes."""
        self._clock = clock
        self._seen: dict[int, _Observation] = {}
        self._next_token = 0
        self._current: str | None = None

    # ---- feeding ---------------------------------------------------------------------------------

    def record(self, observer: PeerID, observer_ip: str, observed: str) -> int | None:
        """Remember that ``observer`` (connected from ``observer_ip``) sees us at ``observed``.

        Returns a token for ``closed()``, or None when the observation is unusable.
        """
        seen = _ip_of(observed)
        source = parse_ip(observer_ip)
        if seen is None or source is None:
            return None
        if not is_shareable(seen) and not (self.loopback_host and seen.is_loopback):
            log.debug(
                "ignored %s's observation %s: not an address others could use", observer, seen
            )
            return None
        self._next_token += 1
        token = self._next_token
        self._seen[token] = _Observation(observer, observer_group(source), str(seen))
        self._prune()
        self._update_current()
        return token

    def closed(self, token: int) -> None:
        """The connection that made that observation closed: keep it a while, then forget it."""
        observation = self._seen.get(token)
        if observation is not None and observation.closed_at is None:
            observation.closed_at = self._clock.monotonic()
            self._update_current()

    def observe_connection(self, conn: Connection) -> int | None:
        """Record what ``conn``'s peer says it sees us at (direct connections only)."""
        hello = conn.remote_hello
        if (
            conn.relayed_via is not None
            or conn.peer is None
            or hello is None
            or hello.observed is None
            or conn.remote_address is None
        ):
            return None
        return self.record(conn.peer, conn.remote_address[0], hello.observed)

    def attach(self, host: Host, tasks: BackgroundTasks) -> None:
        """Watch every connection of ``host`` from now on, each in a task of ``tasks``."""

        def on_connection(conn: Connection) -> None:
            if conn.relayed_via is None and not tasks.closed:
                tasks.spawn(f"observe-{conn.peer}", self._watch(conn))

        host.on_connection(on_connection)

    async def _watch(self, conn: Connection) -> None:
        # the initiator's connection is registered before the peer's hello arrives in open projects
        try:
            await conn.wait_ready()
        except NetError:
            return
        token = self.observe_connection(conn)
        try:
            await conn.wait_closed()
        finally:
            if token is not None:
                self.closed(token)

    # ---- reading ---------------------------------------------------------------------------------

    @property
    def current(self) -> str | None:
        """Our IP as the open connections see it (the best witnessed), or None."""
        return self._current

    def candidates(self) -> list[Candidate]:
        """Every remembered IP, best witnessed first."""
        self._prune()
        groups: dict[str, set[str]] = {}
        peers: dict[str, set[PeerID]] = {}
        open_count: dict[str, int] = {}
        for observation in self._seen.values():
            groups.setdefault(observation.ip, set()).add(observation.observer_group)
            peers.setdefault(observation.ip, set()).add(observation.observer)
            if observation.closed_at is None:
                open_count[observation.ip] = open_count.get(observation.ip, 0) + 1
        found = [
            Candidate(ip, len(groups[ip]), len(peers[ip]), open_count.get(ip, 0)) for ip in groups
        ]
        found.sort(key=lambda c: (c.observers, c.peers, c.open), reverse=True)
        return found

    def observers_of(self, ip: str) -> int:
        """How many distinct observer networks reported ``ip``."""
        return next((c.observers for c in self.candidates() if c.ip == ip), 0)

    # ---- upkeep ----------------------------------------------------------------------------------

    def _prune(self) -> None:
        limit = self._clock.monotonic() - self.forget_after
        for token in [
            t for t, o in self._seen.items() if o.closed_at is not None and o.closed_at < limit
        ]:
            del self._seen[token]
        if len(self._seen) > MAX_OBSERVATIONS:
            # closed ones first (oldest first), then the oldest open ones (lowest tokens)
            order = sorted(
                self._seen,
                key=lambda t: (self._seen[t].closed_at is None, self._seen[t].closed_at or 0, t),
            )
            for token in order[: len(self._seen) - MAX_OBSERVATIONS]:
                del self._seen[token]

    def _update_current(self) -> None:
        groups: dict[str, set[str]] = {}
        latest: dict[str, int] = {}
        for token, observation in self._seen.items():
            if observation.closed_at is None:
                groups.setdefault(observation.ip, set()).add(observation.observer_group)
                latest[observation.ip] = token
        # most witnesses first; between equals the most recent report (a network change shows first)
        best = max(groups, key=lambda ip: (len(groups[ip]), latest[ip]), default=None)
        if best is None:
            return  # no open connection tells anything: keep the last known address
        if best != self._current:
            previous, self._current = self._current, best
            log.info("peers see us at %s (before: %s)", best, previous or "unknown")
            if self.on_change is not None:
                self.on_change(previous, best)


def _ip_of(observed: str) -> IPAddress | None:
    """The IP of an observed address (``/ip4/…/tcp/…`` or ``host:port``), or None."""
    try:
        address = PeerAddress.parse(observed)
    except AddressError:
        return None
    if address.is_relayed or address.host is None:
        return None
    return parse_ip(address.host)


__all__ = ["Candidate", "ObservedAddresses", "observer_group"]
