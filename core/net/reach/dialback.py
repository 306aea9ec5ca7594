"""The dial-back service: on request, try to open a connection to the asking peer.

A peer cannot tell by itself whether others can reach it (a NAT or a firewall is invisible from
inside), so it asks peers offering ``dialback`` in their hello to dial it (``autonat.dialback``).
The server opens a *fresh* connection, not the one the request came on, to the asker's IP at the
requested port, and answers whether the TLS handshake there proved the asker's identity.

Rules that keep the service from being turned into a weapon:

- Only the asker's own IP is dialed, as our socket sees it (``remote_address`` of the asking
  connection). A request naming another IP is refused: a dial-back service that dials third
  parties would scan or flood them for anyone who asks.
- A request that came through a relay is refused: there we see the relay, not the asker.
- A loopback asker (the asker runs on our own computer) is only dialed on loopback, which is what
  its IP is; nothing else of our network is reachable through the request.
- Rate limits (``core.net.reach.dialback_limits``) ration the dials; a refused request dials nothing.

Each refusal is an RPC error of that one call (``PermissionDeniedError``, ``InvalidRequestError``,
``ResourceExhaustedError``), with a reason; the connection and other calls go on. A dial that fails
is an answer, not an error: ``DialbackResponse(reachable=False, reason=...)``.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from core.net.errors import (
    AddressError,
    InvalidRequestError,
    NetError,
    PermissionDeniedError,
    ResourceExhaustedError,
)
from core.net.host.address import PeerAddress
from core.net.host.advertise import parse_ip
from core.net.reach.dialback_limits import DialbackBudget, DialbackLimits
from core.net.wire.rpc import CallContext, Method
from core.util.wire import WireMessage

if TYPE_CHECKING:
    from core.net.host.host import Host
    from core.net.wire.connection import Connection

log = logging.getLogger(__name__)

OFFER = "dialback"
"""The hello extension of peers that serve dial-backs."""
MAX_ADDRESSES = 8
"""Addresses a request may name (each is only checked, never dialed as given)."""


@dataclass(frozen=True, slots=True)
class DialbackRequest(WireMessage):
    port: int
    """Where the asker listens; dialed at the IP we see the asker at."""
    addresses: list[str] = field(default_factory=list)
    """Optionally, the addresses the asker wants confirmed: each must be on the asker's own IP."""


@dataclass(frozen=True, slots=True)
class DialbackResponse(WireMessage):
    reachable: bool
    address: str
    """What was dialed, ``ip:port`` (the asker's IP as we see it)."""
    reason: str = ""
    """Why the dial failed (empty on success)."""


DIALBACK = Method("autonat.dialback", DialbackRequest, DialbackResponse)


class DialbackService:
    """Serves ``autonat.dialback`` on a Host and offers it in the host's hello."""

    def __init__(self, host: Host, limits: DialbackLimits | None = None) -> None:
        self.host = host
        self.limits = limits or DialbackLimits()
        self.budget = DialbackBudget(self.limits)
        self.served = 0
        self.refused = 0
        host.router.add(DIALBACK, self._serve)
        host.offer(OFFER, True)

    def close(self) -> None:
        """Stop serving (calls in progress finish; the Host's close ends them)."""
        self.host.withdraw(OFFER)
        self.host.router.remove(DIALBACK.name)

    async def _serve(self, ctx: CallContext, request: DialbackRequest) -> DialbackResponse:
        conn = cast("Connection", ctx.connection)  # a Host's calls always run on a Connection
        try:
            ip = self._target_ip(conn, request)
        except (PermissionDeniedError, InvalidRequestError) as exc:
            self.refused += 1
            log.info("refused a dial-back for %s: %s", ctx.peer, exc)
            raise
        refusal = self.budget.admit(ip, str(ctx.peer))
        if refusal is not None:
            self.refused += 1
            log.info("refused a dial-back for %s: %s", ctx.peer, refusal)
            raise ResourceExhaustedError(refusal)
        try:
            address = PeerAddress.tcp(ip, request.port, ctx.peer)
            where = f"{ip}:{request.port}" if ":" not in ip else f"[{ip}]:{request.port}"
            reason = await self._dial(address, ctx)
        finally:
            self.budget.done()
        self.served += 1
        return DialbackResponse(reachable=not reason, address=where, reason=reason)

    def _target_ip(self, conn: Connection, request: DialbackRequest) -> str:
        """The IP to dial: the asker's own, as seen by our socket; or why the request is refused."""
        if conn.relayed_via is not None or conn.remote_address is None:
            raise PermissionDeniedError(
                "dial-back requests through a relay are refused: the asker's address is unknown here"
            )
        if not 1 <= request.port <= 65535:
            raise InvalidRequestError(f"port {request.port} is out of range")
        if len(request.addresses) > MAX_ADDRESSES:
            raise InvalidRequestError(f"at most {MAX_ADDRESSES} addresses per request")
        seen = parse_ip(conn.remote_address[0])
        if seen is None:
            raise PermissionDeniedError("the asker's address is not an IP address")
        for text in request.addresses:
            try:
                named = PeerAddress.parse(text)
            except AddressError as exc:
                raise InvalidRequestError(f"bad address {text!r}: {exc}") from None
            if named.is_relayed or parse_ip(named.host or "") != seen:
                raise PermissionDeniedError(
                    f"dial-back requests for other addresses are refused ({text}): "
                    "only the asker's own IP is dialed"
                )
        return str(seen)

    async def _dial(self, address: PeerAddress, ctx: CallContext) -> str:
        """Open and close a fresh connection to ``address``; the failure's reason, or ''."""
        assert address.peer_id is not None
        try:
            async with asyncio.timeout(self.limits.dial_timeout):
                fresh = await self.host.dial_fresh(address, address.peer_id)
        except TimeoutError:
            return f"no answer within {self.limits.dial_timeout:g} s"
        except NetError as exc:
            return str(exc) or type(exc).__name__
        await fresh.close("dial-back done")
        log.debug("dial-back to %s at %s succeeded", ctx.peer, address)
        return ""


__all__ = ["DIALBACK", "OFFER", "DialbackRequest", "DialbackResponse", "DialbackService"]
