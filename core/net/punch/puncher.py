"""Hole punching: moving two peers behind NATs from a relay onto one direct TCP connection.

When a relayed connection appears that we dialed, the ``HolePuncher`` runs a punch over it, with
us as the initiator A and the peer as the responder B:

1. A calls ``punch.connect`` with its addresses (``core.net.punch.candidates``); B checks them and
   answers with its own. A times the exchange: one sample of the relayed round trip.
2. A calls ``punch.sync`` and, half a round trip later, dials B's addresses; B dials A's as soon
   as SYNC arrives (``core.net.punch.timing``). Every dial leaves from our listening port
   (``core.net.punch.dial``), so the two SYNs cross and become one TCP connection.
3. TLS runs over whatever connected, with roles fixed in advance: A is the client (it proves that
   B answers), B the server. Fixed roles are safe because each socket pair yields one connection
   however it formed: a simultaneous open, or one side's SYN answered by the other's listener.
   B's listener serves TLS as the server anyway. A's listener would serve it as the server too,
   so while A punches it claims inbound connections from B's addresses (``Host.claim_inbound``)
   and runs the client over them instead; without that, a SYN of B's that beat A's socket (only
   possible through a NAT entry a previous round left behind, or on one computer) would meet two
   TLS servers.
4. Success: the connection is registered with ``punched = True``; ``Host.connect`` prefers it, and
   the relayed connection is closed once idle after a grace period. Failure: a new round (fresh
   exchange, fresh round trip), up to ``PunchTiming.attempts``; then the pair stays on the relay,
   one INFO line says why, and the pair is not tried again before a back-off.

The responder refuses (with the reason, failing only that call): ``punch.*`` over a direct
connection; SYNC without a CONNECT just before; malformed or implausible address lists; bursts of
requests (per peer and in total); and CONNECT from a peer we are already directly connected to.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from core.net.errors import (
    InvalidRequestError,
    NetError,
    PermissionDeniedError,
    ResourceExhaustedError,
    RpcError,
    UnavailableError,
)
from core.net.host.advertise import parse_ip
from core.net.host.host import Host
from core.net.punch.candidates import (
    Candidate,
    PunchOffer,
    Whereabouts,
    candidate_of_peername,
    candidates_of,
    dial_targets,
    make_offer,
    observed_addresses,
    show_candidate,
)
from core.net.punch.dial import connect_all, local_for, why_not
from core.net.punch.messages import CONNECT, SYNC, PunchStats, PunchSync, PunchSyncReply
from core.net.punch.timing import Backoff, PunchTiming, RateLimit
from core.net.wire.connection import Connection
from core.net.wire.rpc import CallContext
from core.trust.peer_id import PeerID
from core.util.clock import SYSTEM_CLOCK, Clock
from core.util.errors import WireFormatError
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)

OFFER_TTL = 10.0
"""Seconds an accepted CONNECT waits for its SYNC (which follows one round trip later)."""


@dataclass(frozen=True, slots=True)
class _Accepted:
    attempt: int
    targets: list[Candidate]
    expires: float


class HolePuncher:
    """Upgrades our relayed connections to direct ones by coordinated TCP simultaneous open."""

    def __init__(
        self,
        host: Host,
        timing: PunchTiming | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.host = host
        self.timing = timing or PunchTiming()
        self.stats = PunchStats()
        self._clock = clock
        self._tasks = BackgroundTasks(f"punch-{host.peer_id.short()}")
        self._backoff = Backoff(self.timing, clock)
        # a whole punch of ours takes ``attempts`` CONNECTs; twice that per minute is a burst
        self._limit = RateLimit(2 * self.timing.attempts, 60.0, total=64, clock=clock)
        self._accepted: dict[PeerID, _Accepted] = {}
        self._punching: dict[PeerID, asyncio.Task[bool]] = {}
        self._responding: dict[PeerID, asyncio.Task[None]] = {}
        self._waiters: dict[PeerID, asyncio.Future[Connection]] = {}
        self._claims: dict[Candidate, asyncio.Queue[asyncio.Transport]] = {}
        self._started = False
        self._closed = False

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        self.host.router.add(CONNECT, self._on_connect)
        self.host.router.add(SYNC, self._on_sync)
        self.host.on_connection(self._on_connection)
        self.host.claim_inbound(self._claim)

    async def close(self) -> None:
        """Stop punching and answering; wait until no task of ours is left."""
        if self._closed:
            return
        self._closed = True
        self.host.router.remove(CONNECT.name)
        self.host.router.remove(SYNC.name)
        self.host.release_inbound(self._claim)
        await self._tasks.close()
        for waiter in self._waiters.values():
            waiter.cancel()
        self._waiters.clear()

    # ---- starting a punch ------------------------------------------------------------------------

    def _on_connection(self, conn: Connection) -> None:
        if self._closed or conn.peer is None:
            return
        if conn.relayed_via is None:
            waiter = self._waiters.get(conn.peer)
            if waiter is not None:  # the direct connection a punch of ours waits for
                conn.punched = True
                if not waiter.done():
                    waiter.set_result(conn)
            return
        if conn.initiator:
            self.maybe_punch(conn)

    def maybe_punch(self, conn: Connection) -> asyncio.Task[bool] | None:
        """Start punching over the relayed ``conn`` unless there is no point now (then None)."""
        peer = conn.peer
        if self._closed or peer is None or conn.relayed_via is None:
            return None
        if peer in self._punching or peer in self._responding or self._direct(peer) is not None:
            return self._punching.get(peer)
        if self.host.listening_port is None:
            log.debug("not punching to %s: we do not listen, so no port to punch from", peer)
            return None
        wait = self._backoff.waiting(peer)
        if wait > 0:
            log.debug("not punching to %s: it failed recently (next try in %.0f s)", peer, wait)
            return None
        return self.punch(conn)

    def punch(self, conn: Connection) -> asyncio.Task[bool]:
        """Punch to ``conn``'s peer over ``conn`` now, as the initiator; True once direct.

        ``conn`` must be relayed (``relayed_via`` set); the back-off is not consulted (tests and
        an explicit retry call this directly).
        """
        peer = conn.peer
        if peer is None or conn.relayed_via is None:
            raise ValueError("hole punching runs over an authenticated relayed connection")
        running = self._punching.get(peer)
        if running is not None:
            return running
        task = self._tasks.spawn(f"punch-{peer.short()}", self._run(conn, peer))
        self._punching[peer] = task
        task.add_done_callback(lambda done: self._forget(self._punching, peer, done))
        return task

    @staticmethod
    def _forget(
        table: dict[PeerID, asyncio.Task[bool]] | dict[PeerID, asyncio.Task[None]],
        peer: PeerID,
        task: asyncio.Task[bool] | asyncio.Task[None],
    ) -> None:
        if table.get(peer) is task:
            del table[peer]

    # ---- the initiator ---------------------------------------------------------------------------

    async def _run(self, conn: Connection, peer: PeerID) -> bool:
        self.stats.attempted += 1
        waiter = self._waiter(peer)
        samples: list[float] = []
        reason = "no round was run"
        try:
            for attempt in range(1, self.timing.attempts + 1):
                await asyncio.sleep(self.timing.pause_before(attempt))
                direct = self._direct(peer)
                if direct is not None:
                    return self._succeeded(peer, direct)
                if not conn.is_usable:
                    reason = "the relayed connection closed"
                    break
                outcome = await self._round(conn, peer, attempt, samples, waiter)
                if isinstance(outcome, Connection):
                    return self._succeeded(peer, outcome)
                reason, final = outcome
                if final:
                    break
            self._failed(peer, reason)
            return False
        finally:
            if self._waiters.get(peer) is waiter:
                del self._waiters[peer]
            waiter.cancel()

    async def _round(
        self,
        conn: Connection,
        peer: PeerID,
        attempt: int,
        samples: list[float],
        waiter: asyncio.Future[Connection],
    ) -> Connection | tuple[str, bool]:
        """One CONNECT/SYNC round: the connection, or (why not, whether retrying is pointless)."""
        loop = asyncio.get_running_loop()
        targets = await self._exchange(conn, peer, attempt, samples)
        if isinstance(targets, tuple):
            return targets
        rtt = self.timing.rtt(samples)
        # claimed before SYNC leaves: from then on a SYN of the peer's may reach our listener
        ready: asyncio.Queue[asyncio.Transport] = asyncio.Queue()
        for target in targets:
            self._claims[target] = ready
        sync = asyncio.create_task(
            conn.call(SYNC.name, PunchSync(attempt, rtt).to_wire()),
            name=f"{self._tasks.owner}/sync-{peer.short()}",
        )
        try:
            fire_at = self.timing.initiator_fires_at(loop.time(), samples)
            await asyncio.sleep(max(0.0, fire_at - loop.time()))
            window = self.timing.window(samples)
            outcome = await self._dial_as_client(peer, targets, window, ready, waiter)
        finally:
            for target in targets:
                if self._claims.get(target) is ready:
                    del self._claims[target]
            while not ready.empty():
                ready.get_nowait().abort()
            refusal = await _refusal(sync)
        if isinstance(outcome, Connection):
            return outcome
        if refusal is not None:
            return f"{peer} refused the sync: {refusal}", True
        return outcome, False

    async def _exchange(
        self, conn: Connection, peer: PeerID, attempt: int, samples: list[float]
    ) -> list[Candidate] | tuple[str, bool]:
        """CONNECT both ways and time it: the peer's addresses to dial, or why the round ends."""
        loop = asyncio.get_running_loop()
        where = self._whereabouts()
        started = loop.time()
        try:
            raw = await conn.call(CONNECT.name, make_offer(where, attempt).to_wire())
            theirs = PunchOffer.from_wire(raw)
        except WireFormatError as exc:
            return f"{peer} answered punch.connect with garbage: {exc}", True
        except (
            RpcError
        ) as exc:  # a refusal is final; a call that timed out may do better next round
            why = f"{peer} refused: {exc.message}" if exc.remote else f"punch.connect failed: {exc}"
            return why, exc.remote
        except NetError as exc:
            return f"the relayed connection failed: {exc}", True
        samples.append(loop.time() - started)
        try:
            targets = dial_targets(theirs, where)
        except InvalidRequestError as exc:
            return f"{peer} offered unusable addresses: {exc.message}", True
        if not targets:
            return f"{peer} offered no address we can dial (it knows no public address)", True
        return targets

    async def _dial_as_client(
        self,
        peer: PeerID,
        targets: list[Candidate],
        window: float,
        ready: asyncio.Queue[asyncio.Transport],
        waiter: asyncio.Future[Connection],
    ) -> Connection | str:
        """Dial ``targets`` from our port; run TLS as the client over the first that connects.

        Connections the listener passed on (claimed) arrive in ``ready`` too.
        """
        loop = asyncio.get_running_loop()
        dials = asyncio.create_task(
            connect_all(
                self._local_for,
                targets,
                deadline=loop.time() + window,
                redial_gap=self.timing.redial_gap,
                on_connected=lambda transport, _: ready.put_nowait(transport),
            ),
            name=f"{self._tasks.owner}/dial-{peer.short()}",
        )
        handshake_errors: list[str] = []
        try:
            while True:
                if waiter.done():
                    return waiter.result()
                if not ready.empty():
                    transport = ready.get_nowait()
                    at = _peername(transport)
                    try:
                        conn = await self.host.secure_outbound(
                            transport, peer, where=f"{at} (hole punching)"
                        )
                    except NetError as exc:
                        handshake_errors.append(f"{at}: {exc}")
                        continue
                    conn.punched = True
                    return conn
                if dials.done():
                    break
                get = asyncio.ensure_future(ready.get())
                try:
                    pending: set[asyncio.Future[object]] = {get, dials, waiter}  # type: ignore[arg-type]
                    await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if get.done() and not get.cancelled():
                        ready.put_nowait(get.result())  # back in line for the loop above
                    get.cancel()
        finally:
            dials.cancel()
            await asyncio.gather(dials, return_exceptions=True)
        return why_not(dials.result(), handshake_errors)

    def _claim(self, transport: asyncio.Transport) -> bool:
        """Take an inbound connection from an address we are punching to (see the module doc)."""
        at = candidate_of_peername(transport.get_extra_info("peername"))
        queue = self._claims.get(at) if at is not None else None
        if queue is None:
            return False
        queue.put_nowait(transport)
        return True

    def _succeeded(self, peer: PeerID, conn: Connection) -> bool:
        conn.punched = True
        self.stats.succeeded += 1
        self.stats.note(peer, "direct")
        self._backoff.succeeded(peer)
        log.info("hole punched to %s: now directly connected (%r)", peer, conn)
        if not self._closed:
            self._tasks.spawn(f"retire-relay-{peer.short()}", self._retire_relays(peer))
        return True

    def _failed(self, peer: PeerID, reason: str) -> None:
        wait = self._backoff.failed(peer)
        self.stats.failed += 1
        self.stats.last_reason = reason
        self.stats.note(peer, reason)
        log.info(
            "hole punching to %s failed: %s — staying on the relay (next try in %.0f min)",
            peer,
            reason,
            wait / 60,
        )

    async def _retire_relays(self, peer: PeerID) -> None:
        """Close our relayed connections to ``peer`` once the grace period is over and they idle."""
        await asyncio.sleep(self.timing.relay_grace)
        while self._direct(peer) is not None:  # if the direct one died, the relay is all we have
            relayed = [c for c in self.host.connections(peer) if c.relayed_via and not c.closing]
            idle = [c for c in relayed if c.active_calls == 0]
            for conn in idle:
                await conn.close("replaced by a direct connection (hole punched)")
            if len(idle) == len(relayed):
                return
            await asyncio.sleep(1.0)

    # ---- the responder ---------------------------------------------------------------------------

    async def _on_connect(self, ctx: CallContext, offer: PunchOffer) -> PunchOffer:
        peer = ctx.peer
        try:
            _require_relayed(ctx)
            if not self._limit.allow(peer):
                raise ResourceExhaustedError("too many punch requests; try again later")
            if self._direct(peer) is not None:
                raise PermissionDeniedError("we are directly connected already")
            if peer in self._punching and self.host.peer_id > peer:
                # both started: the smaller PeerID answers, the larger leads
                raise PermissionDeniedError("we are punching to you already")
            if self.host.listening_port is None:
                raise UnavailableError("we do not listen, so we have no port to punch from")
            where = self._whereabouts()
            targets = dial_targets(offer, where)
        except RpcError as exc:
            raise self._refused(peer, CONNECT.name, exc) from None
        now = self._clock.monotonic()
        for old in [p for p, a in self._accepted.items() if a.expires <= now]:
            del self._accepted[old]
        self._accepted[peer] = _Accepted(offer.attempt, targets, now + OFFER_TTL)
        return make_offer(where, offer.attempt)

    async def _on_sync(self, ctx: CallContext, sync: PunchSync) -> PunchSyncReply:
        peer = ctx.peer
        try:
            _require_relayed(ctx)
            accepted = self._accepted.pop(peer, None)
            if accepted is None or accepted.expires <= self._clock.monotonic():
                raise PermissionDeniedError("punch.sync without a punch.connect just before it")
            if accepted.attempt != sync.attempt:
                raise InvalidRequestError(
                    f"punch.sync for round {sync.attempt}, but round {accepted.attempt} was agreed"
                )
        except RpcError as exc:
            raise self._refused(peer, SYNC.name, exc) from None
        previous = self._responding.pop(peer, None)
        if previous is not None:  # the initiator moved on to a new round: so do we
            previous.cancel()
        task = self._tasks.spawn(
            f"respond-{peer.short()}-{sync.attempt}",
            self._respond(peer, accepted.targets, sync.rtt),
        )
        self._responding[peer] = task
        task.add_done_callback(lambda done: self._forget(self._responding, peer, done))
        return PunchSyncReply(len(accepted.targets))

    def _refused(self, peer: PeerID, method: str, exc: RpcError) -> RpcError:
        self.stats.refused += 1
        self.stats.last_refusal = f"{method} from {peer}: {exc.message}"
        log.debug("refused %s from %s: %s", method, peer, exc.message)
        return exc

    async def _respond(self, peer: PeerID, targets: list[Candidate], rtt: float) -> None:
        """Dial the initiator's addresses now; serve TLS on what connects (it will be the client)."""
        self.stats.answered += 1
        loop = asyncio.get_running_loop()
        window = self.timing.responder_window(rtt)
        waiter = self._waiter(peer)
        served: list[asyncio.Transport] = []

        def serve(transport: asyncio.Transport, _: Candidate) -> None:
            # registered on success; ``_on_connection`` then resolves ``waiter``
            served.append(transport)
            self.host.accept_transport(transport)

        dials = asyncio.create_task(
            connect_all(
                self._local_for,
                targets,
                deadline=loop.time() + window,
                redial_gap=self.timing.redial_gap,
                on_connected=serve,
            ),
            name=f"{self._tasks.owner}/dial-{peer.short()}",
        )
        try:
            pending: set[asyncio.Future[object]] = {dials, waiter}  # type: ignore[arg-type]
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if not waiter.done() and served:  # connected: give the handshake its time
                async with asyncio.timeout(self.host.config.handshake_timeout):
                    await asyncio.shield(waiter)
            if waiter.done():
                log.debug("punched from %s's side: %r", peer, waiter.result())
            else:
                failures = dials.result() if dials.done() and not dials.cancelled() else []
                log.debug("punch answered for %s failed: %s", peer, why_not(failures, []))
        except TimeoutError:
            log.debug("punch answered for %s failed: the handshake did not finish", peer)
        finally:
            if self._waiters.get(peer) is waiter:
                del self._waiters[peer]
            waiter.cancel()
            dials.cancel()
            await asyncio.gather(dials, return_exceptions=True)

    # ---- helpers ---------------------------------------------------------------------------------

    def _waiter(self, peer: PeerID) -> asyncio.Future[Connection]:
        """A fresh future for the next direct connection with ``peer`` (replacing an older one:
        a superseded round's clean-up must not cancel the new round's)."""
        waiter: asyncio.Future[Connection] = asyncio.get_running_loop().create_future()
        self._waiters[peer] = waiter
        return waiter

    def _direct(self, peer: PeerID) -> Connection | None:
        for conn in self.host.connections(peer):
            if conn.relayed_via is None and conn.is_usable:
                return conn
        return None

    def _whereabouts(self) -> Whereabouts:
        host = self.host
        listen_ips = [parse_ip(a.host or "") for a in host.listen_addresses]
        return Whereabouts(
            port=host.listening_port or 0,
            observed=observed_addresses(host.connections()),
            confirmed=candidates_of(host.confirmed_addresses),
            interfaces=candidates_of(host.addresses),
            loopback_only=bool(listen_ips)
            and all(ip is not None and ip.is_loopback for ip in listen_ips),
        )

    def _local_for(self, remote: Candidate) -> Candidate | None:
        port = self.host.listening_port
        if port is None:
            return None
        return local_for(remote, [a.host for a in self.host.listen_addresses if a.host], port)


def _require_relayed(ctx: CallContext) -> None:
    conn = ctx.connection
    if not isinstance(conn, Connection) or conn.relayed_via is None:
        raise PermissionDeniedError(
            "hole punching is coordinated only over a relayed connection, and this one is direct"
        )


def _peername(transport: asyncio.Transport) -> str:
    at = candidate_of_peername(transport.get_extra_info("peername"))
    return show_candidate(at) if at is not None else "?"


async def _refusal(sync: asyncio.Task[object]) -> str | None:
    """The responder's refusal of our SYNC, if it came; the call is given up otherwise."""
    if not sync.done():
        sync.cancel()
        await asyncio.gather(sync, return_exceptions=True)
        return None
    if sync.cancelled():
        return None
    exc = sync.exception()
    if isinstance(exc, RpcError) and exc.remote:
        return exc.message
    return None


__all__ = ["CONNECT", "SYNC", "HolePuncher", "PunchStats", "PunchSync", "PunchSyncReply"]
