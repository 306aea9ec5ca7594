"""Pings: round-trip probes on one connection.

A PING frame carries ``PING_BYTES`` random bytes and the peer echoes them in a PONG; the token pairs
each answer with its question, so concurrent pings need no order. A ping of any other size is a
protocol violation: echoing whatever arrives would let a peer make us send its chosen bulk.
"""

from __future__ import annotations

import asyncio
import os

from core.net.errors import DeadlineExceededError, ProtocolViolation
from core.net.wire.frames import Frame, Kind
from core.net.wire.link import Link

PING_BYTES = 8


class Pings:
    def __init__(self, link: Link) -> None:
        self._link = link
        self._waiting: dict[bytes, asyncio.Future[None]] = {}

    async def ping(self, timeout: float) -> float:
        """Round-trip time to the peer in seconds (``DeadlineExceededError`` past ``timeout``)."""
        loop = asyncio.get_running_loop()
        token = os.urandom(PING_BYTES)
        waiter = loop.create_future()
        self._waiting[token] = waiter
        start = loop.time()
        try:
            self._link.write_frame(Kind.PING, 0, token)
            async with asyncio.timeout(timeout):
                await waiter
        except TimeoutError:
            raise DeadlineExceededError(
                f"no pong from {self._link.describe()} in {timeout:g} s"
            ) from None
        finally:
            self._waiting.pop(token, None)
        return loop.time() - start

    def on_ping(self, frame: Frame) -> None:
        if len(frame.payload) != PING_BYTES:
            raise ProtocolViolation(f"a ping carries {PING_BYTES} bytes, not {len(frame.payload)}")
        self._link.send_if_open(Kind.PONG, 0, bytes(frame.payload))

    def on_pong(self, frame: Frame) -> None:
        waiter = self._waiting.pop(bytes(frame.payload), None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def fail_all(self, error: BaseException) -> None:
        """The connection is gone: every ping waiting for its pong fails with ``error``."""
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_exception(error)
        self._waiting.clear()
