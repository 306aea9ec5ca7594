"""NetworkStack: one training peer's place in the network (Host, DHT node, presence), in order.

The Host listens (a client nowhere), presence finds out how others reach it (reachability checks,
relays, hole punching; ``core.net.presence``), then the DHT node joins the swarm. Roles follow
reachability once the averager is carried (``carry``): a trainer others cannot dial averages as a
client, and a backbone that cannot be dialed says what to open. ``network()`` is how others reach
the peer and how it reaches those it is connected to; ``report`` tells each change as a
``PeerNetwork`` event. ``close`` stops the DHT node, presence and the Host, in that order.

In a moderated project the Host shows the peer's pass (the ``AccessGate``) and admits only members;
``check_gate`` refuses a gate that does not belong to the project before anything is built.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

from core.averaging import Averager
from core.config.roles import BACKBONE, CLIENT, TRAINER
from core.dht import DHTConfig, DHTNode, HostTransport
from core.net import Host, Identity, NetConfig
from core.net.connection_kinds import KINDS, peer_kinds
from core.net.host.address import PeerAddress
from core.net.host.advertise import parse_ip
from core.net.host.gate import AccessGate
from core.net.presence import Presence, PresenceOptions
from core.net.reach.monitor import ReachabilityMonitor
from core.net.reach.reachability import Reachability
from core.project import Manifest
from core.worker.errors import TrainingError
from core.worker.events import PeerEvent, PeerNetwork

log = logging.getLogger(__name__)

REPORT_INTERVAL = 1.0
"""Seconds between looks at the network for a change worth a ``PeerNetwork`` event."""


def check_gate(manifest: Manifest, access: AccessGate | None) -> None:
    """A moderated project needs the gate of its pass, an open one takes none (``TrainingError``)."""
    project = manifest.project.name
    if manifest.access.moderated:
        if access is None:
            raise TrainingError(
                f"project {project} is moderated: log in to its coordinator to get a pass"
            )
        if access.project != project or access.project_key != manifest.access.key:
            raise TrainingError(f"the access gate is not for project {project}")
    elif access is not None:
        raise TrainingError(f"project {project} is open: it takes no access gate")


def dht_client(role: str, listen: Sequence[str]) -> bool:
    """Whether our DHT node only asks (serves nothing, stays out of others' routing tables).

    A volunteer's trainer on the internet asks only: most sit behind routers, and a node others
    must reach through a relay would slow every lookup that passes it; the backbone serves the DHT.
    Inside one computer (loopback) every peer can serve.
    """
    if role == CLIENT:
        return True
    if role == BACKBONE:
        return False
    hosts = [PeerAddress.parse(text).host or "" for text in listen]
    return not all((ip := parse_ip(host)) is not None and ip.is_loopback for host in hosts)


class NetworkStack:
    def __init__(
        self,
        identity: Identity,
        access: AccessGate | None,
        *,
        role: str,
        listen: Sequence[str],
        port_fallback: bool,
        offer_relay: bool,
    ) -> None:
        self.role = role
        self.host = Host(identity, NetConfig(), access=access)
        self.dht = DHTNode(
            HostTransport(self.host), DHTConfig(client_mode=dht_client(role, listen))
        )
        self.presence: Presence | None = None
        self._listen = [] if role == "client" else list(listen)  # a client dials out only
        self._port_fallback = port_fallback
        self._offer_relay = offer_relay
        self._averager: Averager | None = None
        self._told: PeerNetwork | None = None

    async def start(self, initial_peers: Sequence[str]) -> None:
        await self.host.start(self._listen, port_fallback=self._port_fallback)
        self.presence = Presence(
            self.host,
            PresenceOptions(
                offer_relay=self._offer_relay,
                assume=Reachability.PRIVATE if self.role == "client" else None,
            ),
            on_change=self._reachability_changed,
        )
        await self.presence.start()
        await self.dht.start(list(initial_peers))

    def carry(self, averager: Averager) -> None:
        """From now on ``averager``'s role follows our reachability (checked at once)."""
        self._averager = averager
        if self.presence is not None:
            self._reachability_changed(self.presence.reachability)

    def address(self) -> str:
        """Where to join us: our first address, else our peer id."""
        return str(self.host.addresses[0]) if self.host.addresses else str(self.host.peer_id)

    @property
    def monitor(self) -> ReachabilityMonitor | None:
        """The reachability checks (None before ``start`` started presence)."""
        return self.presence.monitor if self.presence is not None else None

    def network(self) -> PeerNetwork:
        """How others reach this peer, and how it reaches the peers it is connected to now."""
        presence, averager = self.presence, self._averager
        if presence is None:
            return PeerNetwork(Reachability.UNKNOWN.value)
        connections = peer_kinds(self.host)
        kinds = {kind: list(connections.values()).count(kind) for kind in KINDS}
        monitor = presence.monitor
        relays = presence.relay_client.relays if presence.relay_client is not None else []
        return PeerNetwork(
            reachability=presence.reachability.value,
            public_address=str(monitor.public_address) if monitor.public_address else None,
            checked_at=monitor.checked_at,
            peers=len(connections),
            direct=kinds["direct"],
            punched=kinds["punched"],
            relayed=kinds["relayed"],
            client=averager.config.client_mode if averager is not None else False,
            addresses=[str(a) for a in self.host.addresses],
            connections=connections,
            relays=[str(r) for r in relays],
        )

    async def report(self, emit: Callable[[PeerEvent], None]) -> None:
        """A ``network`` event whenever reachability, role, addresses or connections change."""
        while True:
            event = self.network()
            # when it was checked alone changes nothing worth telling
            told = self._told
            if told is None or replace(event, checked_at=None) != replace(told, checked_at=None):
                emit(event)
            self._told = event
            await asyncio.sleep(REPORT_INTERVAL)

    async def close(self) -> None:
        await self.dht.close()
        if self.presence is not None:
            await self.presence.close()
        await self.host.close()

    def _reachability_changed(self, state: Reachability) -> None:
        """Roles follow reachability: a trainer others cannot dial averages as a client."""
        averager, presence = self._averager, self.presence
        if averager is None or presence is None:
            return
        if self.role == TRAINER:
            averager.set_client_mode(not presence.dialable)
        elif self.role == BACKBONE and state is Reachability.PRIVATE:
            log.warning(
                "this backbone cannot be dialed from the internet (%s): peers behind routers "
                "will fail to send it their parts; open its port (%s) in the firewall",
                state.value,
                self.host.listening_port,
            )
