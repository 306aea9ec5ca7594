"""Relays: private peers reached through a public one, with TLS end to end."""

from __future__ import annotations

import asyncio
import hashlib
import os
from typing import Any

import pytest

from core.net import CallContext, Host, Identity, PeerAddress, Stream
from core.net.errors import ConnectionClosedError, DialError, NetError
from core.net.relay.client import RelayClient
from core.net.relay.limits import RelayLimits
from core.net.relay.messages import RESERVE, RelayRefused, RelayStatus, ReserveRequest
from core.net.relay.service import RelayService
from core.net.relay.splice import Splice
from core.net.wire.stream import EndOfStream
from tests.conftest import MakeHost
from tests.net.conftest import FAST, RelayWorld, relayed
from tests.support.leaks import wait_until

MB = 1_000_000


def serve_echo(host: Host) -> None:
    async def echo(ctx: CallContext, request: Any) -> Any:
        return [str(ctx.peer), request]

    host.router.add_raw("test.echo", echo)


def serve_swap(host: Host) -> None:
    """Receive ``n`` bytes while sending back ``n`` bytes of its own; answers both digests."""

    async def swap(ctx: CallContext, request: Any, stream: Stream) -> Any:
        n = int(request)
        mine = os.urandom(n)
        received = bytearray(n)
        await asyncio.gather(stream.send_data(mine), stream.recv_data_into(received))
        return [hashlib.sha256(received).hexdigest(), hashlib.sha256(mine).hexdigest()]

    host.router.add_raw_stream("test.swap", swap)


async def send_all(stream: Any, data: bytes) -> Any:
    await stream.send_data(data)
    return await stream.result()


def serve_hang(host: Host) -> None:
    async def hang(ctx: CallContext, request: Any) -> Any:
        await asyncio.Event().wait()

    host.router.add_raw("test.hang", hang)


async def test_calls_and_a_20_mb_stream_both_ways_through_a_relay(relays: RelayWorld) -> None:
    r, _ = await relays.relay()
    b, _ = await relays.private_peer(r)
    a = await relays.dialer()
    a.add_addresses(r.peer_id, r.listen_addresses)
    serve_echo(b)
    serve_swap(b)
    assert b.listen_addresses == []
    assert PeerAddress.parse(relayed(r, b)) in b.addresses  # advertised while the reservation lives

    assert await a.call_raw(relayed(r, b), "test.echo", "hi") == [str(a.peer_id), "hi"]
    (conn,) = a.connections(b.peer_id)
    assert conn.relayed_via == r.peer_id
    (back,) = b.connections(a.peer_id)
    assert back.relayed_via == r.peer_id  # TLS proved who the source is, end to end

    n = 20 * MB
    data = os.urandom(n)
    received = bytearray(n)
    stream = conn.open_stream("test.swap", n)
    await asyncio.gather(stream.send_data(data), stream.recv_data_into(received))
    theirs, mine = await stream.result()
    assert theirs == hashlib.sha256(data).hexdigest()
    assert mine == hashlib.sha256(received).hexdigest()
    # the relay carried the ciphertext of both directions through its own connections
    assert r.traffic.received > 2 * n
    assert r.traffic.sent > 2 * n


async def test_a_peer_without_relays_cannot_dial_relayed_addresses(relays: RelayWorld) -> None:
    r, _ = await relays.relay()
    b, _ = await relays.private_peer(r)
    plain = await relays.make_host()
    plain.add_addresses(r.peer_id, r.listen_addresses)
    with pytest.raises(DialError, match="does not use relays"):
        await plain.call_raw(relayed(r, b), "test.echo", 1)


async def test_an_unknown_target_is_refused_with_no_reservation(relays: RelayWorld) -> None:
    r, _ = await relays.relay()
    a = await relays.dialer()
    stranger = await relays.make_host()
    a.add_addresses(r.peer_id, r.listen_addresses)
    with pytest.raises(DialError, match="holds no reservation on this relay"):
        await a.call_raw(relayed(r, stranger), "test.echo", 1)
    with pytest.raises(RelayRefused) as caught:
        await a.relay_dialer(PeerAddress.parse(relayed(r, stranger)))  # type: ignore[misc]
    assert caught.value.status is RelayStatus.NO_RESERVATION
    with pytest.raises(RelayRefused, match="cannot relay to itself"):
        await a.relay_dialer(PeerAddress.parse(relayed(r, a)))  # type: ignore[misc]


async def test_a_peer_refuses_circuits_from_relays_it_holds_no_reservation_with(
    relays: RelayWorld,
) -> None:
    r, _ = await relays.relay()
    r2, _ = await relays.relay()
    b, _ = await relays.private_peer(r)
    serve_echo(b)
    # b asks r2 for a reservation behind its relay client's back: r2 will offer it circuits
    b.add_addresses(r2.peer_id, r2.listen_addresses)
    await b.call(r2.peer_id, RESERVE, ReserveRequest())
    a = await relays.dialer()
    a.add_addresses(r2.peer_id, r2.listen_addresses)
    with pytest.raises(DialError, match="we hold no reservation with this relay"):
        await a.call_raw(relayed(r2, b), "test.echo", 1)
    with pytest.raises(RelayRefused) as caught:
        await a.relay_dialer(PeerAddress.parse(relayed(r2, b)))  # type: ignore[misc]
    assert caught.value.status is RelayStatus.TARGET_REFUSED
    assert b.connections(a.peer_id) == []


async def test_when_the_target_drops_the_source_learns_why(relays: RelayWorld) -> None:
    r, _ = await relays.relay()
    b, _ = await relays.private_peer(r)
    serve_hang(b)
    a = await relays.dialer()
    a.add_addresses(r.peer_id, r.listen_addresses)
    call = asyncio.ensure_future(a.call_raw(relayed(r, b), "test.hang", 1))
    await wait_until(lambda: bool(a.connections(b.peer_id)))
    for link in b.connections(r.peer_id):
        link.abort("test: the home router dropped the link")
    with pytest.raises(ConnectionClosedError, match="relay circuit ended") as caught:
        await call
    assert f"{b.peer_id.short()} left" in str(caught.value)


async def test_when_the_relay_closes_both_ends_see_it(relays: RelayWorld) -> None:
    r, service = await relays.relay()
    b, client = await relays.private_peer(r)
    serve_echo(b)
    a = await relays.dialer()
    a.add_addresses(r.peer_id, r.listen_addresses)
    await a.call_raw(relayed(r, b), "test.echo", 1)
    (a_side,) = a.connections(b.peer_id)
    (b_side,) = b.connections(a.peer_id)
    await service.close()
    await wait_until(lambda: a_side.is_closed and b_side.is_closed)
    assert "the relay is shutting down" in (a_side.close_reason or "")
    assert "the relay is shutting down" in (b_side.close_reason or "")
    await r.close()
    await wait_until(lambda: not client.relays and b.relay_addresses == [])


async def test_relays_are_never_chained(relays: RelayWorld) -> None:
    r, _ = await relays.relay()
    far, _ = await relays.relay()
    # a relay that is itself private: reachable only through r
    private_relay, _ = await relays.private_peer(r)
    service = RelayService(private_relay)
    service.start()
    relays.services.append(service)
    a = await relays.dialer()
    a.add_addresses(r.peer_id, r.listen_addresses)
    a.add_addresses(private_relay.peer_id, [PeerAddress.parse(relayed(r, private_relay))])
    answer = await a.call(private_relay.peer_id, RESERVE, ReserveRequest())
    assert answer.status is RelayStatus.RELAYED_LINK
    assert answer.reason == "no relaying over relayed links"
    with pytest.raises(DialError, match="reachable only through another relay"):
        await a.call_raw(relayed(private_relay, far), "test.echo", 1)


@pytest.mark.parametrize("where", ["handshake", "data"])
async def test_a_relay_that_alters_ciphertext_breaks_the_connection(
    relays: RelayWorld, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    r, _ = await relays.relay()
    b, _ = await relays.private_peer(r)
    got: list[int] = []

    async def sink(ctx: CallContext, request: Any, stream: Stream) -> Any:
        buffer = bytearray(int(request))
        await stream.recv_data_into(buffer)
        got.append(len(buffer))
        return hashlib.sha256(buffer).hexdigest()

    b.router.add_raw_stream("test.sink", sink)
    serve_echo(b)
    a = await relays.dialer()
    a.add_addresses(r.peer_id, r.listen_addresses)
    flip_after = 0 if where == "handshake" else 64 * 1024
    seen = [0]

    def tamper(self: Splice, chunk: memoryview, direction: int) -> memoryview:
        start = seen[0]
        seen[0] += len(chunk) if direction == 0 else 0
        if direction == 0 and start <= flip_after < seen[0]:
            altered = bytearray(chunk)
            altered[flip_after - start] ^= 0x01
            return memoryview(altered)
        return chunk

    monkeypatch.setattr(Splice, "forward", tamper)
    if where == "handshake":
        with pytest.raises(NetError):
            await a.call_raw(relayed(r, b), "test.echo", 1, timeout=5.0)
        assert b.connections(a.peer_id) == []
        return
    await a.call_raw(relayed(r, b), "test.echo", 1)
    (conn,) = a.connections(b.peer_id)
    (b_side,) = b.connections(a.peer_id)
    stream = conn.open_stream("test.sink", 1 * MB)
    with pytest.raises(NetError):
        await send_all(stream, os.urandom(1 * MB))
    await wait_until(lambda: b_side.is_closed)
    reason = (b_side.close_reason or "").lower()
    assert "ssl" in reason or "decrypt" in reason or "mac" in reason, reason
    assert got == []  # the altered data never reached the handler


async def test_the_circuit_stream_rejects_data_after_it_ended(relays: RelayWorld) -> None:
    """The relay's last word ends the stream: a circuit's stream yields no data afterwards."""
    r, service = await relays.relay()
    b, _ = await relays.private_peer(r)
    serve_echo(b)
    a = await relays.dialer()
    a.add_addresses(r.peer_id, r.listen_addresses)
    await a.call_raw(relayed(r, b), "test.echo", 1)
    (circuit,) = relays.dialers[0].circuits
    await service.close()
    assert "the relay is shutting down" in await circuit.wait_closed()
    with pytest.raises((EndOfStream, NetError)):
        await circuit.stream.recv_data()


async def test_a_backbone_peer_that_starts_relaying_after_we_connected_is_used(
    relays: RelayWorld, make_host: MakeHost
) -> None:
    """A hello is sent once per connection, and the backbone starts its relay only after its own
    reachability check: the client must still find it (it asks the peers it dialed directly)."""
    r = await make_host()
    private = Host(Identity.generate(), FAST)
    relays.private.append(private)
    await private.start([])
    await private.connect(r.addresses[0])
    plain = await make_host()  # a peer that relays nothing: it refuses, and is not a relay
    await private.connect(plain.addresses[0])
    client = RelayClient(private)  # default candidates: what our connections offer
    relays.clients.append(client)
    client.start()
    # both were asked and refused: nobody relays yet
    await wait_until(lambda: {r.peer_id, plain.peer_id} <= client._backoff.keys())
    assert client.relays == []
    service = RelayService(r, RelayLimits())
    service.start()
    relays.services.append(service)
    await wait_until(lambda: client.relays == [r.peer_id], timeout=10)
    assert private.relay_addresses == [PeerAddress.parse(relayed(r, private))]
