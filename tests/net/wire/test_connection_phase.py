"""A Connection's phase and the views read from it (is_usable, closing, is_closed), without sockets.

The connection runs over a fake transport that records what is written and reports the link lost
when it is closed or aborted, as asyncio's transports do.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core.net import NetConfig
from core.net.errors import ConnectionClosedError
from core.net.wire.connection import Connection
from core.net.wire.frames import HEADER, Kind, encode_frame
from core.net.wire.hello import PROTOCOL_VERSION, Hello
from core.net.wire.lifecycle import Phase
from core.net.wire.rpc import Router
from core.trust.identity import Identity
from core.util.msgpack_codec import pack, unpack
from tests.support.leaks import wait_until

CONFIG = NetConfig(handshake_timeout=30.0, close_grace=0.0)


class FakeTransport(asyncio.Transport):
    """Records the bytes written; closing or aborting reports the connection lost on the next turn."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = bytearray()
        self.closed = False
        self.aborted = False
        self.protocol: Connection | None = None

    def write(self, data: Any) -> None:
        self.sent += data

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.sent += data

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self._end()
        self.closed = True

    def abort(self) -> None:
        self._end()
        self.aborted = True

    def _end(self) -> None:
        if not self.is_closing() and self.protocol is not None:
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def frames(self) -> list[tuple[Kind, Any]]:
        """The frames written so far, payloads unpacked."""
        out, view = [], memoryview(bytes(self.sent))
        while view:
            length, kind, _ = HEADER.unpack(view[: HEADER.size])
            payload = view[HEADER.size : HEADER.size + length]
            out.append((Kind(kind), unpack(payload)))
            view = view[HEADER.size + length :]
        return out


def make(*, initiator: bool) -> tuple[Connection, FakeTransport, list[Connection]]:
    closed: list[Connection] = []
    conn = Connection(
        config=CONFIG,
        router=Router(),
        initiator=initiator,
        remote_address=("127.0.0.1", 4001),
        hello=lambda _: Hello(PROTOCOL_VERSION, "test", CONFIG.stream_window_bytes),
        on_hello=lambda _: None,
        on_closed=closed.append,
    )
    transport = FakeTransport()
    transport.protocol = conn
    return conn, transport, closed


def feed(conn: Connection, data: bytes) -> None:
    """Deliver bytes the way a buffered transport does."""
    view = memoryview(data)
    while view:
        buffer = conn.get_buffer(-1)
        n = min(len(buffer), len(view))
        buffer[:n] = view[:n]
        conn.buffer_updated(n)
        view = view[n:]


def peer_hello() -> bytes:
    hello = Hello(PROTOCOL_VERSION, "peer", CONFIG.stream_window_bytes)
    return encode_frame(Kind.HELLO, 0, pack(hello.to_wire()))


def views(conn: Connection) -> tuple[Phase, bool, bool, bool]:
    return conn.phase, conn.is_usable, conn.closing, conn.is_closed


async def test_a_dialers_life_seen_through_its_views() -> None:
    conn, transport, closed = make(initiator=True)
    assert views(conn) == (Phase.HANDSHAKE, False, False, False)

    conn.attach(transport, Identity.generate().peer_id)
    assert views(conn) == (Phase.GREETING, True, False, False)  # it may call before the hello
    assert [kind for kind, _ in transport.frames()] == [Kind.HELLO]

    feed(conn, peer_hello())
    assert views(conn) == (Phase.OPEN, True, False, False)

    feed(conn, encode_frame(Kind.GOAWAY, 0, pack("shutting down")))
    assert views(conn) == (Phase.PEER_LEAVING, False, False, False)
    with pytest.raises(ConnectionClosedError, match="not accepting calls"):
        await conn.call("any.method", None)

    conn.abort("test over")
    assert views(conn) == (Phase.ABORTED, False, True, False)
    assert transport.aborted
    await wait_until(lambda: conn.is_closed)
    assert views(conn) == (Phase.CLOSED, False, True, True)
    assert closed == [conn]
    assert conn.close_reason == "test over"


async def test_the_accepting_side_calls_only_after_the_peers_hello() -> None:
    conn, transport, _ = make(initiator=False)
    conn.attach(transport, Identity.generate().peer_id)
    assert views(conn) == (Phase.GREETING, False, False, False)
    feed(conn, peer_hello())
    assert views(conn) == (Phase.OPEN, True, False, False)
    conn.abort("test over")
    await conn.wait_closed()


async def test_a_graceful_close_says_goodbye_and_refuses_new_calls() -> None:
    conn, transport, closed = make(initiator=True)
    conn.attach(transport, Identity.generate().peer_id)
    feed(conn, peer_hello())
    await conn.close("bye")
    assert views(conn) == (Phase.CLOSED, False, True, True)
    assert transport.closed
    assert not transport.aborted
    assert transport.frames()[-1] == (Kind.GOAWAY, "bye")
    assert closed == [conn]
    with pytest.raises(ConnectionClosedError, match="not accepting calls: bye"):
        await conn.call("any.method", None)


async def test_a_close_before_the_peers_hello_sends_no_goodbye() -> None:
    conn, transport, _ = make(initiator=True)
    conn.attach(transport, Identity.generate().peer_id)
    await conn.close("never mind")
    assert conn.is_closed
    assert [kind for kind, _ in transport.frames()] == [Kind.HELLO]


async def test_a_broken_protocol_drops_the_connection_and_then_input_is_ignored() -> None:
    conn, transport, _ = make(initiator=False)
    conn.attach(transport, Identity.generate().peer_id)
    feed(conn, encode_frame(Kind.GOAWAY, 0, pack("too early")))  # the hello must come first
    assert conn.phase is Phase.ABORTED
    assert conn.close_reason is not None
    assert "expected a hello first" in conn.close_reason
    feed(conn, b"\xff" * 64 + peer_hello())  # garbage, then a hello: neither is read
    assert views(conn) == (Phase.ABORTED, False, True, False)
    assert conn.remote_hello is None
    await conn.wait_closed()
    assert views(conn) == (Phase.CLOSED, False, True, True)


async def test_a_peer_that_breaks_the_protocol_before_it_is_proven_is_dropped_on_attach() -> None:
    conn, transport, _ = make(initiator=False)
    feed(conn, b"\xff" * 16)  # not a frame header of any kind
    assert conn.phase is Phase.ABORTED
    conn.attach(transport, Identity.generate().peer_id)
    assert conn.phase is Phase.ABORTED
    assert transport.aborted
    assert transport.sent == b""  # not even our hello
    await conn.wait_closed()
