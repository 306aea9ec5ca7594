"""Streaming calls: integrity of large tensors, flow control, ends and failures."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from core.net import CallContext, EndOfStream, NetConfig, Stream, StreamMethod
from core.net.config import MiB
from core.net.errors import DeadlineExceededError, StreamClosedError
from core.net.wire.stream import StreamUsageError
from core.util.wire import WireMessage
from tests.conftest import MakeHost
from tests.support.leaks import HANG_GUARD, wait_until


@dataclass(frozen=True)
class Upload(WireMessage):
    numel: int


@dataclass(frozen=True)
class Received(WireMessage):
    checksum: float
    first: float
    last: float


UPLOAD = StreamMethod("test.upload", Upload, Received)


async def test_a_large_tensor_arrives_intact_and_lands_in_place(make_host: MakeHost) -> None:
    server, client = await make_host(), await make_host()
    numel = 16 * 1024 * 1024  # 64 MB of float32
    destination = torch.empty(numel, dtype=torch.float32)

    async def upload(ctx: CallContext, request: Upload, stream: Stream) -> Received:
        await stream.recv_data_into(destination.numpy())
        return Received(
            float(destination.double().sum()), float(destination[0]), float(destination[-1])
        )

    server.router.add_stream(UPLOAD, upload)
    tensor = torch.randn(numel, generator=torch.Generator().manual_seed(3))
    async with client.open_stream(server.addresses[0], UPLOAD, Upload(numel)) as call:
        await call.stream.send_data(tensor.numpy())
        result = await call.result()
    assert torch.equal(destination, tensor)
    assert result.first == float(tensor[0])
    assert result.checksum == pytest.approx(float(tensor.double().sum()))


async def test_download_and_messages_in_order(make_host: MakeHost) -> None:
    server, client = await make_host(), await make_host()
    blob = torch.arange(3 * MiB, dtype=torch.int32)

    async def download(ctx: CallContext, request: Any, stream: Stream) -> Any:
        await stream.send({"shape": list(blob.shape), "dtype": "int32"})
        await stream.send_data(blob.numpy())
        await stream.send("done")
        stream.end()
        return "served"

    server.router.add_raw_stream("test.download", download)
    conn = await client.connect(server.addresses[0])
    stream = conn.open_stream("test.download", None)
    header = await stream.recv_message()
    assert header == {"shape": [3 * MiB], "dtype": "int32"}
    received = torch.empty(header["shape"], dtype=torch.int32)
    with pytest.raises(StreamUsageError, match="raw data came next"):
        await stream.recv_message()
    await stream.recv_data_into(received.numpy())
    assert torch.equal(received, blob)
    assert await stream.recv_message() == "done"
    with pytest.raises(EndOfStream):
        await stream.recv_message()
    assert await stream.result() == "served"


async def test_data_lands_in_the_buffers_the_reader_lends(make_host: MakeHost) -> None:
    server, client = await make_host(), await make_host()
    blob = torch.arange(3 * MiB, dtype=torch.int32)  # 12 MiB: twelve frames of one stream chunk
    frame = NetConfig().stream_chunk_bytes

    async def download(ctx: CallContext, request: Any, stream: Stream) -> Any:
        await stream.send_data(blob.numpy())
        stream.end()
        return "served"

    server.router.add_raw_stream("test.download", download)
    conn = await client.connect(server.addresses[0])
    stream = conn.open_stream("test.download", None)
    lent: list[memoryview] = []
    asked: list[int] = []

    def lend(length: int) -> memoryview | None:
        asked.append(length)
        if len(asked) % 3 == 0:
            return None  # declined: that frame lands in the connection's own buffer
        lent.append(memoryview(bytearray(length)))
        return lent[-1]

    stream.lend_buffers(lend)  # before any data can have arrived: nothing was awaited since open
    pieces = []
    received = 0
    while received < blob.numel() * 4:
        pieces.append(await stream.recv_data())
        received += len(pieces[-1])
    assert asked == [frame] * 12
    assert [any(p is view for view in lent) for p in pieces] == [True, True, False] * 4
    assert b"".join(pieces) == blob.numpy().tobytes()
    with pytest.raises(EndOfStream):
        await stream.recv_data()
    assert await stream.result() == "served"


async def test_slow_reader_holds_the_sender_back(make_host: MakeHost) -> None:
    config = NetConfig(
        stream_chunk_bytes=64 * 1024, stream_window_bytes=256 * 1024, close_grace=0.5
    )
    server, client = await make_host(config), await make_host(config)
    may_read = asyncio.Event()
    buffered: list[int] = []

    async def lazy(ctx: CallContext, request: Any, stream: Stream) -> Any:
        await may_read.wait()
        buffered.append(stream._inbox_bytes)
        total = 0
        while True:
            try:
                total += len(await stream.recv_data())
            except EndOfStream:
                return total

    server.router.add_raw_stream("test.lazy", lazy)
    conn = await client.connect(server.addresses[0])
    stream = conn.open_stream("test.lazy", None)
    payload = bytes(8 * MiB)
    sending = asyncio.create_task(stream.send_data(payload))
    await wait_until(lambda: stream._credit_waiter is not None)  # out of credit, it waits
    assert not sending.done(), "8 MiB went out although the peer only granted 256 KiB"
    may_read.set()
    await asyncio.wait_for(sending, HANG_GUARD)
    stream.end()
    assert await stream.result() == len(payload)
    assert buffered[0] <= 256 * 1024 + 64 * 1024


async def test_short_stream_and_early_handler_exit(make_host: MakeHost) -> None:
    server, client = await make_host(), await make_host()

    async def partial(ctx: CallContext, request: Any, stream: Stream) -> Any:
        await stream.send_data(b"abc")
        stream.end()
        return None

    async def quits(ctx: CallContext, request: Any, stream: Stream) -> Any:
        return "bye"

    server.router.add_raw_stream("test.partial", partial)
    server.router.add_raw_stream("test.quits", quits)
    conn = await client.connect(server.addresses[0])
    stream = conn.open_stream("test.partial", None)
    with pytest.raises(StreamUsageError, match="ended after 3 of 10"):
        await stream.recv_data_into(bytearray(10))
    quitter = conn.open_stream("test.quits", None)
    assert await quitter.result() == "bye"
    with pytest.raises(StreamClosedError):
        await quitter.send_data(bytes(4 * MiB))


async def test_leaving_the_block_cancels_the_remote_handler(make_host: MakeHost) -> None:
    server, client = await make_host(), await make_host()
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def reader(ctx: CallContext, request: Upload, stream: Stream) -> Received:
        started.set()
        try:
            await stream.recv_data_into(bytearray(request.numel))
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return Received(0.0, 0.0, 0.0)

    server.router.add_stream(UPLOAD, reader)
    async with client.open_stream(server.addresses[0], UPLOAD, Upload(10 * MiB)) as call:
        await call.stream.send_data(bytes(1024))
        await asyncio.wait_for(started.wait(), HANG_GUARD)
    await asyncio.wait_for(cancelled.wait(), HANG_GUARD)


async def test_cancel_before_the_handler_starts_frees_the_call(make_host: MakeHost) -> None:
    server, client = await make_host(), await make_host()
    ran = asyncio.Event()

    async def never(ctx: CallContext, request: Any, stream: Stream) -> Any:
        ran.set()

    async def echo(ctx: CallContext, request: Any) -> Any:
        return request

    server.router.add_raw_stream("test.never", never)
    server.router.add_raw("test.echo", echo)
    conn = await client.connect(server.addresses[0])
    stream = conn.open_stream("test.never", None)
    stream.cancel()  # OPEN and CANCEL leave in one write, before the handler task can start
    # a call behind them on the same connection: once it is answered, the server has read both
    assert await client.call_raw(server.peer_id, "test.echo", 1) == 1
    assert client.connections(server.peer_id) == [conn]
    await wait_until(lambda: all(c.active_calls == 0 for c in server.connections()))


async def test_unary_and_stream_methods_are_not_confused(make_host: MakeHost) -> None:
    from core.net.errors import InvalidRequestError

    server, client = await make_host(), await make_host()

    async def unary(ctx: CallContext, request: Any) -> Any:
        return 1

    server.router.add_raw("test.unary", unary)
    conn = await client.connect(server.addresses[0])
    with pytest.raises(InvalidRequestError, match="is a unary method"):
        await conn.open_stream("test.unary", None).result()


async def test_a_stream_whose_deadline_passes_after_a_slow_dial_names_the_callers_deadline(
    make_host: MakeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a unary call (``test_rpc``): dialing takes part of the deadline, the stream gets what is
    left, and the error names the deadline the caller set."""
    server, client = await make_host(), await make_host()
    await client.connect(server.addresses[0])

    async def never(ctx: CallContext, request: Upload, stream: Stream) -> Received:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    server.router.add_stream(UPLOAD, never)
    connect = client.connect

    async def slow_connect(target: Any) -> Any:
        await asyncio.sleep(0.1)
        return await connect(target)

    monkeypatch.setattr(client, "connect", slow_connect)
    async with client.open_stream(server.peer_id, UPLOAD, Upload(1), timeout=0.3) as call:
        with pytest.raises(DeadlineExceededError, match=r"did not finish within 0\.3 s"):
            await call.result()
