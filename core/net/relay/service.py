"""RelayService: a public peer relays circuits for peers that cannot be dialed.

A peer behind a home router reserves a slot (``relay.reserve``) over a direct connection it keeps
open to us. Anyone may then ask us to join them to it (``relay.connect``): we offer the circuit to
the reserved peer over its connection (``relay.incoming``), and when it accepts we pump bytes
between the two streams (``relay_splice``). The two peers run TLS end to end over the circuit, so we
carry ciphertext only: a relay that alters a byte breaks the connection, and it can impersonate
nobody. Everything we hand out is bounded by ``RelayLimits``; relayed bytes cross our own
connections, so they count in the Host's ``Traffic`` and obey its bandwidth limits.

Relays are never chained: requests arriving over a relayed connection are refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from dataclasses import dataclass

from core.net.errors import RpcError, StreamClosedError
from core.net.host.admission import network_prefix
from core.net.host.host import Host
from core.net.relay.limits import RelayLimits
from core.net.relay.messages import (
    CONNECT,
    INCOMING,
    OFFER,
    RESERVE,
    CircuitAccepted,
    CircuitEnd,
    ConnectRequest,
    IncomingCircuit,
    RelayRefused,
    RelayStatus,
    ReserveRequest,
    ReserveResponse,
    terms_to_offer,
)
from core.net.relay.reservations import Reservation, Reservations
from core.net.relay.splice import Splice
from core.net.wire.connection import CallStream, Connection
from core.net.wire.rpc import CallContext
from core.net.wire.stream import EndOfStream, Stream, StreamUsageError
from core.trust.peer_id import PeerID
from core.util.errors import WireFormatError
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)

INCOMING_MARGIN = 60.0
"""Seconds added to the circuit limit for the deadline of our ``relay.incoming`` call: the limit,
not the deadline, ends circuits."""


@dataclass(slots=True)
class _Circuit:
    source: PeerID
    target: PeerID
    source_ip: str
    source_prefix: str
    splice: Splice | None = None


class RelayService:
    """Serves ``relay.reserve`` and ``relay.connect`` on ``host`` within ``limits``."""

    def __init__(self, host: Host, limits: RelayLimits | None = None) -> None:
        self.host = host
        self.limits = limits or RelayLimits()
        self.reservations = Reservations(self.limits)
        self._circuits: dict[int, _Circuit] = {}
        self._numbers = itertools.count(1)
        self._tasks = BackgroundTasks(f"relay-{host.peer_id.short()}")
        self._stopping: asyncio.Future[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def circuits(self) -> int:
        """Circuits being set up or relayed now."""
        return len(self._circuits)

    @property
    def buffered(self) -> int:
        """Bytes held for circuits now: received from one side, not yet taken by the other."""
        return sum(c.splice.buffered for c in self._circuits.values() if c.splice is not None)

    def start(self) -> None:
        self._stopping = asyncio.get_running_loop().create_future()
        self.host.router.add(RESERVE, self._on_reserve)
        self.host.router.add_stream(CONNECT, self._on_connect)
        self.host.offer(OFFER, terms_to_offer(self.limits.terms))

    async def close(self) -> None:
        """Refuse new work, end every circuit with the reason, and wait until they are gone."""
        if self._stopping is None or self._stopping.done():
            return
        self._stopping.set_result(None)
        self.host.withdraw(OFFER)
        self.host.router.remove(RESERVE.name)
        self.host.router.remove(CONNECT.name)
        for circuit in self._circuits.values():
            if circuit.splice is not None:
                circuit.splice.stop(RelayStatus.RELAY_CLOSING, "the relay is shutting down")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.host.config.close_grace + 2.0):
                await self._idle.wait()
        await self._tasks.close()
        self.reservations.clear()

    @property
    def _closing(self) -> bool:
        return self._stopping is None or self._stopping.done()

    # ---- reservations ----------------------------------------------------------------------------

    async def _on_reserve(self, ctx: CallContext, request: ReserveRequest) -> ReserveResponse:
        try:
            conn = self._direct(ctx)
            if self._closing:
                raise RelayRefused(RelayStatus.RELAY_CLOSING, "the relay is shutting down")
            assert conn.remote_address is not None
            now = asyncio.get_running_loop().time()
            held = self.reservations.reserve(ctx.peer, conn.remote_address[0], conn, now)
        except RelayRefused as refused:
            log.debug("refused a reservation for %s: %s", ctx.peer, refused.reason)
            return ReserveResponse(refused.status, refused.reason)
        log.debug("reservation for %s until %.0f", ctx.peer, held.expires)
        return ReserveResponse(
            RelayStatus.OK,
            "",
            expires_in=self.limits.reservation_seconds,
            terms=self.limits.terms,
            addresses=[str(a) for a in self.host.addresses if not a.is_relayed],
        )

    def _direct(self, ctx: CallContext) -> Connection:
        """The connection of the call, which must not itself run through a relay."""
        conn = ctx.connection
        assert isinstance(conn, Connection)
        if conn.relayed_via is not None or conn.remote_address is None:
            raise RelayRefused(RelayStatus.RELAYED_LINK, "no relaying over relayed links")
        return conn

    # ---- circuits --------------------------------------------------------------------------------

    async def _on_connect(
        self, ctx: CallContext, request: ConnectRequest, stream: Stream
    ) -> CircuitEnd:
        source, target = ctx.peer, request.target
        try:
            reservation, source_ip = self._admit_circuit(ctx, target)
        except RelayRefused as refused:
            log.debug("refused a circuit %s -> %s: %s", source, target, refused.reason)
            return CircuitEnd(refused.status, refused.reason)
        number = next(self._numbers)
        circuit = _Circuit(source, target, source_ip, network_prefix(source_ip))
        self._circuits[number] = circuit
        self._idle.clear()
        to_target: CallStream | None = None
        try:
            terms = self.limits.terms
            try:
                to_target = reservation.connection.open_stream(
                    INCOMING.name,
                    IncomingCircuit(source, terms).to_wire(),
                    timeout=self.limits.circuit_seconds + INCOMING_MARGIN,
                )
            except RpcError as exc:
                return CircuitEnd(RelayStatus.TARGET_UNREACHABLE, f"{target} is unreachable: {exc}")
            refusal = await self._await_acceptance(number, stream, to_target, target)
            if refusal is not None:
                log.debug("circuit %s -> %s not opened: %s", source, target, refusal.reason)
                return refusal
            splice = Splice(
                number, source=(source, stream), target=(target, to_target), limits=self.limits
            )
            circuit.splice = splice
            if self._closing:  # close() ran while the target was accepting
                splice.stop(RelayStatus.RELAY_CLOSING, "the relay is shutting down")
            accepted = CircuitAccepted(terms.circuit_seconds, terms.circuit_bytes)
            await stream.send(accepted.to_wire())
            return await splice.run()
        finally:
            del self._circuits[number]
            if not self._circuits:
                self._idle.set()
            if to_target is not None and not to_target.done:
                to_target.cancel()

    def _admit_circuit(self, ctx: CallContext, target: PeerID) -> tuple[Reservation, str]:
        """The target's reservation and the asker's address, or ``RelayRefused`` saying which limit."""
        source = ctx.peer
        conn = self._direct(ctx)
        assert conn.remote_address is not None
        if self._closing:
            raise RelayRefused(RelayStatus.RELAY_CLOSING, "the relay is shutting down")
        if target == source:
            raise RelayRefused(RelayStatus.PERMISSION, "a peer cannot relay to itself")
        reservation = self.reservations.get(target, asyncio.get_running_loop().time())
        if reservation is None:
            raise RelayRefused(
                RelayStatus.NO_RESERVATION, f"{target} holds no reservation on this relay"
            )
        limits = self.limits
        if len(self._circuits) >= limits.max_circuits:
            raise RelayRefused(
                RelayStatus.LIMIT,
                f"the relay carries its maximum of {limits.max_circuits} circuits",
            )
        for peer in (source, target):
            count = sum(1 for c in self._circuits.values() if peer in (c.source, c.target))
            if count >= limits.max_circuits_per_peer:
                raise RelayRefused(
                    RelayStatus.LIMIT,
                    f"{peer} is in {count} circuits already (limit {limits.max_circuits_per_peer})",
                )
        ip = conn.remote_address[0]
        from_ip = sum(1 for c in self._circuits.values() if c.source_ip == ip)
        if from_ip >= limits.max_circuits_per_ip:
            raise RelayRefused(
                RelayStatus.LIMIT,
                f"{ip} asked for {from_ip} circuits already (limit {limits.max_circuits_per_ip})",
            )
        prefix = network_prefix(ip)
        from_prefix = sum(1 for c in self._circuits.values() if c.source_prefix == prefix)
        if from_prefix >= limits.max_circuits_per_prefix:
            raise RelayRefused(
                RelayStatus.LIMIT,
                f"{prefix} asked for {from_prefix} circuits already "
                f"(limit {limits.max_circuits_per_prefix})",
            )
        return reservation, ip

    async def _await_acceptance(
        self, number: int, source: Stream, to_target: CallStream, target: PeerID
    ) -> CircuitEnd | None:
        """None once the target accepted; otherwise why the circuit will not open.

        Meanwhile the source must stay silent: anything it sends before we answer breaks the
        protocol (and a source that ends its stream has given up).
        """
        assert self._stopping is not None
        answer = self._tasks.spawn(
            f"circuit-{number}/accept", to_target.recv_message(), awaited=True
        )
        early = self._tasks.spawn(f"circuit-{number}/watch", source.recv_message(), awaited=True)
        stopping = asyncio.shield(self._stopping)
        try:
            done, _ = await asyncio.wait(
                (answer, early, stopping),
                timeout=self.limits.accept_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            for task in (answer, early, stopping):
                task.cancel()
            await asyncio.wait((answer, early))
        if early in done:
            exc = None if early.cancelled() else early.exception()
            if isinstance(exc, EndOfStream | StreamClosedError) and not isinstance(
                exc, StreamUsageError
            ):
                return CircuitEnd(RelayStatus.CLOSED, "the source gave up")
            what = "raw data" if isinstance(exc, StreamUsageError) else "a message"
            return CircuitEnd(
                RelayStatus.MALFORMED, f"the source sent {what} before the circuit was accepted"
            )
        if stopping in done:
            return CircuitEnd(RelayStatus.RELAY_CLOSING, "the relay is shutting down")
        if answer not in done:
            return CircuitEnd(
                RelayStatus.TARGET_UNREACHABLE,
                f"{target} did not accept within {self.limits.accept_timeout:g} s",
            )
        return await self._target_answer(answer, to_target, target)

    async def _target_answer(
        self, answer: asyncio.Task[object], to_target: CallStream, target: PeerID
    ) -> CircuitEnd | None:
        exc = answer.exception()
        if exc is None:
            try:
                CircuitAccepted.from_wire(answer.result())
            except WireFormatError as bad:
                return CircuitEnd(RelayStatus.MALFORMED, f"{target} answered malformed: {bad}")
            return None
        if isinstance(exc, StreamClosedError) and to_target.done:
            try:  # the target ended the call instead of accepting: its reason is the result
                end = CircuitEnd.from_wire(await to_target.result())
            except (RpcError, WireFormatError) as failed:
                return CircuitEnd(RelayStatus.TARGET_REFUSED, f"{target} refused: {failed}")
            return CircuitEnd(RelayStatus.TARGET_REFUSED, f"{target} refused: {end.reason}")
        if isinstance(exc, RpcError):
            return CircuitEnd(RelayStatus.TARGET_UNREACHABLE, f"{target} is unreachable: {exc}")
        raise exc
