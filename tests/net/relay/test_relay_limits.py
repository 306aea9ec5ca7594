"""Relay limits: reservations, circuits, bytes and time, each refused or cut with its reason."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from core.net import CallContext, Host, Identity, Stream
from core.net.errors import ConnectionClosedError, DialError, NetError
from core.net.relay.limits import RelayLimits
from core.net.relay.messages import RESERVE, RelayRefused, RelayStatus, ReserveRequest
from core.net.relay.reservations import Reservations
from core.util.errors import ConfigError
from tests.net.conftest import RelayWorld, relayed
from tests.support.leaks import wait_until


async def send_all(stream: Any, data: bytes) -> Any:
    await stream.send_data(data)
    return await stream.result()


def serve(host: Host) -> None:
    async def echo(ctx: CallContext, request: Any) -> Any:
        return request

    async def sink(ctx: CallContext, request: Any, stream: Stream) -> Any:
        await stream.recv_data_into(bytearray(int(request)))
        return int(request)

    host.router.add_raw("test.echo", echo)
    host.router.add_raw_stream("test.sink", sink)


async def test_a_circuit_is_cut_at_its_byte_limit_with_the_reason(relays: RelayWorld) -> None:
    r, _ = await relays.relay(RelayLimits(circuit_bytes=256 * 1024))
    b, _ = await relays.private_peer(r)
    serve(b)
    a = await relays.dialer()
    a.add_addresses(r.peer_id, r.listen_addresses)
    assert await a.call_raw(relayed(r, b), "test.echo", 1) == 1
    (conn,) = a.connections(b.peer_id)
    stream = conn.open_stream("test.sink", 1_000_000)
    with pytest.raises(ConnectionClosedError, match="limit of 262144 bytes"):
        await send_all(stream, os.urandom(1_000_000))
    # the next call simply opens a new circuit
    assert await a.call_raw(relayed(r, b), "test.echo", 2) == 2


async def test_a_circuit_ends_at_its_time_limit(relays: RelayWorld) -> None:
    r, _ = await relays.relay(RelayLimits(circuit_seconds=0.3))
    b, _ = await relays.private_peer(r)
    serve(b)
    a = await relays.dialer()
    a.add_addresses(r.peer_id, r.listen_addresses)
    await a.call_raw(relayed(r, b), "test.echo", 1)
    (conn,) = a.connections(b.peer_id)
    await wait_until(lambda: conn.is_closed)
    assert "time limit of 0.3 s" in (conn.close_reason or "")


async def test_concurrent_circuits_are_limited_in_total_and_per_peer(relays: RelayWorld) -> None:
    r, service = await relays.relay(RelayLimits(max_circuits=2, max_circuits_per_peer=1))
    b, _ = await relays.private_peer(r)
    d, _ = await relays.private_peer(r)
    f, _ = await relays.private_peer(r)
    for peer in (b, d, f):
        serve(peer)
    a, c, e = await relays.dialer(), await relays.dialer(), await relays.dialer()
    for dialer in (a, c, e):
        dialer.add_addresses(r.peer_id, r.listen_addresses)
    await a.call_raw(relayed(r, b), "test.echo", 1)
    with pytest.raises(DialError, match=r"is in 1 circuits already \(limit 1\)"):
        await c.call_raw(relayed(r, b), "test.echo", 1)
    await c.call_raw(relayed(r, d), "test.echo", 1)
    with pytest.raises(DialError, match="maximum of 2 circuits"):
        await e.call_raw(relayed(r, f), "test.echo", 1)
    assert service.circuits == 2
    # a circuit that ends frees its slot
    (first,) = a.connections(b.peer_id)
    await first.close()
    await wait_until(lambda: service.circuits == 1)
    assert await e.call_raw(relayed(r, f), "test.echo", 3) == 3


async def test_reservations_are_limited_per_address_and_per_peer(relays: RelayWorld) -> None:
    r, service = await relays.relay(
        RelayLimits(max_reservations_per_ip=2, reserve_calls_per_minute=3)
    )
    hosts = [await relays.dialer() for _ in range(3)]
    for host in hosts:
        host.add_addresses(r.peer_id, r.listen_addresses)
    first = await hosts[0].call(r.peer_id, RESERVE, ReserveRequest())
    assert first.status is RelayStatus.OK
    assert first.terms == service.limits.terms
    assert first.addresses
    assert all("127.0.0.1" in a for a in first.addresses)
    assert (await hosts[1].call(r.peer_id, RESERVE, ReserveRequest())).status is RelayStatus.OK
    third = await hosts[2].call(r.peer_id, RESERVE, ReserveRequest())
    assert third.status is RelayStatus.LIMIT
    assert third.reason == "too many reservations from 127.0.0.1 (limit 2)"
    # renewing needs no new slot, until the peer asks too often
    for _ in range(2):
        assert (await hosts[0].call(r.peer_id, RESERVE, ReserveRequest())).status is RelayStatus.OK
    flood = await hosts[0].call(r.peer_id, RESERVE, ReserveRequest())
    assert flood.status is RelayStatus.LIMIT
    assert "too many reservation requests" in flood.reason
    assert (await hosts[1].call(r.peer_id, RESERVE, ReserveRequest())).status is RelayStatus.OK
    assert len(service.reservations) == 2


class _Conn:
    closing = False


def test_a_flood_from_one_address_leaves_room_for_others() -> None:
    table = Reservations(RelayLimits(max_reservations=5, max_reservations_per_ip=3))
    conn: Any = _Conn()
    flood = [Identity.generate().peer_id for _ in range(10)]
    for peer in flood[:3]:
        table.reserve(peer, "203.0.113.7", conn, now=0.0)
    for peer in flood[3:]:
        with pytest.raises(
            RelayRefused, match=r"too many reservations from 203\.0\.113\.7"
        ) as caught:
            table.reserve(peer, "203.0.113.7", conn, now=0.0)
        assert caught.value.status is RelayStatus.LIMIT
    others = [Identity.generate().peer_id for _ in range(3)]
    table.reserve(others[0], "198.51.100.1", conn, now=0.0)
    table.reserve(others[1], "198.51.100.2", conn, now=0.0)
    with pytest.raises(RelayRefused, match="maximum of 5 reservations"):
        table.reserve(others[2], "198.51.100.3", conn, now=0.0)
    # expired reservations free their slots
    table.reserve(others[2], "198.51.100.3", conn, now=3601.0)
    assert table.get(flood[0], now=3601.0) is None
    assert table.get(others[2], now=3601.0) is not None
    conn.closing = True  # a reservation dies with its connection
    assert table.get(others[2], now=3601.0) is None


def test_limits_are_validated() -> None:
    with pytest.raises(ConfigError, match="circuit_seconds"):
        RelayLimits(circuit_seconds=0)
    with pytest.raises(ConfigError, match="max_circuits_per_peer"):
        RelayLimits(max_circuits_per_peer=0)
    with pytest.raises(ConfigError, match="circuit_bytes"):
        RelayLimits(circuit_bytes=10)


async def test_reservations_are_renewed_and_expire_without_renewal(relays: RelayWorld) -> None:
    r, service = await relays.relay(RelayLimits(reservation_seconds=0.6))
    b, client = await relays.private_peer(r)
    serve(b)
    a = await relays.dialer()
    a.add_addresses(r.peer_id, r.listen_addresses)
    first = service.reservations.get(b.peer_id, asyncio.get_running_loop().time())
    assert first is not None
    expires = first.expires
    await asyncio.sleep(1.0)  # longer than the reservation: only renewals keep it
    held = service.reservations.get(b.peer_id, asyncio.get_running_loop().time())
    assert held is not None
    assert held.expires > expires
    assert client.relays == [r.peer_id]
    assert await a.call_raw(relayed(r, b), "test.echo", 1) == 1
    # a reservation nobody renews expires
    loner = await relays.dialer()
    loner.add_addresses(r.peer_id, r.listen_addresses)
    await loner.call(r.peer_id, RESERVE, ReserveRequest())
    await asyncio.sleep(0.7)  # longer than the reservation: it runs out on the relay's real clock
    with pytest.raises(DialError, match="holds no reservation"):
        await a.call_raw(relayed(r, loner), "test.echo", 1)


async def test_a_client_replaces_a_reservation_whose_link_dropped(relays: RelayWorld) -> None:
    r, service = await relays.relay()
    b, client = await relays.private_peer(r)
    (link,) = b.connections(r.peer_id)
    link.abort("test: the router forgot the mapping")
    await wait_until(lambda: not client.relays and b.relay_addresses == [])
    await wait_until(lambda: client.relays == [r.peer_id])  # after a backoff of about a second
    assert [str(x) for x in b.relay_addresses] == [f"/p2p/{r.peer_id}/p2p-circuit/p2p/{b.peer_id}"]
    assert service.reservations.get(b.peer_id, asyncio.get_running_loop().time()) is not None


async def test_a_refused_reservation_says_why(relays: RelayWorld) -> None:
    r, _ = await relays.relay(RelayLimits(max_reservations=1))
    await relays.private_peer(r)
    late = Host(Identity.generate())
    relays.private.append(late)
    await late.start([])
    late.add_addresses(r.peer_id, r.listen_addresses)
    from core.net.relay.client import RelayClient

    client = RelayClient(late, candidates=lambda: [r.peer_id])
    relays.clients.append(client)
    with pytest.raises(RelayRefused, match="maximum of 1 reservations") as caught:
        await client.reserve(r.peer_id)
    assert caught.value.status is RelayStatus.LIMIT
    with pytest.raises(NetError):
        await client.reserve(Identity.generate().peer_id)


def test_a_flood_from_one_block_of_addresses_leaves_room_for_others() -> None:
    table = Reservations(
        RelayLimits(max_reservations=50, max_reservations_per_ip=2, max_reservations_per_prefix=4)
    )
    conn: Any = _Conn()
    for n in range(4):  # four addresses of one /24, within the per-address limit each
        table.reserve(Identity.generate().peer_id, f"203.0.113.{n}", conn, now=0.0)
    with pytest.raises(RelayRefused, match=r"too many reservations from 203\.0\.113\.0/24"):
        table.reserve(Identity.generate().peer_id, "203.0.113.99", conn, now=0.0)
    table.reserve(Identity.generate().peer_id, "203.0.114.1", conn, now=0.0)
    assert len(table) == 5


async def test_fresh_identities_from_one_address_cannot_take_every_circuit(
    relays: RelayWorld,
) -> None:
    r, service = await relays.relay(
        RelayLimits(max_circuits=10, max_circuits_per_peer=5, max_circuits_per_ip=1)
    )
    b, _ = await relays.private_peer(r)
    d, _ = await relays.private_peer(r)
    for peer in (b, d):
        serve(peer)
    a, c = await relays.dialer(), await relays.dialer()  # two identities, one address
    for dialer in (a, c):
        dialer.add_addresses(r.peer_id, r.listen_addresses)
    await a.call_raw(relayed(r, b), "test.echo", 1)
    with pytest.raises(DialError, match=r"127\.0\.0\.1 asked for 1 circuits already \(limit 1\)"):
        await c.call_raw(relayed(r, d), "test.echo", 1)
    assert service.circuits == 1
