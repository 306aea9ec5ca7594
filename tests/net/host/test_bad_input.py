"""Hostile or broken peers: each one loses its own connection, with a logged reason, and nothing else."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from core.net import CallContext, Host, Identity, NetConfig
from core.net.config import MiB
from core.net.host.certificate import identity_proof
from core.net.wire.frames import HEADER, Kind, encode_frame
from core.util.msgpack_codec import pack
from tests.conftest import MakeHost
from tests.support.leaks import wait_until
from tests.support.rawpeer import close_writer, connect_tls, hello_frame, read_until_closed

# Handshakes get 3 s: a loopback TLS handshake is milliseconds of work, but on a 2-core machine beside
# busy loops the bystander's own handshake once took longer than 0.5 s.
QUICK = NetConfig(handshake_timeout=3.0, dial_timeout=6.0, close_grace=0.5, max_frame_bytes=1 * MiB)


async def echo(ctx: CallContext, request: Any) -> Any:
    return request


async def server_and_bystander(make_host: MakeHost) -> tuple[Host, Host]:
    """A server with a healthy client connected, to prove the server keeps serving it."""
    server, bystander = await make_host(QUICK), await make_host(QUICK)
    server.router.add_raw("test.echo", echo)
    assert await bystander.call_raw(server.addresses[0], "test.echo", "before") == "before"
    return server, bystander


async def still_serving(server: Host, bystander: Host) -> None:
    assert await bystander.call_raw(server.peer_id, "test.echo", "after") == "after"
    assert len(bystander.connections(server.peer_id)) == 1  # the same connection as before


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"\xff" * 64, "unknown frame kind 255"),
        (hello_frame() + HEADER.pack(4 * MiB, Kind.MSG, 1), "exceeds the limit"),
        (hello_frame() + encode_frame(Kind.OPEN, 1, b"\xc1\xc1"), "malformed msgpack"),
        (hello_frame() + encode_frame(Kind.OPEN, 1, pack(["test.echo"])), "malformed OPEN"),
        (hello_frame() + encode_frame(Kind.OPEN, 2, pack(["test.echo", 1, 0, 1])), "call id 2"),
        (encode_frame(Kind.OPEN, 1, pack(["test.echo", 1, 0, 1])), "expected a hello first"),
        (hello_frame(protocol=99), "speaks protocol 99"),
        (hello_frame() + hello_frame(), "a second hello"),
        (hello_frame() + encode_frame(Kind.CREDIT, 0, pack(-5)), ""),
    ],
    ids=[
        "garbage",
        "oversized",
        "bad-msgpack",
        "short-open",
        "wrong-parity",
        "no-hello",
        "old-protocol",
        "two-hellos",
        "stray-credit",
    ],
)
async def test_malformed_frames_close_only_that_connection(
    make_host: MakeHost, caplog: pytest.LogCaptureFixture, payload: bytes, reason: str
) -> None:
    server, bystander = await server_and_bystander(make_host)
    reader, writer = await connect_tls(server)
    with caplog.at_level(logging.INFO, logger="core.net"):
        writer.write(payload)
        if reason:
            await read_until_closed(reader)
            assert reason in caplog.text
        else:  # a credit for a call that does not exist is ignored, not fatal
            writer.write(encode_frame(Kind.PING, 0, b"12345678"))
            assert b"12345678" in await reader.read(65536)
    await close_writer(writer)
    await still_serving(server, bystander)


async def test_unknown_method_keeps_the_connection(make_host: MakeHost) -> None:
    from core.net.errors import UnknownMethodError

    server, bystander = await server_and_bystander(make_host)
    with pytest.raises(UnknownMethodError):
        await bystander.call_raw(server.peer_id, "no.such.method", None)
    await still_serving(server, bystander)


async def test_forged_identity_is_refused(
    make_host: MakeHost, caplog: pytest.LogCaptureFixture
) -> None:
    server, bystander = await server_and_bystander(make_host)
    victim, attacker = Identity.generate(), Identity.generate()
    proof = identity_proof(attacker, b"whatever")
    forged = proof[:5] + victim.public_key_bytes + proof[5 + 32 :]  # claims to be the victim
    with caplog.at_level(logging.INFO, logger="core.net"):
        reader, writer = await connect_tls(server, attacker, proof=forged)
        writer.write(hello_frame())
        await read_until_closed(reader)
    assert "identity check failed" in caplog.text
    assert all(conn.peer != victim.peer_id for conn in server.connections())
    await close_writer(writer)
    await still_serving(server, bystander)


@pytest.mark.parametrize(
    "sends", [b"", b"GET / HTTP/1.1\r\nHost: example\r\n\r\n"], ids=["silent", "plaintext"]
)
async def test_peers_that_never_complete_tls_are_dropped(
    make_host: MakeHost, caplog: pytest.LogCaptureFixture, sends: bytes
) -> None:
    """A peer that connects and sends nothing (dropped at the handshake timeout) or plain text."""
    server, bystander = await server_and_bystander(make_host)
    address = server.addresses[0]
    assert address.host is not None
    assert address.port is not None
    with caplog.at_level(logging.WARNING, logger="core.net"):
        reader, writer = await asyncio.open_connection(address.host, address.port)
        writer.write(sends)
        assert await read_until_closed(reader, timeout=10.0) == b""
    assert "TLS handshake failed" in caplog.text
    await close_writer(writer)
    await still_serving(server, bystander)


async def test_peer_silent_after_tls_is_dropped(
    make_host: MakeHost, caplog: pytest.LogCaptureFixture
) -> None:
    server, bystander = await server_and_bystander(make_host)
    with caplog.at_level(logging.WARNING, logger="core.net"):
        reader, writer = await connect_tls(server)
        # the server's hello, then nothing, then close
        await read_until_closed(reader, timeout=10.0)
    assert "no hello within 3 s" in caplog.text
    await close_writer(writer)
    await still_serving(server, bystander)


async def test_stream_window_violations_close_the_connection(
    make_host: MakeHost, caplog: pytest.LogCaptureFixture
) -> None:
    server, bystander = await server_and_bystander(make_host)
    opened = asyncio.Event()

    async def idle_stream(ctx: CallContext, request: Any, stream: Any) -> Any:
        opened.set()
        await asyncio.sleep(30)

    server.router.add_raw_stream("test.idle", idle_stream)
    reader, writer = await connect_tls(server)
    writer.write(hello_frame() + encode_frame(Kind.OPEN, 1, pack(["test.idle", 10, 1, None])))
    await asyncio.wait_for(opened.wait(), 3)
    chunk = encode_frame(Kind.DATA, 1, bytes(512 * 1024))
    with caplog.at_level(logging.WARNING, logger="core.net"):
        for _ in range(40):  # 20 MiB into a 16 MiB window that was never extended
            writer.write(chunk)
        await read_until_closed(reader, timeout=5.0)
    assert "more stream data than its window allows" in caplog.text
    await close_writer(writer)
    await still_serving(server, bystander)


async def test_a_peer_that_never_reads_its_replies_is_dropped(
    make_host: MakeHost, caplog: pytest.LogCaptureFixture
) -> None:
    config = NetConfig(
        max_unsent_bytes=4 * MiB,
        stream_chunk_bytes=256 * 1024,
        handshake_timeout=2.0,
        close_grace=0.5,
    )
    server, bystander = await make_host(config), await make_host(config)

    async def big(ctx: CallContext, request: Any) -> Any:
        return bytes(1024 * 1024)

    async def echo_(ctx: CallContext, request: Any) -> Any:
        return request

    server.router.add_raw("test.big", big)
    server.router.add_raw("test.echo", echo_)
    assert await bystander.call_raw(server.addresses[0], "test.echo", 1) == 1
    _, writer = await connect_tls(server)
    with caplog.at_level(logging.WARNING, logger="core.net"):
        writer.write(hello_frame())
        for call_id in range(1, 400, 2):  # 200 MB of replies requested, none read
            writer.write(encode_frame(Kind.OPEN, call_id, pack(["test.big", 10, 0, None])))
        await writer.drain()
        await wait_until(lambda: "the peer is not reading" in caplog.text, timeout=10)
    writer.transport.abort()
    await still_serving(server, bystander)


async def test_oversized_ping_is_a_violation(
    make_host: MakeHost, caplog: pytest.LogCaptureFixture
) -> None:
    server, bystander = await server_and_bystander(make_host)
    reader, writer = await connect_tls(server)
    with caplog.at_level(logging.WARNING, logger="core.net"):
        writer.write(hello_frame() + encode_frame(Kind.PING, 0, bytes(100_000)))
        await read_until_closed(reader)
    assert "a ping carries 8 bytes" in caplog.text
    await close_writer(writer)
    await still_serving(server, bystander)


async def test_a_silent_connection_costs_no_tls_until_it_speaks(make_host: MakeHost) -> None:
    """A dialer that connects and says nothing waits before TLS; one that hangs up is let go."""
    server, bystander = await server_and_bystander(make_host)
    address = server.addresses[0]
    assert address.host is not None
    assert address.port is not None
    started = server.inbound.admission.pending
    _, writer = await asyncio.open_connection(address.host, address.port)
    await wait_until(lambda: server.inbound.admission.pending == started + 1)
    assert not any("accept-" in task.get_name() for task in asyncio.all_tasks())
    await close_writer(writer)
    await wait_until(lambda: server.inbound.admission.pending == started)
    await still_serving(server, bystander)
