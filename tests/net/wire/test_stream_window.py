"""Stream credit: a stream opened before the peer's hello starts with one chunk and widens later."""

from __future__ import annotations

import asyncio

from core.net import NetConfig
from core.net.wire.frames import Kind
from core.net.wire.stream import Stream
from tests.support.leaks import HANG_GUARD, wait_until


class FakeConnection:
    """A ``StreamLink`` (what a Stream needs of its connection) that records what would be sent."""

    def __init__(self, config: NetConfig) -> None:
        self.config = config
        self.sent: list[int] = []

    def write_data(self, call_id: int, data: memoryview) -> None:
        self.sent.append(len(data))

    def write_frame(self, kind: Kind, call_id: int, payload: bytes = b"") -> None:
        pass

    def send_if_open(self, kind: Kind, call_id: int, payload: bytes = b"") -> None:
        pass

    async def drain(self) -> None:
        pass

    async def pace_upload(self, size: int) -> None:
        pass


async def test_provisional_window_then_widen() -> None:
    chunk = 64 * 1024
    conn = FakeConnection(NetConfig(stream_chunk_bytes=chunk, stream_window_bytes=16 * chunk))
    stream = Stream(conn, 1, send_window=chunk)
    sending = asyncio.create_task(stream.send_data(bytes(5 * chunk)))
    await wait_until(lambda: stream._credit_waiter is not None)
    assert conn.sent == [chunk]  # one chunk of credit, then it waits
    assert not sending.done()
    stream.widen(16 * chunk)  # the hello arrived with the real window
    await asyncio.wait_for(sending, HANG_GUARD)
    assert sum(conn.sent) == 5 * chunk
    stream.widen(chunk)  # never narrows
    assert stream._send_window == 16 * chunk
