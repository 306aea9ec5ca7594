"""PassKeeper: keeps this peer's access pass fresh and its list of revoked peers current.

``start`` fetches the first pass and hands it to the ``AccessGate`` (a peer without one cannot join
a moderated swarm, so failing here is the caller's error to show). Then one named task renews the
pass at half its remaining life and, every ``refresh_interval`` the coordinator names, reads the
revocations (so a ban reaches this peer's connections within one interval) and the latest rollback
order (left on the gate for the training side, which verifies and applies it). A failure that may pass
(the coordinator down, the session to renew) is reported and retried with a growing delay; a refusal
(this account banned or no longer allowlisted) is reported and ends the renewing: the pass runs out.
Each request proves with ``sign`` (the host identity's ``Identity.sign``) that this peer holds the
key its pass names (``proof``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from core.account.errors import AccessRefused, AccountError
from core.account.proof import Signer
from core.account.replies import PassGrant
from core.account.session import AccountSession
from core.net.host.gate import AccessGate
from core.trust.passes import AccessDenied
from core.trust.peer_id import PeerID
from core.util.clock import SYSTEM_CLOCK, Clock
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)

MAX_BACKOFF = 60.0


class PassKeeper:
    def __init__(
        self,
        session: AccountSession,
        gate: AccessGate,
        sign: Signer,
        *,
        on_error: Callable[[AccountError], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.session = session
        self.gate = gate
        self.sign = sign
        self.on_error = on_error
        self.grant: PassGrant | None = None
        self.error: AccountError | None = None
        """The last failure, until the next success."""
        self.refused: AccessRefused | None = None
        """Set when the coordinator refused us for good; the keeper has stopped."""
        self._clock = clock
        self._renew_at = 0.0
        self._tasks = BackgroundTasks(f"pass-keeper/{gate.project}")
        self._task: asyncio.Task[None] | None = None

    @property
    def expires(self) -> float | None:
        return self.grant.access.expires if self.grant is not None else None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        """Fetch the first pass (raising the ``AccountError`` if we cannot), then keep it fresh."""
        grant = await self._request()
        self._apply(grant)
        await self._read_rollback()
        self._task = self._tasks.spawn("renew", self._run(grant.refresh_interval))

    async def close(self) -> None:
        await self._tasks.close()

    async def _request(self) -> PassGrant:
        return await self.session.request_pass(self.gate.me, self.sign, project=self.gate.project)

    def _apply(self, grant: PassGrant) -> None:
        try:
            self.gate.set_pass(grant.access)
        except (
            AccessDenied
        ) as exc:  # e.g. the coordinator signs with another key than the manifest's
            raise AccountError(f"the coordinator's pass does not admit this peer: {exc}") from None
        self.gate.set_revoked(grant.revoked)
        self.grant = grant
        now = self._clock.time()
        self._renew_at = now + max(0.0, grant.access.expires - now) / 2

    async def _run(self, interval: float) -> None:
        next_poll = self._clock.time() + interval
        backoff = min(1.0, interval)
        while True:
            await asyncio.sleep(max(0.0, min(self._renew_at, next_poll) - self._clock.time()))
            renewing = self._clock.time() >= self._renew_at
            try:
                if renewing:
                    grant = await self._request()
                    self._apply(grant)
                    interval = grant.refresh_interval
                else:
                    self._revocations(await self.session.client.revocations())
                await self._read_rollback()
                next_poll = self._clock.time() + interval  # a grant carries the revocations too
                backoff = min(1.0, interval)
                self.error = None
            except AccessRefused as exc:
                self.refused = exc
                self._report(exc, "stopped renewing the access pass")
                return
            except AccountError as exc:
                now = self._clock.time()
                delay = backoff
                if renewing:  # try a few times more before the pass runs out
                    delay = min(delay, max(0.5, ((self.expires or now) - now) / 4))
                self._report(exc, f"will try again in {delay:.1f} s")
                if renewing:
                    self._renew_at = now + delay
                else:
                    next_poll = now + delay
                backoff = min(backoff * 2, max(MAX_BACKOFF, interval))

    def _revocations(self, revoked: frozenset[PeerID]) -> None:
        self.gate.set_revoked(revoked)
        if self.gate.me in revoked:
            self._renew_at = (
                self._clock.time()
            )  # our own key: ask the coordinator now whether we are out

    async def _read_rollback(self) -> None:
        """The latest rollback order onto the gate, for the peer's training to verify and apply.
        Best effort: a coordinator from before rollbacks has no ``/rollback`` (404), and an
        outage is the pass's to report; the next poll asks again."""
        try:
            self.gate.set_rollback_order(await self.session.client.rollback_order())
        except AccountError as exc:
            log.debug("reading the rollback order of %s: %s", self.gate.project, exc)

    def _report(self, exc: AccountError, what: str) -> None:
        self.error = exc
        log.warning("access pass of %s: %s; %s", self.gate.project, exc, what)
        if self.on_error is not None:
            self.on_error(exc)
