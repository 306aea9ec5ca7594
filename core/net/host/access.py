"""HostAccess: a moderated Host's side of access control, over all its connections.

Each peer's pass is checked in its hello before any request is served (``admit``). Afterwards the
pass is checked again whenever the revocations or our own pass change, and every second for
expiry (cheap: no crypto); a pass that no longer admits its peer ends that link. When our own pass
is renewed, every connected peer is shown the new one (``RENEW_PASS``), and a peer showing us its
renewed pass is checked the same way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from core.net.errors import NetError
from core.net.host.gate import AccessGate
from core.net.wire.connection import Connection
from core.net.wire.hello import Hello
from core.net.wire.rpc import CallContext
from core.trust.passes import AccessDenied, AccessPass

log = logging.getLogger(__name__)

RENEW_PASS = "net.renew_pass"
ACCESS_SWEEP_INTERVAL = 1.0
"""Seconds between checks of connected peers' passes for expiry."""

Spawn = Callable[[str, Coroutine[Any, Any, None]], object]


class HostAccess:
    def __init__(
        self,
        gate: AccessGate,
        connections: Callable[[], list[Connection]],
        spawn: Spawn,
        call_timeout: float,
    ) -> None:
        self.gate = gate
        self._connections = connections
        self._spawn = spawn
        self._call_timeout = call_timeout
        self._shown: AccessPass | None = None
        """The pass of ours that connected peers last saw (pushed again only when it changes)."""

    def start(self) -> None:
        self._shown = self.gate.own_pass  # what our hellos carry from now on
        self.gate.add_listener(self._changed)
        self._spawn("access-sweeper", self._sweep())

    def stop(self) -> None:
        self.gate.remove_listener(self._changed)

    def admit(self, conn: Connection, hello: Hello) -> None:
        """Check the pass in the peer's hello (raises ``AccessDenied``; the connection refuses)."""
        assert conn.peer is not None
        conn.remote_pass = self.gate.admit(conn.peer, hello.extensions.get("pass"))

    async def on_renewed_pass(self, ctx: CallContext, raw: Any) -> bool:
        """A connected peer shows its renewed pass; a pass that does not admit it ends the link."""
        conn = ctx.connection
        assert isinstance(conn, Connection)  # the Host's router serves only its connections
        try:
            conn.remote_pass = self.gate.admit(ctx.peer, raw)
        except AccessDenied as exc:
            conn.refuse(str(exc))
            return False
        return True

    def _changed(self) -> None:
        """Our pass or the revocations changed: recheck peers' passes; show a renewed one of ours."""
        self.recheck()
        own = self.gate.own_pass
        if own is not None and own is not self._shown:  # not for a new revocation list
            self._shown = own
            self._spawn("renew-pass", self._push(own.to_wire()))

    async def _push(self, presented: list[object]) -> None:
        calls = [
            conn.call(RENEW_PASS, presented, timeout=self._call_timeout)
            for conn in self._connections()
            if conn.is_usable and conn.remote_hello is not None
        ]
        for outcome in await asyncio.gather(*calls, return_exceptions=True):
            if isinstance(outcome, NetError):
                log.debug("could not show a peer our renewed pass: %s", outcome)
            elif isinstance(outcome, BaseException):
                raise outcome

    def recheck(self) -> None:
        for conn in self._connections():
            if conn.remote_pass is None or conn.is_closed:
                continue
            try:
                self.gate.recheck(conn.remote_pass)
            except AccessDenied as exc:
                conn.refuse(str(exc))

    async def _sweep(self) -> None:
        """Passes expire with time alone: close links whose pass has run out."""
        while True:
            await asyncio.sleep(ACCESS_SWEEP_INTERVAL)
            self.recheck()
