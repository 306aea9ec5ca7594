"""Presence: everything that makes a Host reachable, composed and steered by its reachability.

One object per Host, started after it listens:

- a **dial-back service** (``reach.dialback``) for others' reachability checks, and our own checks
  (``reach.monitor``), which decide PUBLIC / PRIVATE / UNKNOWN;
- a **relay dialer** (``relay.dialer``) so that ``relay:`` addresses can be dialed by anyone;
- while not PUBLIC, a **relay client** (``relay.client``) holding reservations on relays, so that
  others reach us through them; while PUBLIC and asked to, a **relay service** (``relay.service``);
- **hole punching** (``punch.puncher``): relayed connections we dialed are moved to a direct path;
- a **port mapping** (``reach.portmap``) on the home router where it offers UPnP-IGD or NAT-PMP; a
  mapping is re-checked by dial-backs before anyone is told;
- **meeting peers**: we connect to the peers we learn about (a few at a time), so that each pair
  finds its best path early and the user's dashboard can say how we reach them.

A Host that listens on loopback alone (a swarm inside one computer) is PUBLIC by definition: every
peer it can meet shares the computer. ``assume`` overrides the checks (``--client``: PRIVATE).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from core.net.host.advertise import parse_ip
from core.net.host.host import Host
from core.net.punch.puncher import HolePuncher
from core.net.reach.dialback import DialbackService
from core.net.reach.monitor import MonitorConfig, ReachabilityMonitor
from core.net.reach.portmap import Mapping, PortMapper
from core.net.reach.reachability import Reachability
from core.net.relay.client import RelayClient
from core.net.relay.dialer import RelayDialer
from core.net.relay.limits import RelayLimits
from core.net.relay.service import RelayService
from core.trust.peer_id import PeerID
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PresenceOptions:
    offer_relay: bool = False
    """Relay for private peers while we are PUBLIC (on for the backbone, a setting for volunteers)."""
    relay_limits: RelayLimits | None = None
    use_relays: bool = True
    """Hold reservations on relays while not PUBLIC."""
    punch: bool = True
    map_port: bool = True
    """Ask the home router for a port forward (UPnP-IGD, NAT-PMP)."""
    assume: Reachability | None = None
    """Skip the checks and take this (``--client``: PRIVATE)."""
    meet_every: float = 5.0
    """Seconds between looks for peers we know of but are not connected to."""
    meet_at_most: int = 16
    """Peers kept connected by meeting (averaging and the DHT connect to others as they need)."""
    monitor: MonitorConfig | None = None


class Presence:
    """A Host's reachability and the services that follow from it."""

    def __init__(
        self,
        host: Host,
        options: PresenceOptions | None = None,
        *,
        on_change: Callable[[Reachability], None] | None = None,
    ) -> None:
        self.host = host
        self.options = options or PresenceOptions()
        self.on_change = on_change
        self.dialer = RelayDialer(host)
        self.dialback = DialbackService(host)
        self.monitor = ReachabilityMonitor(
            host, config=self.options.monitor, on_change=self._reachability_changed
        )
        self.puncher = HolePuncher(host) if self.options.punch else None
        self.relay_client: RelayClient | None = None
        self.relay_service: RelayService | None = None
        self.port_mapper: PortMapper | None = None
        self._tasks = BackgroundTasks(f"presence-{host.peer_id.short()}")
        self._met: dict[PeerID, _Meeting] = {}
        self._started = False

    # ---- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start after ``host.start()``: checks, relays, punching, port mapping, meeting peers."""
        self._started = True
        if self.puncher is not None:
            self.puncher.start()
        if self.options.assume is None and not self.loopback_only:
            self.monitor.start()
        self._apply(self.reachability)
        port = self.host.listening_port
        if self.options.map_port and port and not self.loopback_only:
            self.port_mapper = PortMapper(port, on_change=self._mapping_changed)
            self._tasks.spawn("port-mapping", self._map_port(self.port_mapper))
        self._tasks.spawn("meet-peers", self._meet_peers())

    async def close(self) -> None:
        await self._tasks.close()
        if self.port_mapper is not None:
            await self.port_mapper.close()
        for part in (self.relay_client, self.relay_service, self.puncher):
            if part is not None:
                await part.close()
        await self.monitor.close()
        self.dialback.close()
        await self.dialer.close()

    # ---- state -----------------------------------------------------------------------------------

    @property
    def loopback_only(self) -> bool:
        """Listening on loopback alone: a swarm inside one computer."""
        bound = [parse_ip(a.host or "") for a in self.host.listen_addresses]
        return bool(bound) and all(ip is not None and ip.is_loopback for ip in bound)

    @property
    def reachability(self) -> Reachability:
        if self.options.assume is not None:
            return self.options.assume
        if self.loopback_only:
            return Reachability.PUBLIC
        if self.host.listening_port is None:
            return Reachability.PRIVATE  # listens nowhere: nobody can dial it
        return self.monitor.state

    @property
    def dialable(self) -> bool:
        """Whether others can open connections to us directly (else we average as a client)."""
        return self.reachability is Reachability.PUBLIC

    # ---- reacting --------------------------------------------------------------------------------

    def _reachability_changed(self, state: Reachability) -> None:
        log.info("reachability: %s", state.value)
        self._apply(state)
        if self.on_change is not None:
            self.on_change(state)

    def _apply(self, state: Reachability) -> None:
        """Relays follow reachability: use them while not PUBLIC, offer one while PUBLIC."""
        if not self._started:
            return
        public = state is Reachability.PUBLIC
        if not public and self.options.use_relays and self.relay_client is None:
            self.relay_client = RelayClient(self.host, dialer=self.dialer)
            self.relay_client.start()
        if public and self.relay_client is not None:
            client, self.relay_client = self.relay_client, None
            self._tasks.spawn("stop-relay-client", client.close())
            self.host.relay_addresses = []
        if public and self.options.offer_relay and self.relay_service is None:
            self.relay_service = RelayService(self.host, self.options.relay_limits)
            self.relay_service.start()
        if not public and self.relay_service is not None:
            service, self.relay_service = self.relay_service, None
            self._tasks.spawn("stop-relay-service", service.close())

    async def _map_port(self, mapper: PortMapper) -> None:
        mapping = await mapper.start()
        if mapping is None:
            log.info("no port mapping: %s", mapper.last_reason or "no router answered")

    def _mapping_changed(self, mapping: Mapping | None) -> None:
        # a router's claim is not proof: ask others to dial it
        self.monitor.request_check("port mapping changed" if mapping else "port mapping lost")

    async def _meet_peers(self) -> None:
        """Connect to peers we know addresses of, a few at a time, so each pair finds its path.

        A peer we could not reach is tried again after a backoff (doubling from ``meet_every`` to
        five minutes), or as soon as it has new addresses: a volunteer behind a router becomes
        reachable once it holds a relay reservation, and says so in its addresses.
        """
        while True:
            await asyncio.sleep(self.options.meet_every)
            connected = {conn.peer for conn in self.host.connections()}
            now = time.monotonic()
            for gone in [p for p in self._met if p not in self.host.peerstore]:
                del self._met[gone]  # the peer store forgot it: so do we
            due = []
            for peer in list(self.host.peerstore)[: 4 * self.options.meet_at_most]:
                meeting = self._met.get(peer)
                addresses = frozenset(str(a) for a in self.host.peerstore.get(peer, ()))
                if peer in connected or not addresses:
                    continue
                if meeting is None or meeting.addresses != addresses or now >= meeting.retry_at:
                    due.append((peer, addresses))
            room = self.options.meet_at_most - len(connected)
            for peer, addresses in due[: max(0, room)]:
                failures = self._met[peer].failures if peer in self._met else 0
                wait = min(300.0, self.options.meet_every * 2**failures)
                self._met[peer] = _Meeting(addresses, now + wait, failures + 1)
                self._tasks.spawn(f"meet-{peer.short()}", self._meet(peer))

    async def _meet(self, peer: PeerID) -> None:
        try:
            await self.host.connect(peer)
        except Exception as exc:
            log.info("could not meet %s yet: %s", peer.short(), exc)
        else:
            self._met.pop(peer, None)


@dataclass(slots=True)
class _Meeting:
    """Our last try to connect to a peer: the addresses we tried, when to try again."""

    addresses: frozenset[str]
    retry_at: float
    failures: int
