"""Circuit: our end of a relayed circuit, turned into a socket that TLS can run over.

The relay joins two peers' streams; each peer runs TLS end to end over its stream, so the relay
carries ciphertext it can neither read nor forge. ``loop.start_tls`` only accepts asyncio's own
socket transports, so the stream is bridged to one end of a ``socket.socketpair()``: asyncio owns
the other end as an ordinary transport (the Host runs TLS over it as over any TCP connection), and
two pump tasks copy bytes between our end and the stream. Socket pairs exist on every platform
(Windows emulates them over loopback TCP).

Memory stays bounded both ways: the pump writes into the socket only as fast as TLS reads it, and
reads the next chunk from the stream (granting the relay credit) only after that, while the stream's
credit window holds back what we send.

End of stream maps both ways: when TLS closes its socket, the stream is ended; when the relay ends
the circuit (with a last ``CircuitEnd`` message giving the reason) or its link fails, our socket end
is closed and the connection over it is aborted with that reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import TYPE_CHECKING

from core.net.errors import RpcError
from core.net.relay.messages import CircuitEnd
from core.net.wire.calls_out import CallStream
from core.net.wire.stream import EndOfStream, Stream, StreamUsageError
from core.util.errors import WireFormatError
from core.util.tasks import BackgroundTasks

if TYPE_CHECKING:
    from core.net.wire.connection import Connection
    from core.trust.peer_id import PeerID

log = logging.getLogger(__name__)

READ_BYTES = 256 * 1024
"""Bytes read from the socket at once: large enough that per-read work is negligible."""
RESULT_GRACE = 2.0
"""Seconds the dialing side waits for the relay's final answer after the circuit ended."""


class _Held(asyncio.Protocol):
    """Holds our socket end, not reading, until ``start_tls`` takes the transport over."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()  # the ClientHello must wait in the socket for start_tls


class Circuit:
    """One peer's end of a circuit through ``relay`` to ``peer``."""

    def __init__(self, stream: Stream, *, relay: PeerID, peer: PeerID) -> None:
        self.stream = stream
        self.relay = relay
        self.peer = peer
        """The peer at the other end, as the relay named it (TLS proves who it really is)."""
        self.connection: Connection | None = None
        """The connection running over this circuit, once the Host registered it."""
        self.reason: str | None = None
        """Why the circuit ended, once it did."""
        self._tasks = BackgroundTasks(f"circuit-{relay.short()}-{peer.short()}")
        self._sock: socket.socket | None = None
        self._closed = asyncio.Event()
        self._local_close = False

    def __repr__(self) -> str:
        return f"<Circuit to {self.peer.short()} via {self.relay.short()}>"

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def open(self, *, dialing: bool) -> asyncio.Transport:
        """Bridge the stream to a new socket transport, for ``secure_outbound``/``accept_transport``."""
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        try:
            ours.setblocking(False)
            theirs.setblocking(False)
            if dialing:
                transport, _ = await loop.create_connection(_Held, sock=theirs)
            else:
                transport, _ = await loop.connect_accepted_socket(_Held, sock=theirs)
        except BaseException:
            ours.close()
            theirs.close()
            self._closed.set()
            raise
        assert isinstance(transport, asyncio.Transport)
        self._sock = ours
        self._tasks.spawn("run", self._run())
        return transport

    async def wait_closed(self) -> str:
        """Wait until the circuit ended; the reason."""
        await self._closed.wait()
        return self.reason or "closed"

    async def close(self, reason: str) -> None:
        """End the circuit from our side (the connection over it breaks)."""
        self._note(reason)
        await self._tasks.close()
        self._closed.set()

    def _note(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason

    # ---- pumping ---------------------------------------------------------------------------------

    async def _run(self) -> None:
        sock = self._sock
        assert sock is not None
        up = asyncio.create_task(self._to_relay(sock), name=f"{self._tasks.owner}/to-relay")
        down = asyncio.create_task(self._from_relay(sock), name=f"{self._tasks.owner}/from-relay")
        try:
            await asyncio.wait((up, down), return_when=asyncio.FIRST_COMPLETED)
            if self._local_close and not down.done():
                # our TLS closed its socket: let the relay's answer (its END) arrive before we go
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(down), RESULT_GRACE)
        finally:
            for task in (up, down):
                task.cancel()
            await asyncio.wait((up, down))
            for task in (up, down):
                if not task.cancelled() and task.exception() is not None:
                    log.warning("%r: pump failed", self, exc_info=task.exception())
            sock.close()
            self._note("the circuit was closed")
            conn = self.connection
            if conn is not None and not conn.is_closed and not self._local_close:
                conn.abort(f"the relay circuit ended: {self.reason}", level=logging.INFO)
            await self._finish_call()
            self._closed.set()
            log.debug("%r ended: %s", self, self.reason)

    async def _finish_call(self) -> None:
        stream = self.stream
        if not isinstance(stream, CallStream) or stream.done:
            return
        self._end_stream()
        try:
            async with asyncio.timeout(RESULT_GRACE):
                end = await stream.result()
            with contextlib.suppress(WireFormatError):
                self._note(CircuitEnd.from_wire(end).reason)
        except (RpcError, TimeoutError):
            pass
        finally:
            if not stream.done:
                stream.cancel()

    async def _to_relay(self, sock: socket.socket) -> None:
        """Our TLS's bytes, from the socket to the relay."""
        loop = asyncio.get_running_loop()
        buffer = bytearray(READ_BYTES)
        view = memoryview(buffer)
        while True:
            try:
                n = await loop.sock_recv_into(sock, buffer)
            except OSError as exc:
                self._local_close = True
                self._note(f"our end closed: {exc}")
                self._end_stream()
                return
            if not n:
                self._local_close = True
                self._note("we closed the circuit")
                self._end_stream()
                return
            try:
                # send_data has encrypted and handed off the bytes when it returns: the buffer is free
                await self.stream.send_data(view[:n])
            except RpcError as exc:
                self._note(f"the link to the relay failed: {exc}")
                return

    def _end_stream(self) -> None:
        with contextlib.suppress(RpcError):  # the link is gone already: nothing left to tell
            self.stream.end()

    async def _from_relay(self, sock: socket.socket) -> None:
        """The other peer's bytes, from the relay to the socket."""
        loop = asyncio.get_running_loop()
        stream = self.stream
        while True:
            try:
                chunk = await stream.recv_data()
            except EndOfStream:
                self._note("the relay ended the circuit")
                return
            except StreamUsageError:
                self._last_word(await stream.recv_message())
                continue
            except RpcError as exc:
                self._note(f"the link to the relay failed: {exc}")
                return
            try:
                await loop.sock_sendall(sock, chunk)
            except OSError as exc:
                self._local_close = True
                self._note(f"our end closed: {exc}")
                return

    def _last_word(self, message: object) -> None:
        """The relay's message on an open circuit: the reason it is about to end it."""
        try:
            end = CircuitEnd.from_wire(message)
        except WireFormatError:
            self._note("the relay sent a malformed message on the circuit")
            return
        self._note(end.reason)
