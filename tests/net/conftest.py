"""Fixtures for relay tests: a relay, private peers reachable only through it, and dialers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from core.net import Host, Identity, NetConfig
from core.net.host.gate import AccessGate
from core.net.relay.client import RelayClient
from core.net.relay.dialer import RelayDialer
from core.net.relay.limits import RelayLimits
from core.net.relay.service import RelayService
from tests.conftest import FAST, MakeHost
from tests.support.leaks import wait_until


@dataclass
class RelayWorld:
    """Hosts around relays; everything it made is closed at the end of the test."""

    make_host: MakeHost
    services: list[RelayService] = field(default_factory=list)
    clients: list[RelayClient] = field(default_factory=list)
    dialers: list[RelayDialer] = field(default_factory=list)
    private: list[Host] = field(default_factory=list)

    async def relay(
        self,
        limits: RelayLimits | None = None,
        *,
        access: AccessGate | None = None,
        identity: Identity | None = None,
    ) -> tuple[Host, RelayService]:
        host = await self.make_host(identity=identity, access=access)
        service = RelayService(host, limits or RelayLimits())
        service.start()
        self.services.append(service)
        return host, service

    async def dialer(
        self,
        *,
        access: AccessGate | None = None,
        identity: Identity | None = None,
        config: NetConfig = FAST,
    ) -> Host:
        """A public peer (listening on loopback) that can dial relayed addresses."""
        host = await self.make_host(config, identity=identity, access=access)
        self.dialers.append(RelayDialer(host))
        return host

    async def private_peer(
        self,
        *relays: Host,
        access: AccessGate | None = None,
        identity: Identity | None = None,
        config: NetConfig = FAST,
    ) -> tuple[Host, RelayClient]:
        """A peer listening nowhere, holding reservations on ``relays``."""
        host = Host(identity or Identity.generate(), config, access=access)
        self.private.append(host)
        await host.start([])
        for relay in relays:
            host.add_addresses(relay.peer_id, relay.listen_addresses)
        client = RelayClient(host, candidates=lambda: [r.peer_id for r in relays], want=len(relays))
        self.clients.append(client)
        client.start()
        await wait_until(lambda: len(client.relays) == len(relays))
        return host, client

    async def close(self) -> None:
        for client in self.clients:
            await client.close()
        for dialer in self.dialers:
            await dialer.close()
        for service in self.services:
            await service.close()
        for host in self.private:
            await host.close()


@pytest.fixture
async def relays(make_host: MakeHost) -> AsyncIterator[RelayWorld]:
    world = RelayWorld(make_host)
    yield world
    await world.close()


def relayed(relay: Host, peer: Host) -> str:
    return f"relay:{relay.peer_id}/{peer.peer_id}"
