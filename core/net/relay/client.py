"""RelayClient: staying reachable through relays while nobody can dial us directly.

It keeps reservations on ``want`` relays (by default, the peers we are connected to whose hello
offers ``relay``), renews each at half its lifetime, and replaces a relay whose connection dropped,
retrying failed candidates with exponential backoff and jitter (so a swarm that lost a relay does
not stampede the next one). While reservations live, ``host.relay_addresses`` lists
``relay:<relay>/<us>`` for each, so our hello and the DHT advertise them.

It answers the relays' ``relay.incoming`` offers: only from relays we hold a reservation with (a
stranger may not push circuits at us), and only over a direct connection to that relay. An accepted
circuit is handed to the Host like any inbound connection: the TLS handshake over it proves who the
source really is, and in a moderated project the source must show a pass as over TCP.

Reservation connections are pinged now and then: the idle sweeper on either side would otherwise
close them, and home routers forget idle TCP mappings after a few minutes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

from core.net.errors import AddressError, DialError, NetError
from core.net.host.address import PeerAddress
from core.net.host.host import Host
from core.net.relay.circuit import Circuit
from core.net.relay.dialer import RelayDialer
from core.net.relay.messages import (
    INCOMING,
    OFFER,
    RESERVE,
    CircuitAccepted,
    CircuitEnd,
    IncomingCircuit,
    RelayRefused,
    RelayStatus,
    RelayTerms,
    ReserveRequest,
    ReserveResponse,
)
from core.net.wire.connection import Connection
from core.net.wire.rpc import CallContext
from core.net.wire.stream import Stream
from core.trust.peer_id import PeerID
from core.util.clock import SYSTEM_CLOCK, Clock
from core.util.errors import WireFormatError
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)

RETRY_FIRST = 1.0
RETRY_MAX = 300.0
"""Backoff after a relay failed us: doubling from one second up to five minutes, times 0.5–1.5."""
RENEW_AT = 0.5
"""Fraction of a reservation's lifetime after which it is renewed (leaves room for retries)."""


@dataclass(slots=True)
class _Held:
    relay: PeerID
    connection: Connection
    expires: float
    terms: RelayTerms | None

    def live(self, now: float) -> bool:
        return now < self.expires and not self.connection.closing


@dataclass(slots=True)
class _Backoff:
    failures: int = 0
    retry_at: float = 0.0


class RelayClient:
    """Keeps ``host`` reachable through at least ``want`` relays."""

    def __init__(
        self,
        host: Host,
        candidates: Callable[[], list[PeerID]] | None = None,
        want: int = 2,
        *,
        dialer: RelayDialer | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if want < 1:
            raise ValueError("want at least one relay")
        self.host = host
        self.want = want
        self.dialer = dialer or RelayDialer(host)
        self._candidates = candidates or self._offering_relays
        self._clock = clock  # monotonic: the loop's time, as a connection's ``last_activity``
        self._held: dict[PeerID, _Held] = {}
        self._backoff: dict[PeerID, _Backoff] = {}
        self._tasks = BackgroundTasks(f"relay-client-{host.peer_id.short()}")
        self._wake = asyncio.Event()
        self._started = False

    @property
    def relays(self) -> list[PeerID]:
        """Relays holding a live reservation for us."""
        now = self._clock.monotonic()
        return [relay for relay, held in self._held.items() if held.live(now)]

    def start(self) -> None:
        """Answer relays' circuit offers, and keep reservations on ``want`` relays."""
        self.host.router.add_stream(INCOMING, self._on_incoming)
        self.host.on_connection(self._connected)
        self._started = True
        self._tasks.spawn("keeper", self._keep())

    async def close(self) -> None:
        """Stop renewing, forget our relay addresses and end our circuits."""
        await self._tasks.close()
        if self._started:
            self._started = False
            self.host.router.remove(INCOMING.name)
            # a client is made anew each time we stop being public: leave no listener behind
            self.host.remove_connection_listener(self._connected)
        self._held.clear()
        self._publish()
        await self.dialer.close()

    def _connected(self, _conn: Connection) -> None:
        self._wake.set()  # a new relay may have appeared

    # ---- reservations ----------------------------------------------------------------------------

    async def reserve(self, relay: PeerID) -> float:
        """Reserve (or renew) a slot on ``relay`` now; seconds until it expires.

        Raises ``RelayRefused`` with the relay's reason, or ``NetError`` when it cannot be reached.
        """
        conn = await self.host.connect(relay)
        if conn.relayed_via is not None:
            raise DialError(f"relay {relay} is reachable only through another relay")
        raw = await conn.call(RESERVE.name, ReserveRequest().to_wire())
        try:
            answer = ReserveResponse.from_wire(raw)
        except WireFormatError as exc:
            raise RelayRefused(
                RelayStatus.MALFORMED, f"relay {relay} answered malformed: {exc}"
            ) from None
        if answer.status is not RelayStatus.OK:
            raise RelayRefused(
                answer.status, f"relay {relay} refused a reservation: {answer.reason}"
            )
        now = self._clock.monotonic()
        previous = self._held.get(relay)
        self._held[relay] = _Held(relay, conn, now + answer.expires_in, answer.terms)
        self._backoff.pop(relay, None)
        with contextlib.suppress(AddressError):  # its own addresses help others reach it, and us
            self.host.add_addresses(relay, PeerAddress.of_peer(relay, answer.addresses))
        if previous is None or previous.connection is not conn:
            log.info("reserved a slot on relay %s for %.0f s", relay.short(), answer.expires_in)
            self._tasks.spawn(f"watch-{relay.short()}", self._watch(relay, conn))
        self._publish()
        return answer.expires_in

    async def _watch(self, relay: PeerID, conn: Connection) -> None:
        await conn.wait_closed()
        held = self._held.get(relay)
        if held is not None and held.connection is conn:
            log.info("lost our reservation on relay %s: its connection closed", relay)
            del self._held[relay]
            self._failed(relay)
            self._publish()
        self._wake.set()

    def _publish(self) -> None:
        now = self._clock.monotonic()
        self.host.relay_addresses = [
            PeerAddress.parse(f"relay:{relay}/{self.host.peer_id}")
            for relay, held in self._held.items()
            if held.live(now)
        ]

    def _failed(self, relay: PeerID) -> None:
        now = self._clock.monotonic()
        # every peer we dial directly is a candidate: forget those not tried again for twice the
        # longest backoff (they left), or the table would grow with every peer met for weeks
        horizon = now - 2 * RETRY_MAX
        for gone in [r for r, b in self._backoff.items() if b.retry_at < horizon]:
            del self._backoff[gone]
        backoff = self._backoff.setdefault(relay, _Backoff())
        delay = min(RETRY_MAX, RETRY_FIRST * 2**backoff.failures) * random.uniform(0.5, 1.5)
        backoff.failures += 1
        backoff.retry_at = now + delay

    def _offering_relays(self) -> list[PeerID]:
        """Peers whose hello offered a relay, then the other peers we dialed directly.

        A hello is sent once per connection, and a backbone peer starts its relay only once its
        own reachability checks say PUBLIC, usually after the volunteers connected. So a peer we
        could dial directly is asked too: one that relays nothing refuses, and the backoff spaces
        out the next try (it may start relaying later).
        """
        offering: list[PeerID] = []
        dialable: list[PeerID] = []
        for conn in self.host.connections():
            if conn.relayed_via is not None or conn.peer is None:
                continue
            hello = conn.remote_hello
            if hello is not None and OFFER in hello.extensions:
                offering.append(conn.peer)
            elif conn.initiator and not conn.punched:  # a punched peer is as private as we are
                dialable.append(conn.peer)
        return list(dict.fromkeys(offering + dialable))

    async def _keep(self) -> None:
        # ping often enough that neither side's idle sweeper nor a home router drops the link
        keepalive = self.host.config.idle_timeout / 3
        while True:
            now = self._clock.monotonic()
            for relay in [r for r, held in self._held.items() if not held.live(now)]:
                del self._held[relay]
            self._publish()
            for relay, held in list(self._held.items()):
                granted = held.terms.reservation_seconds if held.terms else keepalive
                if held.expires - now < granted * (1 - RENEW_AT):
                    await self._try(relay, "renew")
                elif now - held.connection.last_activity > keepalive:
                    self._tasks.spawn(f"ping-{relay.short()}", self._ping(held.connection))
            if len(self._held) < self.want:
                for relay in self._candidates():
                    if len(self._held) >= self.want:
                        break
                    backoff = self._backoff.get(relay)
                    if relay in self._held or relay == self.host.peer_id:
                        continue
                    if backoff is not None and backoff.retry_at > now:
                        continue
                    await self._try(relay, "reserve")
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._next_wake(self._clock.monotonic(), keepalive)):
                    await self._wake.wait()

    def _next_wake(self, now: float, keepalive: float) -> float:
        due = [keepalive]
        for held in self._held.values():
            granted = held.terms.reservation_seconds if held.terms else keepalive
            due.append(held.expires - granted * (1 - RENEW_AT) - now)
        due.extend(b.retry_at - now for b in self._backoff.values())
        return max(0.01, min(d for d in due if d > 0) if any(d > 0 for d in due) else keepalive)

    async def _try(self, relay: PeerID, what: str) -> None:
        try:
            await self.reserve(relay)
        except NetError as exc:
            log.info("could not %s a reservation on relay %s: %s", what, relay, exc)
            self._failed(relay)

    @staticmethod
    async def _ping(conn: Connection) -> None:
        with contextlib.suppress(NetError, TimeoutError):
            await conn.ping()

    # ---- circuits offered to us ------------------------------------------------------------------

    async def _on_incoming(
        self, ctx: CallContext, request: IncomingCircuit, stream: Stream
    ) -> CircuitEnd:
        relay = ctx.peer
        held = self._held.get(relay)
        conn = ctx.connection
        now = self._clock.monotonic()
        if held is None or not held.live(now):
            return CircuitEnd(RelayStatus.PERMISSION, "we hold no reservation with this relay")
        if not isinstance(conn, Connection) or conn.relayed_via is not None:
            return CircuitEnd(RelayStatus.RELAYED_LINK, "no relaying over relayed links")
        terms = request.terms
        await stream.send(CircuitAccepted(terms.circuit_seconds, terms.circuit_bytes).to_wire())
        circuit = Circuit(stream, relay=relay, peer=request.source)
        transport = await circuit.open(dialing=False)
        self.dialer.adopt(circuit)
        if not self.host.accept_transport(transport, relayed_via=relay):
            await circuit.close("we are not accepting connections now")
        # the call lasts as long as the circuit (if the relay cancels it, the stream fails and the
        # circuit ends with it)
        return CircuitEnd(RelayStatus.CLOSED, await circuit.wait_closed())
