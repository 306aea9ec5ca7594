"""AccountSession: calls made as a logged-in user, renewing the session when it runs out.

The coordinator's session secret is short-lived; the refresh secret renews it and rotates (the old
one stops working). On a 401 the session refreshes once and retries the call; whoever owns the
secrets (the engine's credential store) hears about every new pair through ``on_tokens``, and
through ``on_expired`` when the refresh secret itself is refused (a new login is needed). Refreshes
are serialized: two calls that fail together must not both spend the same refresh secret, or the
second would be refused and log the user out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from core.account.client import CoordinatorClient
from core.account.errors import NotLoggedIn
from core.account.proof import Signer
from core.account.replies import CreditedEpochs, PassGrant, SessionTokens
from core.trust.peer_id import PeerID
from core.util.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)

T = TypeVar("T")

EARLY_REFRESH = 5.0
"""Seconds before the session's stated expiry at which we renew it rather than be refused."""


class AccountSession:
    def __init__(
        self,
        client: CoordinatorClient,
        tokens: SessionTokens | None,
        on_tokens: Callable[[SessionTokens], None] | None = None,
        *,
        on_expired: Callable[[], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.client = client
        self.tokens = tokens
        self.on_tokens = on_tokens
        self.on_expired = on_expired
        self._clock = clock
        self._refreshing = asyncio.Lock()

    @property
    def username(self) -> str | None:
        return self.tokens.username if self.tokens is not None else None

    def replace(self, tokens: SessionTokens | None) -> None:
        """Use a new login (or none); calls in flight finish with what they started with."""
        self.tokens = tokens

    async def request_pass(self, peer: PeerID, sign: Signer, *, project: str) -> PassGrant:
        """A pass for ``peer`` in ``project``; ``sign`` is the peer key's (it proves we hold it)."""
        return await self._authorized(
            lambda t: self.client.request_pass(t, peer, sign, project=project)
        )

    async def leaderboard_me(self) -> dict[str, Any]:
        return await self._authorized(self.client.leaderboard_me)

    async def credit_mine(self, peer: PeerID, since: int) -> CreditedEpochs:
        return await self._authorized(lambda t: self.client.credit_mine(t, peer, since))

    async def report_contributions(self, report: Mapping[str, Any]) -> dict[str, Any]:
        return await self._authorized(lambda t: self.client.report_contributions(t, report))

    async def report_evaluation(self, report: Mapping[str, Any]) -> dict[str, Any]:
        return await self._authorized(lambda t: self.client.report_evaluation(t, report))

    async def report_evidence(self, report: Mapping[str, Any]) -> dict[str, Any]:
        return await self._authorized(lambda t: self.client.report_evidence(t, report))

    async def report_receipts(self, report: Mapping[str, Any]) -> dict[str, Any]:
        return await self._authorized(lambda t: self.client.report_receipts(t, report))

    async def logout(self) -> None:
        """End the session at the coordinator (an expired one is already ended) and forget it."""
        tokens, self.tokens = self.tokens, None
        if tokens is not None:
            with contextlib.suppress(NotLoggedIn):  # an expired session is already ended
                await self.client.logout(tokens)

    async def refresh(self, used: SessionTokens) -> SessionTokens:
        """Renew the session that ``used`` held, unless another call already did."""
        async with self._refreshing:
            current = self._current()
            if current is not used:
                return current  # renewed (or replaced by a new login) while we waited
            try:
                fresh = await self.client.refresh(current)
            except NotLoggedIn as exc:
                self.tokens = None  # the refresh secret is spent or expired: a new login is needed
                if self.on_expired is not None:
                    self.on_expired()
                raise NotLoggedIn(
                    f"the login of {current.username!r} has expired ({exc}); "
                    "log in again: barnraise ctl login"
                ) from None
            self.tokens = fresh
            log.info("renewed the coordinator session of %s", fresh.username)
            if self.on_tokens is not None:
                self.on_tokens(fresh)
            return fresh

    async def _authorized(self, call: Callable[[SessionTokens], Awaitable[T]]) -> T:
        tokens = self._current()
        if tokens.session_expires - EARLY_REFRESH <= self._clock.time():
            tokens = await self.refresh(tokens)
        try:
            return await call(tokens)
        except NotLoggedIn:
            pass  # the session ended early (the coordinator restarted, say): renew it once
        return await call(await self.refresh(tokens))

    def _current(self) -> SessionTokens:
        if self.tokens is None:
            raise NotLoggedIn(
                f"not logged in at {self.client.base_url}; log in with 'barnraise ctl login'"
            )
        return self.tokens
