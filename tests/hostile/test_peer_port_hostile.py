"""Against a real ``barnraise dht`` process: strangers cannot exhaust a backbone.

- 100 TLS connections with fresh identities, each sending a hello and then a frame header that
  announces 8 MiB followed by one byte, used to make the node allocate 8 MiB each (~1 GB of RSS);
- 500 plain TCP connections held open used to fill every pending-handshake slot, so that legitimate
  peers got ``DialError``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psutil
import pytest

from core.dht.messages import PING, PingRequest
from core.net import Host, Identity, NetConfig, PeerAddress
from core.net.config import MiB
from core.net.wire.frames import HEADER, Kind
from tests.cli.test_dht_cli import Node
from tests.support.rawpeer import close_writer, connect_tls, hello_frame


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    started = Node(tmp_path)
    yield started
    if started.proc.poll() is None:
        started.proc.kill()
    started.stop()


@pytest.fixture
async def legit() -> AsyncIterator[Host]:
    host = Host(Identity.generate(), NetConfig(dial_timeout=3.0, handshake_timeout=3.0))
    await host.start()
    yield host
    await host.close()


async def ping_fresh(host: Host, address: PeerAddress) -> None:
    """What a newcomer does: a new connection (TCP, TLS, hello) and a DHT ping on it."""
    assert address.peer_id is not None
    conn = await host.dial_fresh(address, address.peer_id)
    try:
        await conn.call(PING.name, PingRequest(client=True).to_wire(), timeout=3.0)
    finally:
        await conn.close(grace=0.1)


def rss_mb(node: Node) -> float:
    return float(psutil.Process(node.proc.pid).memory_info().rss) / MiB


class _Target:
    """Lets ``connect_tls`` find the node's address (it asks a Host for ``addresses[0]``)."""

    def __init__(self, address: PeerAddress) -> None:
        self.addresses = [address]


async def test_announced_frames_do_not_pin_the_nodes_memory(node: Node, legit: Host) -> None:
    address = PeerAddress.parse(node.address)
    await ping_fresh(legit, address)
    before = rss_mb(node)
    writers: list[asyncio.StreamWriter] = []
    try:
        for _ in range(100):
            _, writer = await connect_tls(_Target(address))  # type: ignore[arg-type]
            writer.write(hello_frame() + HEADER.pack(8 * MiB, Kind.MSG, 1) + b"x")
            await writer.drain()
            writers.append(writer)
        # let the node read every header: it does so in its own process, where nothing tells when
        # it has; what it allocated for them would show in its memory below
        await asyncio.sleep(1.0)
        grown = rss_mb(node) - before
        assert grown < 200, f"the node grew by {grown:.0f} MB for 100 announced frames"
        await ping_fresh(legit, address)  # and it still answers
    finally:
        for writer in writers:
            await close_writer(writer)


async def test_held_sockets_do_not_lock_peers_out(node: Node, legit: Host) -> None:
    address = PeerAddress.parse(node.address)
    assert address.host is not None
    assert address.port is not None
    held: list[asyncio.StreamWriter] = []
    try:
        for _ in range(500):
            _, writer = await asyncio.open_connection(address.host, address.port)
            held.append(writer)
        # the node has accepted them all (and dropped those over its pending limit): in its own
        # process, where nothing tells when it has
        await asyncio.sleep(0.5)
        for _ in range(5):
            async with asyncio.timeout(3.0):
                await ping_fresh(legit, address)
    finally:
        for writer in held:
            writer.transport.abort()
    assert node.proc.poll() is None
