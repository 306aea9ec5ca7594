"""A trainer's receipts for expert work: ``ReceiptSender`` (the signed record itself is
``core.trust.receipts``; the server that checks and keeps them is ``core.moe.server.receipts``).

``ExpertCaller`` tells the sender the samples of every call a server answered (its outputs arrived
whole and finite), per server and method. Every ``SEND_EVERY`` seconds, and once more at close, the
sender signs one receipt per server whose running totals grew since that server last answered a
receipt, and hands it over with ``moe.receipt``. Sending is best-effort: a server that cannot be
reached gets the next receipt instead, which carries the totals so far, so nothing is lost but the
delay. A server that refuses one (it served less, or takes no receipts) is told again only when its
totals grow; each cause is logged once.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import threading
from dataclasses import dataclass

from core.moe.protocol import RECEIPT, ReceiptRequest
from core.net.errors import InvalidRequestError, NetError, UnknownMethodError
from core.net.host.address import PeerAddress
from core.net.host.host import Host
from core.trust.peer_id import PeerID
from core.trust.receipts import SESSION_BYTES, Receipt, sign_receipt
from core.util.errors import BarnraiseError
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)

SEND_EVERY = 10.0
"""Seconds between a trainer's rounds of receipts."""
SEND_TIMEOUT = 5.0
"""Seconds one receipt may take to be answered (and the last round at close, all together)."""
_LOGGED_CAUSES = 64


@dataclass
class _Totals:
    address: PeerAddress
    """Where the server was last reached (its newest announced address)."""
    forward: int = 0
    backward: int = 0
    handed: tuple[int, int] = (0, 0)
    """The totals of the last receipt this server answered (kept, or refused for a reason)."""

    @property
    def current(self) -> tuple[int, int]:
        return (self.forward, self.backward)


class ReceiptSender:
    """A trainer's running totals per server, signed into receipts and handed over regularly."""

    def __init__(
        self,
        host: Host,
        project: str,
        *,
        interval: float = SEND_EVERY,
        timeout: float = SEND_TIMEOUT,
        session: bytes | None = None,
    ) -> None:
        if not interval > 0 or not timeout > 0:
            raise ValueError("the receipts' interval and timeout must be positive seconds")
        self.host = host
        self.project = project
        self.interval = interval
        self.timeout = timeout
        self.session = session if session is not None else secrets.token_bytes(SESSION_BYTES)
        self.sent = 0
        """Receipts the servers answered (kept or not)."""
        self.refused = 0
        """Receipts a server refused (the causes are logged once each)."""
        self._sequence = 0
        self._lock = threading.Lock()  # counted from the layer's worker threads
        self._servers: dict[PeerID, _Totals] = {}
        self._logged: set[str] = set()
        self._tasks = BackgroundTasks("moe-receipts")

    def count(self, address: str, method: str, samples: int) -> None:
        """From any thread: the server at ``address`` answered a ``method`` call of ``samples``."""
        try:
            target = PeerAddress.parse(address)
        except (BarnraiseError, ValueError):
            return  # the call was refused before dialing: nothing was answered
        server = target.peer_id
        if server is None or server == self.host.peer_id or samples <= 0:
            return
        with self._lock:
            totals = self._servers.get(server)
            if totals is None:
                totals = self._servers[server] = _Totals(target)
            totals.address = target
            if method == "forward":
                totals.forward += samples
            else:
                totals.backward += samples

    def totals(self, server: PeerID) -> tuple[int, int]:
        """The running (forward, backward) samples ``server`` answered in this session."""
        with self._lock:
            found = self._servers.get(server)
            return (0, 0) if found is None else found.current

    def start(self) -> None:
        """Send receipts every ``interval`` seconds in the background (on the running loop)."""
        self._tasks.spawn("send", self._run())

    async def close(self) -> None:
        """Stop, then send the last round (for at most ``timeout`` seconds all together)."""
        await self._tasks.close()
        try:
            async with asyncio.timeout(self.timeout):
                await self.flush()
        except TimeoutError:
            log.info("the last receipts were not all answered within %.0f s", self.timeout)

    async def flush(self) -> int:
        """Sign and hand over one receipt per server whose totals grew; how many were answered."""
        due = self._due()
        if not due:
            return 0
        answered = await asyncio.gather(*(self._hand(t, r) for t, r in due))
        return sum(answered)

    def _due(self) -> list[tuple[_Totals, Receipt]]:
        with self._lock:
            grown = [(s, t, t.current) for s, t in self._servers.items() if t.current != t.handed]
            due = []
            for server, totals, (forward, backward) in grown:
                self._sequence += 1
                receipt = sign_receipt(
                    self.host.identity,
                    self.project,
                    server,
                    session=self.session,
                    sequence=self._sequence,
                    forward_samples=forward,
                    backward_samples=backward,
                )
                due.append((totals, receipt))
            return due

    async def _hand(self, totals: _Totals, receipt: Receipt) -> bool:
        handed = (receipt.forward_samples, receipt.backward_samples)
        try:
            await self.host.call(
                totals.address, RECEIPT, ReceiptRequest(receipt), timeout=self.timeout
            )
        except (InvalidRequestError, UnknownMethodError) as exc:
            # an answer, not a failure to reach it: the same receipt would be refused again
            self.refused += 1
            self._once(f"a server refused a receipt: {exc}")
        except (NetError, TimeoutError, OSError) as exc:
            # unreachable for now: the next round's receipt carries these totals too
            log.debug("receipt for %s not handed over: %s", receipt.server.short(), exc)
            return False
        else:
            self.sent += 1
        with self._lock:
            totals.handed = max(totals.handed, handed)
        return True

    def _once(self, message: str) -> None:
        cause = re.sub(r"[0-9]+", "N", message)  # "claims 70 samples" and "claims 90": one cause
        if cause in self._logged or len(self._logged) >= _LOGGED_CAUSES:
            return
        self._logged.add(cause)
        log.info("%s", message)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.flush()
