"""ReachabilityMonitor: finds out, and keeps finding out, whether peers can dial us.

It asks connected peers that offer dial-backs (``core.net.reach.dialback``) to open a fresh connection to
the IP they see us at and our listening port, feeds their answers to the ``Classifier``
(``core.net.reach.reachability``) and acts on the verdict: when PUBLIC, the address the dial-backs
reached becomes ``host.confirmed_addresses`` (advertised first); otherwise it is taken back.

Whom it asks: peers on direct connections whose own address looks public. A peer on our LAN would
dial our LAN address, which proves nothing about the internet, and through a relay the peer cannot
see our IP at all. On a loopback host (a swarm inside one computer, the tests) loopback peers count.

When it checks:

- at start, as soon as a peer offering dial-backs is connected (after ``settle`` seconds, so that a
  few more can connect and be asked together), and again whenever a new such peer connects while
  the state is still UNKNOWN;
- when the IP peers observe us at changes (``core.net.reach.observed``): the network changed, and the
  old answers are forgotten because they were about another address;
- when our listening addresses change;
- every ``recheck_every`` seconds (a router's port forward can vanish), sooner (``retry_unknown``)
  while the state is UNKNOWN.

A Host that does not listen at all is PRIVATE without asking anyone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.net.errors import NetError
from core.net.host.address import PeerAddress
from core.net.host.advertise import IPAddress, is_lan, is_shareable, parse_ip
from core.net.reach.dialback import DIALBACK, OFFER, DialbackRequest, DialbackResponse
from core.net.reach.observed import ObservedAddresses
from core.net.reach.reachability import CONFIDENCE, MAX_AGE, Classifier, Outcome, Reachability
from core.util.clock import SYSTEM_CLOCK, Clock
from core.util.errors import WireFormatError
from core.util.tasks import BackgroundTasks

if TYPE_CHECKING:
    from core.net.host.host import Host
    from core.net.wire.connection import Connection

log = logging.getLogger(__name__)

MAX_ASKED = 256
"""Peers remembered as asked; beyond it the longest ago are forgotten, which orders them the same
(never asked sorts first, as asked longest ago would), so public peers met for weeks do not pile up."""


@dataclass(frozen=True)
class MonitorConfig:
    recheck_every: float = 1800.0
    """Seconds between routine checks once decided (libp2p re-checks about as often)."""
    retry_unknown: float = 60.0
    """Seconds before asking again after a check that decided nothing (refusals, timeouts)."""
    watch_every: float = 30.0
    """Seconds between looks at our listening addresses (they change without telling anyone)."""
    settle: float = 2.0
    """Seconds a triggered check waits, so that peers connecting at once are asked together."""
    servers_per_check: int = 3
    """Peers asked in one check (the least recently asked first)."""
    call_timeout: float = 20.0
    """Seconds one dial-back request may take: the server's own dial timeout plus a margin."""
    confidence: int = CONFIDENCE
    max_age: float = MAX_AGE


class ReachabilityMonitor:
    """Checks a Host's reachability by dial-backs and keeps its confirmed address up to date."""

    def __init__(
        self,
        host: Host,
        *,
        config: MonitorConfig | None = None,
        on_change: Callable[[Reachability], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.host = host
        self.config = config or MonitorConfig()
        self.on_change = on_change
        self._clock = clock
        self.classifier = Classifier(
            confidence=self.config.confidence, max_age=self.config.max_age, clock=clock
        )
        self.observed = ObservedAddresses(on_change=self._observed_changed, clock=clock)
        self.public_address: PeerAddress | None = None
        """The address dial-backs reached (PUBLIC only); also in ``host.confirmed_addresses``."""
        self.checked_at: float | None = None
        """Wall-clock time (``time.time()``) of the last check that asked anyone."""
        self.last_reasons: list[str] = []
        """What the last check learned, one line per peer asked (or why nobody was asked)."""
        self.checks = 0
        self._state = Reachability.UNKNOWN
        self._tasks = BackgroundTasks(f"reachability-{host.peer_id.short()}")
        self._wake = asyncio.Event()
        self._why: list[str] = []
        self._asked: dict[str, float] = {}  # peer -> when last asked, since the last reset
        self._available = 0
        self._listening: tuple[PeerAddress, ...] = ()
        self._lock = asyncio.Lock()
        self._started = False
        self._last_check: float | None = None  # clock time of the last check, asked anyone or not

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Watch the host's connections and check in the background (after ``host.start()``)."""
        if self._started:
            return
        self._started = True
        self.observed.loopback_host = self.loopback_host
        self._listening = tuple(self.host.listen_addresses)
        self.host.on_connection(self._on_connection)
        for conn in self.host.connections():
            self._on_connection(conn)
        self._tasks.spawn("checks", self._run())

    async def close(self) -> None:
        await self._tasks.close()

    @property
    def state(self) -> Reachability:
        return self._state

    def request_check(self, why: str) -> None:
        """Check soon (after ``settle``), for the reason given."""
        self._why.append(why)
        self._wake.set()

    # ---- triggers --------------------------------------------------------------------------------

    def _on_connection(self, conn: Connection) -> None:
        if conn.relayed_via is None and not self._tasks.closed:
            self._tasks.spawn(f"watch-{conn.peer}", self._watch(conn))

    async def _watch(self, conn: Connection) -> None:
        # an outbound connection is registered before the peer's hello arrives (open projects)
        try:
            await conn.wait_ready()
        except NetError:
            return
        token = self.observed.observe_connection(conn)
        if (
            self._state is Reachability.UNKNOWN
            and self._is_server(conn)
            and str(conn.peer) not in self._asked
        ):
            self.request_check(f"{conn.peer} offers dial-backs")
        try:
            await conn.wait_closed()
        finally:
            if token is not None:
                self.observed.closed(token)

    def _observed_changed(self, previous: str | None, current: str | None) -> None:
        if previous is None:
            return  # first learned, not changed: the start-up check covers it
        log.info(
            "our observed IP changed from %s to %s: checking reachability again", previous, current
        )
        self.classifier.reset()
        self._asked.clear()
        self._apply(Reachability.UNKNOWN)
        self.request_check(f"our observed IP changed from {previous} to {current}")

    async def _run(self) -> None:
        config = self.config
        while True:
            wait = config.watch_every
            due = self._next_routine()
            if due is not None:
                wait = max(0.0, min(wait, due - self._clock.monotonic()))
            try:
                async with asyncio.timeout(wait):
                    await self._wake.wait()
            except TimeoutError:
                pass
            listening = tuple(self.host.listen_addresses)
            if listening != self._listening:
                self._listening = listening
                self.observed.loopback_host = self.loopback_host
                self._why.append("our listening addresses changed")
            if self._wake.is_set():
                await asyncio.sleep(config.settle)
            routine = self._next_routine()
            if routine is not None and self._clock.monotonic() >= routine:
                self._why.append("routine re-check")
            if not self._why:
                continue
            why, self._why = "; ".join(dict.fromkeys(self._why)), []
            self._wake.clear()
            await self.check(why)

    def _next_routine(self) -> float | None:
        if self._last_check is None:
            return None
        if self._state is Reachability.UNKNOWN:
            return self._last_check + self.config.retry_unknown
        return self._last_check + self.config.recheck_every

    # ---- checking --------------------------------------------------------------------------------

    async def check(self, why: str = "asked") -> Reachability:
        """Ask up to ``servers_per_check`` peers now; return the state after their answers."""
        async with self._lock:
            return await self._check(why)

    async def _check(self, why: str) -> Reachability:
        port = self.host.listening_port
        self._last_check = self._clock.monotonic()
        if port is None:
            self.last_reasons = ["we do not listen: peers cannot dial us"]
            return self._apply(Reachability.PRIVATE)
        self.observed.loopback_host = self.loopback_host
        servers = self._servers()
        self._available = len(servers)
        if not servers:
            self.last_reasons = ["no peer that offers dial-backs is connected yet"]
            return self._apply(self.classifier.update(available=0))
        chosen = sorted(servers, key=lambda conn: self._asked.get(str(conn.peer), -1.0))
        chosen = chosen[: self.config.servers_per_check]
        log.debug("reachability check (%s): asking %d peers", why, len(chosen))
        answers = await asyncio.gather(*(self._ask(conn, port) for conn in chosen))
        self.checks += 1
        self.checked_at = self._clock.time()
        self.last_reasons = [reason for _, reason in answers]
        for outcome, _ in answers:
            if outcome is not None:
                self.classifier.add(outcome, available=self._available)
        return self._apply(self.classifier.update(available=self._available))

    async def _ask(self, conn: Connection, port: int) -> tuple[Outcome | None, str]:
        assert conn.peer is not None
        peer = str(conn.peer)
        who = conn.peer.short()
        self._note_asked(peer)
        try:
            raw = await conn.call(
                DIALBACK.name, DialbackRequest(port).to_wire(), timeout=self.config.call_timeout
            )
            answer = DialbackResponse.from_wire(raw)
        except WireFormatError as exc:
            return None, f"{who}: a malformed answer ({exc})"
        except NetError as exc:
            return None, f"{who} did not dial back: {exc}"
        ip, answered_port = _split(answer.address)
        if ip is None or answered_port != port:
            return None, f"{who} answered about another address ({answer.address})"
        if not self._public_looking(ip):
            return None, f"{who} dialed {answer.address}, not an address the internet can reach"
        outcome = Outcome(peer, answer.reachable, self._clock.monotonic(), answer.address)
        if answer.reachable:
            return outcome, f"{who} reached us at {answer.address}"
        return outcome, f"{who} could not reach us at {answer.address}: {answer.reason}"

    def _note_asked(self, peer: str) -> None:
        self._asked.pop(peer, None)  # dict order: asked longest ago first
        self._asked[peer] = self._clock.monotonic()
        while len(self._asked) > MAX_ASKED:
            del self._asked[next(iter(self._asked))]

    def _servers(self) -> list[Connection]:
        """One usable direct connection per peer that offers dial-backs and looks public."""
        found: dict[str, Connection] = {}
        for conn in self.host.connections():
            if conn.is_usable and self._is_server(conn):
                found.setdefault(str(conn.peer), conn)
        return list(found.values())

    def _is_server(self, conn: Connection) -> bool:
        hello = conn.remote_hello
        if conn.relayed_via is not None or hello is None or conn.remote_address is None:
            return False
        if not hello.extensions.get(OFFER):
            return False
        ip = parse_ip(conn.remote_address[0])
        return ip is not None and self._public_looking(ip)

    def _public_looking(self, ip: IPAddress) -> bool:
        if ip.is_loopback:
            return self.loopback_host  # true only inside one computer
        return is_shareable(ip) and not is_lan(ip)

    @property
    def loopback_host(self) -> bool:
        """Whether the host listens on loopback alone (a swarm inside one computer, the tests)."""
        ips = [parse_ip(a.host or "") for a in self.host.listen_addresses]
        return bool(ips) and all(ip is not None and ip.is_loopback for ip in ips)

    def _apply(self, state: Reachability) -> Reachability:
        """Make the host's confirmed addresses agree with ``state``; tell ``on_change``."""
        port = self.host.listening_port
        reached = self.classifier.reached_address() if state is Reachability.PUBLIC else None
        ip, _ = _split(reached) if reached else (None, None)
        previous = self.public_address
        if ip is not None and port is not None:
            self.public_address = PeerAddress.tcp(str(ip), port, self.host.peer_id)
        else:
            self.public_address = None
        if self.public_address != previous:
            others = [a for a in self.host.confirmed_addresses if a != previous]
            mine = [self.public_address] if self.public_address is not None else []
            self.host.confirmed_addresses = mine + others
        if state is not self._state:
            log.info("reachability: %s (%s)", state.value, "; ".join(self.last_reasons))
            self._state = state
            if self.on_change is not None:
                self.on_change(state)
        return state

    # ---- reporting -------------------------------------------------------------------------------

    def diagnostics(self) -> dict[str, Any]:
        """What the engine's diagnostics page shows about reachability (plain values only)."""
        now = self._clock.monotonic()
        return {
            "state": self._state.value,
            "public_address": str(self.public_address) if self.public_address else None,
            "checked_at": self.checked_at,
            "checks": self.checks,
            "reasons": list(self.last_reasons),
            "dialback_peers": self._available,
            "needed": self.classifier.needed(self._available),
            "observed": [
                {"ip": c.ip, "observers": c.observers, "peers": c.peers, "open": c.open}
                for c in self.observed.candidates()
            ],
            "answers": [
                {
                    "peer": o.peer,
                    "reachable": o.reachable,
                    "address": o.address,
                    "age_s": round(now - o.at, 1),
                }
                for o in self.classifier.outcomes()
            ],
        }


def _split(address: str) -> tuple[IPAddress | None, int | None]:
    """``ip:port`` or ``[ip6]:port`` as (ip, port); (None, None) when it is neither."""
    host, _, port = address.rpartition(":")
    ip = parse_ip(host.strip("[]"))
    if ip is None or not port.isdigit():
        return None, None
    return ip, int(port)


__all__ = ["MonitorConfig", "ReachabilityMonitor"]
