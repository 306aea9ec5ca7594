"""EngineClient: the typed async client of the control API (used by ``barnraise ctl`` and the GUI).

Every call sends the token and the API version; every answer is decoded into the schema's
dataclasses, and every failure arrives as an ``ApiError`` subclass with a message for the user
(``EngineUnavailable`` when nothing answers).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any, TypeVar

import aiohttp

from core.api.codec import decode, encode
from core.api.endpoint import Endpoint, endpoint_path
from core.api.errors import ApiError, EngineUnavailable, VersionMismatch, error_from_wire
from core.api.events import Event, UnknownEventType
from core.api.schema import (
    API_VERSION,
    TRY_MODEL_TIMEOUT,
    VERSION_HEADER,
    AccountInfo,
    AttachRequest,
    CreditCheck,
    Diagnostics,
    EngineState,
    Leaderboard,
    LoginRequest,
    ModelAnswer,
    MyRank,
    PreviewRequest,
    ProjectInfo,
    ProjectList,
    ProjectOffers,
    ProjectPreview,
    SettingsUpdate,
    SettingValue,
    SnoozeRequest,
    Statistics,
    TrainingHistory,
    TryModelRequest,
)
from core.api.schema import Settings as SettingsView
from core.config.paths import UserDirs

T = TypeVar("T")
log = logging.getLogger(__name__)
_CLEAN_CLOSE = frozenset({1000, 1001})
"""Websocket close codes of an engine that ended the stream on purpose (normal, going away)."""


class EngineClient:
    def __init__(self, endpoint: Endpoint, *, timeout: float = 15.0) -> None:
        if endpoint.api_version != API_VERSION:
            raise VersionMismatch(
                f"the running engine speaks API version {endpoint.api_version}, this client "
                f"{API_VERSION}; restart the engine after updating Barnraise"
            )
        self.endpoint = endpoint
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def discover(cls, dirs: UserDirs | None = None, **kwargs: Any) -> EngineClient:
        """The client of the engine running for this user (``EngineUnavailable`` if none)."""
        return cls(Endpoint.read(endpoint_path(dirs)), **kwargs)

    async def __aenter__(self) -> EngineClient:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # ---- reading -----------------------------------------------------------------------------------

    async def state(self) -> EngineState:
        return await self._call("GET", "/v1/state", EngineState)

    async def settings(self) -> SettingsView:
        return await self._call("GET", "/v1/settings", SettingsView)

    async def statistics(self, project: str | None = None, days: int = 30) -> Statistics:
        query = {"days": str(days)} | ({"project": project} if project else {})
        return await self._call("GET", "/v1/statistics", Statistics, params=query)

    async def projects(self) -> ProjectList:
        return await self._call("GET", "/v1/projects", ProjectList)

    async def offers(self) -> ProjectOffers:
        """Projects the user could pick: demo swarms running on this computer, attached ones."""
        return await self._call("GET", "/v1/projects/offers", ProjectOffers)

    async def history(self) -> TrainingHistory:
        """The active project's collaboration epochs (the loss curve), oldest first."""
        return await self._call("GET", "/v1/history", TrainingHistory)

    async def diagnostics(self) -> Diagnostics:
        """Versions, folders and the engine log's last lines, for a bug report."""
        return await self._call("GET", "/v1/diagnostics", Diagnostics)

    # ---- commands ------------------------------------------------------------------------------------

    async def start(self) -> EngineState:
        """Opt in: contribute whenever the schedule allows (clears a pause and a snooze)."""
        return await self._call("POST", "/v1/start", EngineState)

    async def pause(self) -> EngineState:
        return await self._call("POST", "/v1/pause", EngineState)

    async def resume(self) -> EngineState:
        return await self._call("POST", "/v1/resume", EngineState)

    async def snooze(self, minutes: float) -> EngineState:
        return await self._call("POST", "/v1/snooze", EngineState, body=SnoozeRequest(minutes))

    async def set_settings(self, values: Mapping[str, SettingValue]) -> SettingsView:
        body = SettingsUpdate(dict(values))
        return await self._call("PATCH", "/v1/settings", SettingsView, body=body)

    async def attach(self, request: AttachRequest) -> ProjectInfo:
        return await self._call("POST", "/v1/projects", ProjectInfo, body=request)

    async def detach(self, name: str) -> ProjectList:
        return await self._call("DELETE", f"/v1/projects/{name}", ProjectList)

    async def preview_project(self, url: str) -> ProjectPreview:
        """What the project at ``url`` is and would use here: the engine fetches its signed
        manifest and checks it, attaching nothing (``CoordinatorUnreachable`` if it does not
        answer, ``BadRequest`` for a manifest that fails its checks)."""
        return await self._call(
            "POST", "/v1/projects/preview", ProjectPreview, body=PreviewRequest(url)
        )

    async def check_project(self, name: str) -> ProjectInfo:
        """Look now for a signed update of a project joined by URL (the engine also looks every
        refresh interval); the answer says the version held and why an update was refused."""
        return await self._call("POST", f"/v1/projects/{name}/check", ProjectInfo)

    async def activate_project(self, name: str) -> ProjectInfo:
        """Contribute to the attached project ``name`` instead of the active one (the active one's
        peer stops, nothing counted is lost; the account follows to the new project's
        coordinator); already active: nothing changes. ``NotFound`` if none is called so."""
        return await self._call("POST", f"/v1/projects/{name}/activate", ProjectInfo)

    async def try_model(self, text: str) -> ModelAnswer:
        """Ask the active project's model about ``text``: its top guesses for the first ``[MASK]``
        (or ``___``), or, for a causal model, the text completed. An answer that is no answer says
        why (``ModelAnswer.code`` and ``reason``: no project, not here yet, ...); ``BadRequest``
        for a text it cannot take (empty, too long, no missing word for a masked model)."""
        return await self._call(
            "POST",
            "/v1/model/try",
            ModelAnswer,
            body=TryModelRequest(text),
            timeout=TRY_MODEL_TIMEOUT,  # a copy of the weights and forward passes on the CPU
        )

    # ---- the account at the active project's coordinator ----------------------------------------------

    async def account(self) -> AccountInfo:
        return await self._call("GET", "/v1/account", AccountInfo)

    async def login(self, username: str, password: str, *, signup: bool = False) -> AccountInfo:
        """Log in (creating the account first with ``signup``); the engine keeps the session in
        the OS keyring, never the password."""
        body = LoginRequest(username, password, signup)
        return await self._call("POST", "/v1/account/login", AccountInfo, body=body)

    async def logout(self) -> AccountInfo:
        return await self._call("POST", "/v1/account/logout", AccountInfo)

    async def leaderboard(self, limit: int = 10) -> Leaderboard:
        return await self._call("GET", "/v1/leaderboard", Leaderboard, params={"limit": str(limit)})

    async def my_rank(self) -> MyRank:
        return await self._call("GET", "/v1/leaderboard/me", MyRank)

    async def credit_check(self) -> CreditCheck:
        """This computer's own count of its landed epochs in the active project beside what the
        project's coordinator credited to its key, and why any epoch differs."""
        return await self._call("GET", "/v1/credit", CreditCheck)

    async def shutdown(self) -> None:
        """Ask the engine to stop (it saves its state first)."""
        await self._call("POST", "/v1/shutdown", None)

    async def events(self, since: int | None = None) -> AsyncIterator[Event]:
        """The event stream, in order; with ``since``, the kept backlog after that seq first.

        It ends normally when the engine closes it (the engine stops, or drops a subscriber that fell
        too far behind), and raises ``EngineUnavailable`` when the connection is lost without a
        goodbye: the engine process died."""
        params = {} if since is None else {"since": str(since)}
        try:
            async with self._http().ws_connect(
                f"{self.endpoint.url}/v1/events",
                headers=self._headers(),
                params=params,
                heartbeat=30.0,
            ) as ws:
                async for message in ws:
                    if message.type is aiohttp.WSMsgType.TEXT:
                        try:
                            event = Event.from_wire(json.loads(message.data), strict=False)
                        except UnknownEventType as exc:  # from a newer engine: read on
                            log.debug("skipped an event: %s", exc)
                            continue
                        yield event
                    elif message.type is aiohttp.WSMsgType.ERROR:
                        break
                code = ws.close_code
        except aiohttp.WSServerHandshakeError as exc:
            raise _handshake_error(exc) from None
        except aiohttp.ClientConnectionError as exc:
            raise EngineUnavailable(f"the engine at {self.endpoint.url} is gone: {exc}") from None
        if code not in _CLEAN_CLOSE:
            raise EngineUnavailable(
                f"the connection to the engine at {self.endpoint.url} was lost (close code {code})"
            )

    # ---- plumbing ------------------------------------------------------------------------------------

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            # Plain, not core.util.web_client's: the engine's API is on this computer's loopback,
            # and a session that reads the proxy settings would send it to the proxy.
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.endpoint.token}", VERSION_HEADER: str(API_VERSION)}

    async def _call(
        self,
        method: str,
        path: str,
        kind: type[T] | None,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> T:
        """``timeout``: seconds for this call instead of the client's own."""
        limit = self._timeout if timeout is None else aiohttp.ClientTimeout(total=timeout)
        try:
            async with self._http().request(
                method,
                self.endpoint.url + path,
                headers=self._headers(),
                json=None if body is None else encode(body),
                params=params,
                timeout=limit,
            ) as response:
                try:
                    payload = await response.json(content_type=None)
                except (ValueError, aiohttp.ContentTypeError):
                    payload = None
        except (aiohttp.ClientConnectionError, TimeoutError) as exc:
            raise EngineUnavailable(
                f"the engine at {self.endpoint.url} does not answer ({exc or type(exc).__name__})"
            ) from None
        if not isinstance(payload, dict):
            raise ApiError(f"the engine sent a malformed answer (HTTP {response.status})")
        if response.status >= 400 or "error" in payload:
            error = payload.get("error")
            error = error if isinstance(error, dict) else {}
            raise error_from_wire(
                error.get("code"), error.get("message", f"HTTP {response.status}"), error.get("id")
            )
        if kind is None:
            return None  # type: ignore[return-value]
        return decode(kind, payload.get("data"), kind.__name__, strict=False)


def _handshake_error(exc: aiohttp.WSServerHandshakeError) -> ApiError:
    codes = {401: "unauthorized", 403: "forbidden", 426: "version_mismatch"}
    return error_from_wire(
        codes.get(exc.status, "internal"), f"event stream refused: {exc.message}"
    )
