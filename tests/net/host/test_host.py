"""Dialing, connection reuse, idle timeouts and shutdown."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from core.net import CallContext, Host, Identity, NetConfig, PeerAddress
from core.net.errors import (
    ConnectionClosedError,
    DialError,
    NetError,
    PeerIdMismatchError,
    UnavailableError,
)
from core.net.host.outbound import _Dial
from tests.conftest import FAST, MakeHost
from tests.support.leaks import HANG_GUARD, wait_until


async def echo(ctx: CallContext, request: Any) -> Any:
    return request


async def test_handshake_authenticates_both_sides(make_host: MakeHost) -> None:
    a, b = await make_host(), await make_host()
    conn = await b.connect(a.addresses[0])
    assert conn.peer == a.peer_id
    await wait_until(lambda: bool(a.connections()))  # a registers it once b's hello arrives
    (inbound,) = a.connections()
    assert inbound.peer == b.peer_id
    for side in (conn, inbound):
        assert side.cipher is not None
        name, protocol, bits = side.cipher
        assert protocol == "TLSv1.3"
        assert name.startswith("TLS_")  # a TLS 1.3 suite
        assert bits >= 128


async def test_dialing_a_peer_id_that_is_not_there_fails_clearly(make_host: MakeHost) -> None:
    a, b = await make_host(), await make_host()
    impostor = Identity.generate().peer_id
    wrong = a.addresses[0].with_peer(impostor)
    with pytest.raises(PeerIdMismatchError, match=f"dialed {impostor}.*but met {a.peer_id}"):
        await b.connect(wrong)
    assert b.connections() == []


async def test_connections_are_reused_and_concurrent_dials_coalesce(make_host: MakeHost) -> None:
    a, b = await make_host(), await make_host()
    a.router.add_raw("test.echo", echo)
    conns = await asyncio.gather(*(b.connect(a.addresses[0]) for _ in range(10)))
    assert len({id(c) for c in conns}) == 1
    await b.call_raw(a.peer_id, "test.echo", 1)
    assert len(b.connections(a.peer_id)) == 1


async def test_peers_learn_listen_addresses_from_hello(make_host: MakeHost) -> None:
    a, b = await make_host(), await make_host()
    await b.connect(a.addresses[0])
    await wait_until(lambda: b.peer_id in a.peerstore and bool(a.connections()))
    assert a.peerstore[b.peer_id] == b.addresses
    assert a.connections()[0].remote_hello is not None
    observed = a.connections()[0].remote_hello.observed  # what b saw of a
    assert observed is not None
    assert observed.startswith("/ip4/127.0.0.1/tcp/")


async def test_idle_connections_close_and_calls_redial(make_host: MakeHost) -> None:
    config = NetConfig(idle_timeout=0.3, close_grace=0.5)
    a, b = await make_host(config), await make_host(config)
    a.router.add_raw("test.echo", echo)
    await b.call_raw(a.addresses[0], "test.echo", 1)
    first = b.connections(a.peer_id)[0]
    await wait_until(lambda: first.is_closed and not b.connections(a.peer_id))
    assert await b.call_raw(a.peer_id, "test.echo", 2) == 2  # redials via the peerstore


async def test_dial_errors_are_clear(make_host: MakeHost) -> None:
    b = await make_host()
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    ghost = Identity.generate().peer_id
    with pytest.raises(DialError, match="could not connect"):
        await b.connect(PeerAddress.tcp("127.0.0.1", port, ghost))
    with pytest.raises(DialError, match="no known address"):
        await b.connect(Identity.generate().peer_id)
    with pytest.raises(DialError, match="cannot dial itself"):
        await b.connect(b.addresses[0])
    relayed = PeerAddress.parse(f"relay:{ghost}/{Identity.generate().peer_id}")
    with pytest.raises(DialError, match="does not use relays"):
        await b.connect(relayed)


async def test_calls_in_flight_fail_when_the_peer_goes_away(make_host: MakeHost) -> None:
    server = Host(Identity.generate(), FAST)
    await server.start()
    client = await make_host()
    started = asyncio.Event()

    async def hang(ctx: CallContext, request: Any) -> Any:
        started.set()
        await asyncio.sleep(3600)  # a call still in flight when the server goes away

    server.router.add_raw("test.hang", hang)
    call = asyncio.create_task(client.call_raw(server.addresses[0], "test.hang", None))
    await asyncio.wait_for(started.wait(), HANG_GUARD)
    await server.close()
    with pytest.raises(ConnectionClosedError) as failed:
        await asyncio.wait_for(call, HANG_GUARD)
    assert isinstance(failed.value, UnavailableError)
    assert str(server.peer_id) in str(failed.value)


async def test_graceful_close_lets_short_calls_finish(make_host: MakeHost) -> None:
    server = Host(Identity.generate(), NetConfig(close_grace=HANG_GUARD))  # waits only for calls
    await server.start()
    client = await make_host()
    started, release = asyncio.Event(), asyncio.Event()

    async def brief(ctx: CallContext, request: Any) -> Any:
        started.set()
        await release.wait()  # still running when the server starts closing
        return "finished"

    server.router.add_raw("test.brief", brief)
    call = asyncio.create_task(client.call_raw(server.addresses[0], "test.brief", None))
    await asyncio.wait_for(started.wait(), HANG_GUARD)
    (connection,) = server.connections()
    closing = asyncio.create_task(server.close())
    await wait_until(lambda: connection.closing)
    release.set()
    await closing
    assert await call == "finished"


async def test_no_tasks_or_sockets_left_after_heavy_use(make_host: MakeHost) -> None:
    hosts = [await make_host() for _ in range(4)]
    for host in hosts:
        host.router.add_raw("test.echo", echo)
    calls = [
        a.call_raw(b.addresses[0], "test.echo", i)
        for i, (a, b) in enumerate((a, b) for a in hosts for b in hosts if a is not b)
    ]
    assert len(await asyncio.gather(*calls)) == 12
    # the make_host fixture closes all four and fails the test on any leaked task or descriptor


async def test_a_closed_host_refuses_new_work(make_host: MakeHost) -> None:
    host = Host(Identity.generate(), FAST)
    await host.start()
    other = await make_host()
    await host.close()
    await host.close()  # idempotent
    with pytest.raises(DialError, match="closed"):
        await host.connect(other.addresses[0])


async def test_first_request_does_not_wait_for_the_peers_hello(make_host: MakeHost) -> None:
    """A server that says hello only after the first request: a client waiting for it would hang."""
    from core.net.host.certificate import issue_credentials
    from core.net.host.tls import server_context
    from core.net.wire.frames import Frame, FrameDecoder, Kind, encode_frame
    from core.util.msgpack_codec import pack, unpack
    from tests.support.rawpeer import hello_frame

    identity = Identity.generate()
    writers: list[asyncio.StreamWriter] = []

    async def late_hello(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        frames: list[Frame] = []
        decoder = FrameDecoder(1 << 20, frames.append)
        while not any(f.kind is Kind.OPEN for f in frames):
            data = await reader.read(65536)
            if not data:
                return  # the client gave up
            decoder.feed(data)
        opened = next(f for f in frames if f.kind is Kind.OPEN)
        method, _, _, request = unpack(opened.payload)
        writer.write(
            hello_frame() + encode_frame(Kind.RESULT, opened.call_id, pack([method, request]))
        )
        await writer.drain()

    server = await asyncio.start_server(
        late_hello, "127.0.0.1", 0, ssl=server_context(issue_credentials(identity))
    )
    try:
        client = await make_host()
        target = PeerAddress.tcp("127.0.0.1", server.sockets[0].getsockname()[1], identity.peer_id)
        assert await client.call_raw(target, "echo", 7, timeout=5) == ["echo", 7]
    finally:
        for writer in writers:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_a_server_that_never_says_hello_is_dropped(make_host: MakeHost) -> None:
    from core.net.host.certificate import issue_credentials
    from core.net.host.tls import server_context

    identity = Identity.generate()
    accepted: list[asyncio.StreamWriter] = []

    async def mute(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # completes TLS, then says nothing

    mute_server = await asyncio.start_server(
        mute, "127.0.0.1", 0, ssl=server_context(issue_credentials(identity))
    )
    try:
        port = mute_server.sockets[0].getsockname()[1]
        client = await make_host(NetConfig(handshake_timeout=3.0, close_grace=0.2))
        target = PeerAddress.tcp("127.0.0.1", port, identity.peer_id)
        with pytest.raises(ConnectionClosedError, match=r"no hello within 3 s"):
            await client.call_raw(target, "anything", None, timeout=5)
    finally:
        for writer in accepted:
            writer.close()
        mute_server.close()
        await mute_server.wait_closed()


async def test_traffic_counts_what_both_sides_moved(make_host: MakeHost) -> None:
    a, b = await make_host(), await make_host()
    a.router.add_raw("test.echo", echo)
    await b.connect(a.addresses[0])
    await b.call_raw(a.peer_id, "test.echo", b"x" * 100_000)
    # b's last frames may still be on their way
    await wait_until(lambda: a.traffic.received == b.traffic.sent)
    # 100 kB each way plus frames: what one side sent the other received
    assert b.traffic.sent >= 100_000
    assert a.traffic.received >= 100_000
    assert a.traffic.sent >= 100_000
    assert b.traffic.received >= 100_000
    assert a.traffic.snapshot() == (a.traffic.sent, a.traffic.received)
    assert b.traffic.sent == a.traffic.received


async def test_a_finished_dial_does_not_answer_the_next_connect(make_host: MakeHost) -> None:
    # A dial that failed stays in the table until its done-callback runs; a connect in between
    # (since Python 3.12 an await need not yield, so this can happen) must dial again.
    a, b = await make_host(), await make_host()

    async def failed() -> Any:
        raise DialError("an earlier attempt failed")

    stale = asyncio.get_running_loop().create_task(failed())
    with pytest.raises(DialError):
        await stale
    b.outbound._dials[a.peer_id] = [_Dial(stale, frozenset(a.addresses))]
    b.add_addresses(a.peer_id, a.addresses)
    conn = await b.connect(a.peer_id)
    assert conn.peer == a.peer_id
    assert (
        a.peer_id not in b.outbound._dials
    )  # the new dial's own entry left with it; the stale one too


async def test_past_the_connection_limit_the_longest_idle_makes_room(make_host: MakeHost) -> None:
    server = await make_host(NetConfig(max_connections=2, close_grace=0.5, handshake_timeout=2.0))
    started = asyncio.Event()
    release = asyncio.Event()

    async def busy(ctx: CallContext, request: Any) -> Any:
        started.set()
        await release.wait()
        return request

    server.router.add_raw("test.echo", echo)
    server.router.add_raw("test.busy", busy)
    first, second, third, fourth = [await make_host() for _ in range(4)]
    await first.call_raw(server.addresses[0], "test.echo", 1)
    await second.call_raw(server.addresses[0], "test.echo", 2)
    # the first has been idle longest: the third peer's connection closes it
    assert await third.call_raw(server.addresses[0], "test.echo", 3) == 3
    await wait_until(lambda: not first.connections(server.peer_id))
    assert {c.peer for c in server.connections()} == {second.peer_id, third.peer_id}
    # while every connection is busy with a call, a newcomer is refused instead
    calls = [
        asyncio.create_task(peer.call_raw(server.peer_id, "test.busy", 0))
        for peer in (second, third)
    ]
    await started.wait()
    await wait_until(lambda: all(c.active_calls for c in server.connections()))
    with pytest.raises((ConnectionClosedError, DialError)):
        await fourth.call_raw(server.addresses[0], "test.echo", 4, timeout=3.0)
    release.set()
    assert await asyncio.gather(*calls) == [0, 0]
    assert len(server.connections()) == 2


async def test_a_call_with_an_address_the_running_dial_lacks_dials_it(make_host: MakeHost) -> None:
    # A dial by PeerID tries only what the peer store knows (here a LAN address that never
    # answers TLS); a caller holding the peer's working address (a relay's, announced later) must
    # not share that dial and fail with its error, never having tried its own address.
    a = await make_host()
    b = await make_host(NetConfig(handshake_timeout=3.0, close_grace=0.2))
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # the kernel accepts; nobody ever answers the TLS handshake
        dead = PeerAddress.tcp("127.0.0.1", silent.getsockname()[1], a.peer_id)
        b.add_addresses(a.peer_id, [dead])
        by_id = asyncio.create_task(b.connect(a.peer_id))
        await wait_until(lambda: a.peer_id in b.outbound._dials)
        conn = await b.connect(a.addresses[0])
        assert conn.peer == a.peer_id
        assert not by_id.done()  # the working address was dialed, not the other dial waited out
        with pytest.raises(NetError):
            await by_id
