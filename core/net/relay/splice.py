"""Splice: the relay's half of a circuit, joining the source's stream to the target's.

Each direction has its own pump task, so a slow reader on one circuit holds back only that circuit
(and only that direction). A pump reads the next chunk from one stream only after the other stream
took the previous one, so each direction holds at most one stream window plus one chunk in memory:
credit flow control, not buffering, absorbs the speed difference.

Flow control bounds the memory, not the time: a side that never reads, or two sides that send
nothing, would keep their circuit's slot (and its windows' worth of memory) until the circuit's
time limit. So a circuit on which nothing moved for ``circuit_idle_seconds`` ends, and so does one
whose next bytes for a side wait longer than ``stall_seconds`` for that side to take them.

The splice ends on the first of: either side ending or failing, a byte or time limit, silence or a
stall, or the relay closing. It then tells both sides why (a last ``CircuitEnd`` message, then the
end of the stream).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from core.net.errors import RpcError
from core.net.relay.messages import CircuitEnd, RelayStatus
from core.net.wire.stream import EndOfStream, Stream, StreamUsageError
from core.util.tasks import BackgroundTasks

if TYPE_CHECKING:
    from core.net.relay.limits import RelayLimits
    from core.net.wire.connection import CallStream
    from core.trust.peer_id import PeerID

log = logging.getLogger(__name__)

NOTIFY_GRACE = 1.0
"""Seconds the relay spends telling each side why a circuit ended before it just drops it."""


class Splice:
    """Pumps raw bytes between ``source`` (who asked) and ``target``, within the relay's limits."""

    def __init__(
        self,
        number: int,
        *,
        source: tuple[PeerID, Stream],
        target: tuple[PeerID, CallStream],
        limits: RelayLimits,
    ) -> None:
        self.number = number
        self.source, self._source_stream = source
        self.target, self._target_stream = target
        self._limits = limits
        self.carried = [0, 0]
        """Bytes forwarded source to target, and target to source."""
        self._in_hand = [0, 0]
        """Bytes of each direction read from one side and not yet taken by the other."""
        self._moved = asyncio.get_running_loop().time()
        """Loop time when bytes last arrived from a side or were taken by one."""
        self._tasks = BackgroundTasks(f"relay-circuit-{number}")
        self._end: asyncio.Future[CircuitEnd] = asyncio.get_running_loop().create_future()

    def __repr__(self) -> str:
        return f"<Splice #{self.number} {self.source.short()} -> {self.target.short()}>"

    @property
    def buffered(self) -> int:
        """Bytes the relay holds for this circuit: received from one side, not yet taken by the other."""
        queued = self._source_stream.queued_bytes + self._target_stream.queued_bytes
        return queued + sum(self._in_hand)

    def stop(self, status: RelayStatus, reason: str) -> None:
        """End the circuit (the first reason given wins)."""
        if not self._end.done():
            self._end.set_result(CircuitEnd(status, reason, self.carried[0], self.carried[1]))

    def forward(self, chunk: memoryview, direction: int) -> memoryview:
        """What the relay passes on for ``chunk``: the chunk itself (a test plays a tampering relay)."""
        return chunk

    async def run(self) -> CircuitEnd:
        """Pump until the circuit ends; tell both sides why; the outcome."""
        loop = asyncio.get_running_loop()
        a, b = self._source_stream, self._target_stream
        src, dst = self.source.short(), self.target.short()
        self._tasks.spawn("to-target", self._pump(a, b, 0, src, dst))
        self._tasks.spawn("to-source", self._pump(b, a, 1, dst, src))
        self._tasks.spawn("idle", self._end_when_idle())
        seconds = self._limits.circuit_seconds
        timer = loop.call_later(
            seconds,
            self.stop,
            RelayStatus.TIME_LIMIT,
            f"the circuit reached the relay's time limit of {seconds:g} s",
        )
        try:
            end = await asyncio.shield(self._end)
        except asyncio.CancelledError:
            # the source's call was cancelled (its link to us died, or we are closing)
            self.stop(RelayStatus.CLOSED, f"{src}'s link to the relay closed")
            raise
        finally:
            timer.cancel()
            await self._tasks.close()
            end = self._end.result()
            await self._tell(end)
        log.info("%r ended: %s (%d and %d bytes)", self, end.reason, *self.carried)
        return end

    async def _tell(self, end: CircuitEnd) -> None:
        """The last word to both sides: why, then the end of the stream (best effort)."""
        for stream in (self._source_stream, self._target_stream):
            with contextlib.suppress(RpcError, TimeoutError):
                async with asyncio.timeout(NOTIFY_GRACE):
                    await stream.send(end.to_wire())
                stream.end()
        target = self._target_stream
        if not target.done:  # let the target's handler finish on its own, then stop waiting
            with contextlib.suppress(RpcError, TimeoutError):
                async with asyncio.timeout(NOTIFY_GRACE):
                    await target.result()
            if not target.done:
                target.cancel()

    async def _end_when_idle(self) -> None:
        loop = asyncio.get_running_loop()
        idle = self._limits.circuit_idle_seconds
        while True:
            wait = self._moved + idle - loop.time()
            if wait <= 0:
                if not any(self._in_hand):
                    self.stop(RelayStatus.TIME_LIMIT, f"nothing crossed the circuit for {idle:g} s")
                    return
                wait = idle  # bytes wait for a side: ``stall_seconds`` ends that
            await asyncio.sleep(wait)

    async def _pump(self, reader: Stream, writer: Stream, way: int, src: str, dst: str) -> None:
        loop = asyncio.get_running_loop()
        limit = self._limits.circuit_bytes
        stall = self._limits.stall_seconds
        while True:
            try:
                chunk = await reader.recv_data()
            except EndOfStream:
                self.stop(RelayStatus.CLOSED, f"{src} closed the circuit")
                return
            except StreamUsageError:
                self.stop(RelayStatus.MALFORMED, f"{src} sent a message on an open circuit")
                return
            except RpcError as exc:
                self.stop(RelayStatus.CLOSED, f"{src} left: {exc}")
                return
            if self.carried[way] + len(chunk) > limit:
                self.stop(
                    RelayStatus.BYTE_LIMIT,
                    f"the circuit reached the relay's limit of {limit} bytes from {src}",
                )
                return
            self.carried[way] += len(chunk)
            self._in_hand[way] = len(chunk)
            self._moved = loop.time()
            try:
                async with asyncio.timeout(stall):
                    await writer.send_data(self.forward(chunk, way))
            except RpcError as exc:
                self.stop(RelayStatus.CLOSED, f"{dst} left: {exc}")
                return
            except TimeoutError:
                self.stop(
                    RelayStatus.TIME_LIMIT,
                    f"{dst} did not take {len(chunk)} bytes within {stall:g} s",
                )
                return
            finally:
                self._in_hand[way] = 0  # passed on, or dropped with the circuit
            self._moved = loop.time()
