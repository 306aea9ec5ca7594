"""Unary calls on real loopback TLS connections."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from core.net import CallContext, Method, NetConfig
from core.net.errors import (
    DeadlineExceededError,
    FrameTooLargeError,
    InvalidRequestError,
    NotFoundError,
    RemoteInternalError,
    ResourceExhaustedError,
    UnknownMethodError,
)
from core.util.wire import WireMessage
from tests.conftest import FAST, MakeHost
from tests.support.leaks import HANG_GUARD, wait_until


@dataclass(frozen=True)
class Ask(WireMessage):
    key: str


@dataclass(frozen=True)
class Answer(WireMessage):
    value: int
    asked_by: str


LOOKUP = Method("test.lookup", Ask, Answer)


async def test_typed_call_sees_the_authenticated_caller(make_host: MakeHost) -> None:
    server, client = await make_host(), await make_host()

    async def lookup(ctx: CallContext, request: Ask) -> Answer:
        if request.key != "answer":
            raise NotFoundError(f"no key {request.key!r}")
        return Answer(42, str(ctx.peer))

    server.router.add(LOOKUP, lookup)
    answer = await client.call(server.addresses[0], LOOKUP, Ask("answer"))
    assert answer == Answer(42, str(client.peer_id))


async def test_remote_errors_arrive_typed_without_tracebacks(make_host: MakeHost) -> None:
    server, client = await make_host(), await make_host()

    async def lookup(ctx: CallContext, request: Ask) -> Answer:
        if request.key == "crash":
            raise ZeroDivisionError("division by zero in the handler")
        raise NotFoundError(f"no key {request.key!r}")

    server.router.add(LOOKUP, lookup)
    with pytest.raises(NotFoundError) as not_found:
        await client.call(server.addresses[0], LOOKUP, Ask("missing"))
    assert not_found.value.remote
    assert not_found.value.peer == server.peer_id
    assert "no key 'missing'" in str(not_found.value)
    with pytest.raises(RemoteInternalError) as crashed:
        await client.call(server.peer_id, LOOKUP, Ask("crash"))
    assert "ZeroDivisionError: division by zero in the handler" in str(crashed.value)
    assert "Traceback" not in str(crashed.value)
    with pytest.raises(UnknownMethodError, match=r"no method named 'test\.nothing'"):
        await client.call_raw(server.peer_id, "test.nothing", None)
    with pytest.raises(InvalidRequestError, match=r"Ask\.key: expected str"):
        await client.call_raw(server.peer_id, LOOKUP.name, [123])
    # the connection survived all of that
    assert len(client.connections(server.peer_id)) == 1


async def test_deadline_fails_the_caller_and_cancels_the_handler(make_host: MakeHost) -> None:
    server, client = await make_host(), await make_host()
    await client.connect(server.addresses[0])
    handler_cancelled = asyncio.Event()

    async def slow(ctx: CallContext, request: Any) -> Any:
        assert ctx.deadline is not None
        try:
            await asyncio.sleep(3600)  # a handler that would never answer in time
        except asyncio.CancelledError:
            handler_cancelled.set()
            raise

    server.router.add_raw("test.slow", slow)
    # the error names the 0.3 s deadline: the caller was not kept waiting for the handler
    with pytest.raises(DeadlineExceededError, match=r"did not finish within 0\.3 s"):
        await client.call_raw(server.peer_id, "test.slow", None, timeout=0.3)
    await asyncio.wait_for(handler_cancelled.wait(), HANG_GUARD)


async def test_a_deadline_missed_after_a_slow_dial_names_the_callers_deadline(
    make_host: MakeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dialing takes part of the deadline (a busy machine, a far peer): the call gets what is
    left, and the error still names the deadline the caller set."""
    server, client = await make_host(), await make_host()
    await client.connect(server.addresses[0])

    async def never(ctx: CallContext, request: Any) -> Any:
        await asyncio.sleep(3600)

    server.router.add_raw("test.never", never)
    connect = client.connect

    async def slow_connect(target: Any) -> Any:
        await asyncio.sleep(0.1)
        return await connect(target)

    monkeypatch.setattr(client, "connect", slow_connect)
    with pytest.raises(DeadlineExceededError, match=r"did not finish within 0\.3 s"):
        await client.call_raw(server.peer_id, "test.never", None, timeout=0.3)


async def test_cancelling_the_caller_cancels_the_remote_handler(make_host: MakeHost) -> None:
    server, client = await make_host(), await make_host()
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def wait_forever(ctx: CallContext, request: Any) -> Any:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    server.router.add_raw("test.wait", wait_forever)
    call = asyncio.create_task(client.call_raw(server.addresses[0], "test.wait", None))
    await asyncio.wait_for(started.wait(), HANG_GUARD)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await asyncio.wait_for(cancelled.wait(), HANG_GUARD)
    # the call slot is freed on both sides
    await wait_until(
        lambda: all(c.active_calls == 0 for c in server.connections() + client.connections())
    )


async def test_many_concurrent_calls_share_one_connection(make_host: MakeHost) -> None:
    server, client = await make_host(), await make_host()

    async def echo(ctx: CallContext, request: Any) -> Any:
        await asyncio.sleep(0.01)  # long enough for the calls to overlap
        return request

    server.router.add_raw("test.echo", echo)
    results = await asyncio.gather(
        *(client.call_raw(server.addresses[0], "test.echo", i) for i in range(200))
    )
    assert results == list(range(200))
    assert len(client.connections()) == 1
    assert len(server.connections()) == 1


async def test_too_many_concurrent_calls_are_refused_as_busy(make_host: MakeHost) -> None:
    server = await make_host(NetConfig(max_concurrent_calls=2, close_grace=0.5))
    client = await make_host()
    release = asyncio.Event()
    holding: list[Any] = []

    async def hold(ctx: CallContext, request: Any) -> Any:
        holding.append(request)
        await release.wait()
        return request

    server.router.add_raw("test.hold", hold)
    held = [
        asyncio.create_task(client.call_raw(server.addresses[0], "test.hold", i)) for i in range(2)
    ]
    await wait_until(lambda: len(holding) == 2)  # both slots are taken
    with pytest.raises(ResourceExhaustedError, match="too many concurrent calls"):
        await client.call_raw(server.peer_id, "test.hold", 3)
    release.set()
    assert await asyncio.gather(*held) == [0, 1]


async def test_oversized_requests_and_responses(make_host: MakeHost) -> None:
    config = NetConfig(max_frame_bytes=128 * 1024, stream_chunk_bytes=64 * 1024, close_grace=0.5)
    server, client = await make_host(config), await make_host(config)

    async def big(ctx: CallContext, request: Any) -> Any:
        return b"x" * 200_000

    async def echo(ctx: CallContext, request: Any) -> Any:
        return request

    server.router.add_raw("test.big", big)
    server.router.add_raw("test.echo", echo)
    with pytest.raises(FrameTooLargeError, match="send large data on a stream"):
        await client.call_raw(server.addresses[0], "test.echo", b"y" * 200_000)
    with pytest.raises(ResourceExhaustedError, match="exceeds the frame limit"):
        await client.call_raw(server.addresses[0], "test.big", None)
    assert await client.call_raw(server.peer_id, "test.echo", b"fits") == b"fits"


async def test_calls_work_in_both_directions_and_ping(make_host: MakeHost) -> None:
    a, b = await make_host(), await make_host()

    async def who(ctx: CallContext, request: Any) -> Any:
        return str(ctx.peer)

    a.router.add_raw("test.who", who)
    b.router.add_raw("test.who", who)
    assert await b.call_raw(a.addresses[0], "test.who", None) == str(b.peer_id)
    # a reuses the inbound connection from b to call back
    assert await a.call_raw(b.peer_id, "test.who", None) == str(a.peer_id)
    assert len(a.connections()) == 1
    rtt = await a.connections()[0].ping()
    assert 0 < rtt < 1.0


async def test_handler_returning_garbage_is_an_error_not_a_crash(make_host: MakeHost) -> None:
    server, client = await make_host(), await make_host()

    async def bad(ctx: CallContext, request: Any) -> Any:
        return object()

    server.router.add_raw("test.bad", bad)
    with pytest.raises(RemoteInternalError, match="cannot be sent"):
        await client.call_raw(server.addresses[0], "test.bad", None)


def test_fast_config_is_used() -> None:
    assert FAST.handshake_timeout < NetConfig().handshake_timeout
