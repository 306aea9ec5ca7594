"""CoordinatorClient: the project coordinator's HTTP API, typed, with errors in plain words.

One aiohttp session per client (use it as an async context manager), from
``core.util.web_client``: the operating system's certificates and proxy settings. Each call maps the
coordinator's answer onto the account errors: 401 on a login is ``LoginFailed`` but on a session
call ``NotLoggedIn``, 403 is ``AccessRefused`` (or ``SignupClosed`` on a sign-up), 429 is
``RateLimited`` with the wait it asks for, and a refused connection, a timeout, a 5xx or a reply that
is not the API's JSON is ``CoordinatorUnavailable``. The coordinator's words come with every
error, and the error id it gives its own failures (``"id"``, also in its log) with a 5xx, so the
organizer can find the failure. Passwords go in request bodies only, never in URLs, messages or
logs.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import aiohttp

from core.account.errors import (
    AccessRefused,
    AccountError,
    CoordinatorUnavailable,
    LoginFailed,
    NotLoggedIn,
    RateLimited,
    SignupClosed,
)
from core.account.proof import Signer, proof_payload, signature_text
from core.account.replies import (
    CoordinatorInfo,
    CreditedEpochs,
    PassGrant,
    Reply,
    SessionTokens,
    coordinator_info,
    credited_epochs,
    pass_grant,
    revoked_peers,
    session_tokens,
)
from core.trust.peer_id import PeerID
from core.util.web_client import client_session, connection_problem

ErrorMap = Mapping[int, type[AccountError]]
SESSION_ERRORS: ErrorMap = {401: NotLoggedIn, 403: AccessRefused}
PASS_ERRORS: ErrorMap = {**SESSION_ERRORS, 409: AccessRefused}


class CoordinatorClient:
    def __init__(self, base_url: str, *, timeout: float = 10.0) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise AccountError(f"the coordinator's address must be an http(s):// URL: {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> CoordinatorClient:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    # ---- accounts ----------------------------------------------------------------------------------

    async def info(self) -> CoordinatorInfo:
        return coordinator_info(await self._call("GET", "/info"))

    async def signup(self, username: str, password: str) -> str:
        """Create the account; returns the username as the coordinator spelled it."""
        body = {"username": username, "password": password}
        reply = await self._call("POST", "/signup", body=body, errors={403: SignupClosed})
        return reply.text("username")

    async def login(self, username: str, password: str) -> SessionTokens:
        body = {"username": username, "password": password}
        errors = {401: LoginFailed, 403: AccessRefused}
        return session_tokens(await self._call("POST", "/login", body=body, errors=errors))

    async def refresh(self, tokens: SessionTokens) -> SessionTokens:
        """New session and refresh secrets; the old refresh secret stops working."""
        body = {"refresh": tokens.refresh}
        reply = await self._call("POST", "/session/refresh", body=body, errors=SESSION_ERRORS)
        return session_tokens(reply)

    async def logout(self, tokens: SessionTokens) -> None:
        await self._call("POST", "/logout", token=tokens.session, errors=SESSION_ERRORS)

    # ---- passes and revocations --------------------------------------------------------------------

    async def request_pass(
        self, tokens: SessionTokens, peer: PeerID, sign: Signer, *, project: str
    ) -> PassGrant:
        """A pass for ``peer`` in ``project``, proving with ``sign`` (the peer key's) that we hold
        the key: ask for a challenge, check it is for this project and user, sign it, send it."""
        reply = await self._call(
            "POST", "/pass/challenge", token=tokens.session, errors=SESSION_ERRORS
        )
        challenge = reply.text("challenge")
        named = (reply.text("project"), reply.text("username"))
        if named != (project, tokens.username):
            raise AccountError(
                f"the coordinator at {self.base_url} asked to sign for project {named[0]!r} as "
                f"{named[1]!r}, not {project!r} as {tokens.username!r}; refusing to sign"
            )
        signature = sign(proof_payload(project, tokens.username, peer, challenge))
        body = {"peer": str(peer), "challenge": challenge, "signature": signature_text(signature)}
        # 409: another account proved this key first; asking again cannot change that
        reply = await self._call(
            "POST", "/pass", body=body, token=tokens.session, errors=PASS_ERRORS
        )
        return pass_grant(reply, peer)

    async def revocations(self) -> frozenset[PeerID]:
        return revoked_peers(await self._call("GET", "/revocations"))

    async def rollback_order(self) -> str | None:
        """The text of the latest rollback order (None: there is none). Checked against the
        project key by whoever applies it, not here."""
        reply = await self._call("GET", "/rollback")
        order = reply.data.get("rollback")
        if order is not None and not isinstance(order, str):
            raise reply.malformed("'rollback' must be an order's text or null")
        return order

    # ---- contributions and the leaderboard ---------------------------------------------------------

    async def leaderboard(self, limit: int = 10) -> dict[str, Any]:
        reply = await self._call("GET", "/leaderboard", params={"limit": str(limit)})
        reply.get("users", list)
        reply.get("totals", dict)
        return reply.data

    async def leaderboard_me(self, tokens: SessionTokens) -> dict[str, Any]:
        reply = await self._call(
            "GET", "/leaderboard/me", token=tokens.session, errors=SESSION_ERRORS
        )
        reply.text("username")
        reply.get("history", dict)
        return reply.data

    async def credit_mine(self, tokens: SessionTokens, peer: PeerID, since: int) -> CreditedEpochs:
        """What the coordinator credited to ``peer`` (a key this account proved it holds), in all
        and per epoch from ``since`` on; ``AccessRefused`` for a key of someone else's."""
        reply = await self._call(
            "GET",
            "/credit/mine",
            token=tokens.session,
            params={"peer": str(peer), "since": str(since)},
            errors=SESSION_ERRORS,
        )
        return credited_epochs(reply, peer)

    async def report_contributions(
        self, tokens: SessionTokens, report: Mapping[str, Any]
    ) -> dict[str, Any]:
        reply = await self._call(
            "POST", "/contributions", body=report, token=tokens.session, errors=SESSION_ERRORS
        )
        reply.number("accepted")
        reply.get("rejected", list)
        return reply.data

    async def report_evaluation(
        self, tokens: SessionTokens, report: Mapping[str, Any]
    ) -> dict[str, Any]:
        """One held-out evaluation of the backbone's replica, as a moderator's session."""
        reply = await self._call(
            "POST", "/evaluations", body=report, token=tokens.session, errors=SESSION_ERRORS
        )
        reply.number("epoch")
        reply.get("stored", bool)
        return reply.data

    async def report_evidence(
        self, tokens: SessionTokens, report: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Members' signed accusations (``{"evidence": [...]}``), as a moderator's session."""
        reply = await self._call(
            "POST", "/evidence", body=report, token=tokens.session, errors=SESSION_ERRORS
        )
        reply.number("accepted")
        reply.get("rejected", list)
        return reply.data

    async def report_receipts(
        self, tokens: SessionTokens, report: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Trainers' signed receipts for this account's expert server (``{"receipts": [...]}``)."""
        reply = await self._call(
            "POST", "/receipts", body=report, token=tokens.session, errors=SESSION_ERRORS
        )
        reply.number("accepted")
        reply.number("credited")
        reply.get("rejected", list)
        return reply.data

    # ---- plumbing ----------------------------------------------------------------------------------

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = client_session(self._timeout, url=self.base_url)
        return self._http

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        token: str | None = None,
        params: Mapping[str, str] | None = None,
        errors: ErrorMap | None = None,
    ) -> Reply:
        what = f"{method} {path}"
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        try:
            async with self._session().request(
                method, self.base_url + path, json=body, headers=headers, params=params
            ) as response:
                status = response.status
                retry_header = response.headers.get("Retry-After")
                text = await response.text(errors="replace")
        except (aiohttp.ClientSSLError, ssl.SSLError) as exc:
            # it answered, but not in a way this computer trusts: say that, not "does not answer"
            raise CoordinatorUnavailable(
                f"cannot connect securely to the coordinator at {self.base_url}: "
                f"{connection_problem(exc)}"
            ) from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            reason = str(exc) or type(exc).__name__
            raise CoordinatorUnavailable(
                f"the coordinator at {self.base_url} does not answer ({reason})"
            ) from None
        data = _json(text)
        if status < 400:
            return Reply({} if status == 204 else data, what, self.base_url)
        message = _error_text(data, status)
        if status >= 500:
            raise CoordinatorUnavailable(
                f"the coordinator at {self.base_url} failed on {what} (HTTP {status}: {message})"
            )
        if status == 429:
            wait = _retry_after(data, retry_header)
            raise RateLimited(f"{message} (try again in {wait:.0f} s)", wait)
        cls = (errors or {}).get(status, AccountError)
        raise cls(message)


def _json(text: str) -> object:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


def _error_text(data: object, status: int) -> str:
    """The coordinator's words, and the id of its failure where it gave one."""
    text = f"the coordinator refused the request (HTTP {status})"
    if not isinstance(data, dict):
        return text
    if isinstance(data.get("error"), str) and data["error"].strip():
        text = str(data["error"])[:500]
    error_id = data.get("id")
    named = isinstance(error_id, str) and error_id in text  # a coordinator of this version does
    if isinstance(error_id, str) and error_id.isalnum() and len(error_id) <= 32 and not named:
        text += f" (error id {error_id})"
    return text


def _retry_after(data: object, header: str | None) -> float:
    candidates: list[object] = [header]
    if isinstance(data, dict):
        candidates.insert(0, data.get("retry_after"))
    for value in candidates:
        try:
            seconds = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
        if 0 <= seconds < 86400:
            return seconds
    return 60.0
