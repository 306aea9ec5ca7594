"""ControlServer: the engine's control API over HTTP and a websocket, on 127.0.0.1 only.

Three gates before any handler runs: the ``Host`` header must name the loopback address we listen
on (a page using DNS rebinding gets a foreign host name), a request carrying a browser ``Origin``
is refused (no web page may drive the engine, even one that learned the port), and the bearer token
must match (compared in constant time). A request with a body must declare it as JSON
(``Content-Type: application/json``, UTF-8): a web page may post plain text anywhere without
asking the browser's permission first, never JSON. Bodies nested deeper than ``MAX_JSON_NESTING``
are refused before anything walks them. Handlers are thin: decode the request with the schema, call
the engine's method of the same name as the API call, encode the answer. Every error leaves as
``{"error": {"code", "message"}}`` (with ``"id"`` for the engine's own failures), its status and
code from the one table in ``errors``: an unexpected exception is a JSON 500 whose id is in the
log with its traceback, never aiohttp's plain-text page. At shutdown, calls still running get
``SHUTDOWN_GRACE`` seconds before they are cancelled, so no call can hold the engine's stop.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import WSMsgType, web

from core.api.codec import decode, encode
from core.api.errors import (
    ApiError,
    BadRequest,
    Forbidden,
    Unauthorized,
    UnsupportedMediaType,
    VersionMismatch,
)
from core.api.schema import (
    API_VERSION,
    VERSION_HEADER,
    AttachRequest,
    LoginRequest,
    PreviewRequest,
    ProjectList,
    ProjectOffers,
    SettingsUpdate,
    SnoozeRequest,
    TryModelRequest,
)
from core.control.errors import api_error, http_error
from core.engine import Engine
from core.util.errors import BarnraiseError
from core.util.nesting import deeper_than

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

MAX_JSON_NESTING = 32
"""The deepest a request body may nest (the API's own bodies nest three levels)."""
SHUTDOWN_GRACE = 2.0
"""Seconds that calls still running at shutdown get to finish before they are cancelled."""


class ControlServer:
    def __init__(
        self,
        engine: Engine,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        on_shutdown: Callable[[], None] | None = None,
    ) -> None:
        if host not in ("127.0.0.1", "::1", "localhost"):
            raise BarnraiseError("the control API listens on the loopback address only")
        self.engine = engine
        self.host = host
        self.port = port
        self.token = token or secrets.token_urlsafe(32)
        self._on_shutdown = on_shutdown
        self._runner: web.AppRunner | None = None
        self._sockets: set[web.WebSocketResponse] = set()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        app = web.Application(middlewares=[self._guard], client_max_size=256 * 1024)
        app.add_routes(
            [
                web.get("/v1/state", self._state),
                web.get("/v1/settings", self._settings),
                web.patch("/v1/settings", self._set_settings),
                web.get("/v1/statistics", self._statistics),
                web.get("/v1/projects", self._projects),
                web.get("/v1/projects/offers", self._offers),
                web.get("/v1/history", self._history),
                web.get("/v1/diagnostics", self._diagnostics),
                web.post("/v1/projects", self._attach),
                web.post("/v1/projects/preview", self._preview_project),
                web.post("/v1/projects/{name}/check", self._check_project),
                web.post("/v1/projects/{name}/activate", self._activate_project),
                web.delete("/v1/projects/{name}", self._detach),
                web.post("/v1/model/try", self._try_model),
                web.post("/v1/start", self._start),
                web.post("/v1/pause", self._pause),
                web.post("/v1/resume", self._resume),
                web.post("/v1/snooze", self._snooze),
                web.post("/v1/shutdown", self._shutdown),
                web.get("/v1/account", self._account),
                web.post("/v1/account/login", self._login),
                web.post("/v1/account/logout", self._logout),
                web.get("/v1/leaderboard", self._leaderboard),
                web.get("/v1/leaderboard/me", self._my_rank),
                web.get("/v1/credit", self._credit_check),
                web.get("/v1/events", self._events),
            ]
        )
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_GRACE
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=False)
        await site.start()
        server = site._server  # the bound port when 0 was asked for
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = int(sockets[0].getsockname()[1])

    async def close(self) -> None:
        for ws in list(self._sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ---- the gates -------------------------------------------------------------------------------

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            self._check(request)
            return await handler(request)
        except web.HTTPException as exc:  # aiohttp's own: no such route, wrong method, too large
            return _error(http_error(exc))
        except Exception as exc:  # the engine's errors by the table; the rest logged, with an id
            return _error(api_error(exc, f"{request.method} {request.path}"))

    def _check(self, request: web.Request) -> None:
        host = request.headers.get("Host", "")
        if host.rsplit(":", 1)[0].strip("[]") not in ("127.0.0.1", "::1", "localhost"):
            raise Forbidden(f"requests must be addressed to the loopback address, not {host!r}")
        if "Origin" in request.headers:
            raise Forbidden("requests from web pages are refused")
        supplied = request.headers.get("Authorization", "")
        expected = f"Bearer {self.token}"
        if not supplied.isascii():  # tokens are ASCII; other bytes arrive as lone surrogates
            raise Unauthorized("the Authorization header must be ASCII: 'Bearer <token>'")
        if not hmac.compare_digest(supplied.encode(), expected.encode()):
            raise Unauthorized("a valid token is required (see the engine's endpoint file)")
        version = request.headers.get(VERSION_HEADER)
        if version is not None and version != str(API_VERSION):
            raise VersionMismatch(f"this engine speaks API version {API_VERSION}, not {version!r}")
        if request.body_exists:
            _check_json_type(request)

    # ---- handlers --------------------------------------------------------------------------------

    async def _state(self, request: web.Request) -> web.Response:
        return _ok(self.engine.state())

    async def _settings(self, request: web.Request) -> web.Response:
        return _ok(self.engine.settings())

    async def _set_settings(self, request: web.Request) -> web.Response:
        update = decode(SettingsUpdate, await _body(request))
        return _ok(await self.engine.set_settings(update.values))

    async def _statistics(self, request: web.Request) -> web.Response:
        project = request.query.get("project") or None
        try:
            days = int(request.query.get("days", "30"))
        except ValueError:
            raise BadRequest("days must be a whole number") from None
        return _ok(self.engine.statistics(project, days))

    async def _projects(self, request: web.Request) -> web.Response:
        return _ok(ProjectList(self.engine.projects()))

    async def _offers(self, request: web.Request) -> web.Response:
        return _ok(ProjectOffers(await self.engine.offers()))

    async def _history(self, request: web.Request) -> web.Response:
        return _ok(self.engine.history())

    async def _diagnostics(self, request: web.Request) -> web.Response:
        # the token guards this very API: it is blotted out should it ever reach the log
        return _ok(await self.engine.diagnostics([self.token]))

    async def _attach(self, request: web.Request) -> web.Response:
        return _ok(await self.engine.attach(decode(AttachRequest, await _body(request))))

    async def _preview_project(self, request: web.Request) -> web.Response:
        preview = decode(PreviewRequest, await _body(request))
        return _ok(await self.engine.preview_project(preview.url))

    async def _check_project(self, request: web.Request) -> web.Response:
        return _ok(await self.engine.check_project(request.match_info["name"]))

    async def _activate_project(self, request: web.Request) -> web.Response:
        return _ok(await self.engine.activate_project(request.match_info["name"]))

    async def _detach(self, request: web.Request) -> web.Response:
        return _ok(ProjectList(await self.engine.detach(request.match_info["name"])))

    async def _try_model(self, request: web.Request) -> web.Response:
        question = decode(TryModelRequest, await _body(request))
        return _ok(await self.engine.try_model(question.text))

    async def _start(self, request: web.Request) -> web.Response:
        return _ok(await self.engine.start())

    async def _pause(self, request: web.Request) -> web.Response:
        return _ok(await self.engine.pause())

    async def _resume(self, request: web.Request) -> web.Response:
        return _ok(await self.engine.resume())

    async def _snooze(self, request: web.Request) -> web.Response:
        return _ok(await self.engine.snooze(decode(SnoozeRequest, await _body(request)).minutes))

    async def _shutdown(self, request: web.Request) -> web.Response:
        if self._on_shutdown is not None:
            asyncio.get_running_loop().call_soon(self._on_shutdown)
        return _ok(None)

    async def _account(self, request: web.Request) -> web.Response:
        return _ok(self.engine.account())

    async def _login(self, request: web.Request) -> web.Response:
        login = decode(LoginRequest, await _body(request))
        return _ok(await self.engine.login(login.username, login.password, signup=login.signup))

    async def _logout(self, request: web.Request) -> web.Response:
        return _ok(await self.engine.logout())

    async def _leaderboard(self, request: web.Request) -> web.Response:
        try:
            limit = int(request.query.get("limit", "10"))
        except ValueError:
            raise BadRequest("limit must be a whole number") from None
        return _ok(await self.engine.leaderboard(limit))

    async def _my_rank(self, request: web.Request) -> web.Response:
        return _ok(await self.engine.my_rank())

    async def _credit_check(self, request: web.Request) -> web.Response:
        return _ok(await self.engine.credit_check())

    async def _events(self, request: web.Request) -> web.StreamResponse:
        since_text = request.query.get("since")
        try:
            since = int(since_text) if since_text is not None else None
        except ValueError:
            raise BadRequest("since must be a whole number") from None
        ws = web.WebSocketResponse(heartbeat=30.0)
        await ws.prepare(request)
        self._sockets.add(ws)
        subscription = self.engine.events.subscribe(since)
        reader = asyncio.create_task(_drain(ws), name="control/events-reader")
        try:
            while not ws.closed:
                getter = asyncio.ensure_future(subscription.next())
                done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    getter.cancel()
                    break  # the client went away
                event = getter.result()
                if event is None:
                    break  # the engine stops, or this client fell too far behind
                await ws.send_str(json.dumps(event.to_wire()))
        finally:
            subscription.close()
            reader.cancel()
            self._sockets.discard(ws)
            await ws.close()
        return ws


async def _drain(ws: web.WebSocketResponse) -> None:
    """Read (and ignore) what the client sends, so that its close is noticed."""
    async for message in ws:
        if message.type in (WSMsgType.CLOSE, WSMsgType.ERROR):
            break


def _check_json_type(request: web.Request) -> None:
    """The body is declared as JSON in UTF-8 (a charset parameter may say so)."""
    if request.content_type != "application/json":
        raise UnsupportedMediaType(
            f"the request body must be sent as Content-Type: application/json, "
            f"not {request.content_type!r}"
        )
    charset = request.charset
    if charset is not None and charset.lower().replace("-", "") != "utf8":
        raise UnsupportedMediaType(f"JSON bodies are UTF-8, not {charset!r}")


async def _body(request: web.Request) -> Any:
    """The request's JSON body: declared as JSON, UTF-8, and nested at most MAX_JSON_NESTING."""
    _check_json_type(request)
    raw = await request.read()
    try:
        value = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("the request body must be JSON (UTF-8)") from None
    except RecursionError:  # the parser recurses once per level
        raise BadRequest(f"the request body nests deeper than {MAX_JSON_NESTING} levels") from None
    if deeper_than(value, MAX_JSON_NESTING):
        raise BadRequest(f"the request body nests deeper than {MAX_JSON_NESTING} levels")
    return value


def _ok(data: Any) -> web.Response:
    return web.json_response({"api_version": API_VERSION, "data": encode(data)})


def _error(exc: ApiError) -> web.Response:
    error: dict[str, Any] = {"code": exc.code, "message": exc.message}
    if exc.error_id is not None:
        error["id"] = exc.error_id
    return web.json_response({"api_version": API_VERSION, "error": error}, status=exc.status)
