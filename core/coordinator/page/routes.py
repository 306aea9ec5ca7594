"""``ProjectPage``: the coordinator's public web pages and their HTTP side.

Routes: ``GET /`` (the project page), ``GET /stats`` (its live figures as JSON), ``GET /u/<name>``
(a volunteer's page) and ``GET /static/<name>`` (script, stylesheet, icon). ``?poll=SECONDS`` on the
project page sets how often its script asks for ``/stats`` (``POLL_SECONDS`` by default; the
browser test asks for less).

Every answer carries a strict Content-Security-Policy (our own files only: no inline script or
style, no frames, no forms), ``X-Content-Type-Options: nosniff`` and no referrer. The HTML routes
answer errors with an HTML page (404 for a name not on the leaderboard, 500 with a logged error id);
``/stats`` answers them as JSON, as the API does.

The figures are read at most once per ``MAX_AGE`` seconds, and again as soon as a report arrives
(``changed``): a page open in many browsers costs the database one read per interval, not one
per visitor. The published model is learned from ``network.checkpoint_url`` at most once a minute
(``published_model``); ``close`` stops a fetch under way.
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import Awaitable, Callable
from typing import Protocol

from aiohttp import web

from core.coordinator.errors import BadRequest
from core.coordinator.http import status_and_code
from core.coordinator.page.download import model_display, model_json
from core.coordinator.page.home import Project, render_home
from core.coordinator.page.html import Markup
from core.coordinator.page.layout import error_document
from core.coordinator.page.static import StaticFiles
from core.coordinator.page.stats import Stats, read_stats
from core.coordinator.page.user import render_user
from core.coordinator.people.names import Username
from core.coordinator.published_model import PublishedModel, PublishedModels
from core.coordinator.store import CoordinatorStore
from core.project import AnyManifest
from core.trust.identity import Identity
from core.util.clock import Clock

log = logging.getLogger(__name__)

POLL_SECONDS = 10.0
POLL_RANGE = (0.2, 3600.0)
MAX_AGE = 2.0
"""Seconds the figures read for one visitor serve the next."""
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class PageSource(Protocol):
    """What the pages read from the coordinator (``CoordinatorService`` is one)."""

    @property
    def manifest(self) -> AnyManifest: ...

    @property
    def shown_manifest(self) -> AnyManifest: ...

    @property
    def project_key(self) -> Identity: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def store(self) -> CoordinatorStore: ...

    @property
    def public_url(self) -> str: ...


class ProjectPage:
    def __init__(self, source: PageSource) -> None:
        self._source = source
        self._static = StaticFiles()
        self._generation = 0
        self._cached: tuple[int, float, Stats] | None = None
        self._models = PublishedModels(
            source.manifest.project.name, source.project_key.peer_id, source.clock
        )

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/", self._html(self._home)),
            web.get("/stats", self._stats),
            web.get("/u/{name}", self._html(self._user)),
            web.get("/static/{name}", self._file),
        ]

    async def close(self) -> None:
        await self._models.close()

    async def published_model(self, *, wait: bool = False) -> PublishedModel | None:
        """The model published at the manifest's ``network.checkpoint_url``, if one is known."""
        url = self._source.shown_manifest.network.checkpoint_url
        return await self._models.current(url, wait=wait)

    def changed(self) -> None:
        """A report arrived: the next visitor sees it."""
        self._generation += 1

    def stats(self) -> Stats:
        source = self._source
        now = source.clock.monotonic()
        cached = self._cached
        if cached is not None and cached[0] == self._generation and now - cached[1] < MAX_AGE:
            return cached[2]
        stats = read_stats(source.store, source.clock.time())
        self._cached = (self._generation, now, stats)
        return stats

    # ---- handlers ----------------------------------------------------------------------------

    async def _home(self, request: web.Request) -> web.Response:
        source = self._source
        project = Project.of(
            source.shown_manifest, source.public_url, str(source.project_key.peer_id)
        )
        page = render_home(
            project,
            self.stats(),
            poll_seconds=_poll(request.query.get("poll")),
            model=await self.published_model(wait=True),
        )
        return _html_response(page)

    async def _stats(self, request: web.Request) -> web.Response:
        data = self.stats().to_json()
        model = await self.published_model()
        data["model"] = model_json(model)
        data["display"].update(model_display(model))
        response = web.json_response(data, headers=SECURITY_HEADERS)
        response.headers["Cache-Control"] = "no-store"
        return response

    async def _user(self, request: web.Request) -> web.Response:
        source = self._source
        now = source.clock.time()
        try:
            username = Username.parse(request.match_info["name"])
        except BadRequest:
            return self._not_found()
        user = source.store.accounts.find(username)
        if user is None or user.banned:
            return self._not_found()
        me = source.store.leaderboard.me(user.key, user.name, now)
        if me["rank"] is None:  # never contributed: as unknown as no account at all
            return self._not_found()
        return _html_response(render_user(source.manifest.project.name, me))

    async def _file(self, request: web.Request) -> web.Response:
        found = self._static.get(request.match_info["name"])
        if found is None:
            raise web.HTTPNotFound()
        data, content_type = found
        headers = {
            **SECURITY_HEADERS,
            "Content-Type": content_type,
            "Cache-Control": "public, max-age=300",
        }
        return web.Response(body=data, headers=headers)

    # ---- errors ------------------------------------------------------------------------------

    def _html(self, handler: Handler) -> Handler:
        """``handler`` with its failures answered as HTML pages instead of the API's JSON."""

        async def guarded(request: web.Request) -> web.StreamResponse:
            try:
                return await handler(request)
            except web.HTTPException:
                raise
            except Exception as exc:
                return self._failure(exc, f"{request.method} {request.path}")

        return guarded

    def _not_found(self) -> web.Response:
        words = "Nobody of that name is on this project's leaderboard."
        return self._error_page(404, "No such volunteer", words)

    def _failure(self, exc: Exception, where: str) -> web.Response:
        status, _ = status_and_code(exc)
        if status < 500:
            return self._error_page(status, "Not possible", str(exc))
        error_id = secrets.token_hex(4)
        log.error("coordinator page: %s failed (error id %s)", where, error_id, exc_info=exc)
        words = (
            f"The coordinator failed to show this page (error id {error_id}); "
            "its log has the details. Try again later."
        )
        return self._error_page(500, "Something went wrong", words)

    def _error_page(self, status: int, headline: str, words: str) -> web.Response:
        project = self._source.manifest.project.name
        page = error_document(project, status, headline, words)
        return _html_response(page, status)


def _html_response(page: Markup, status: int = 200) -> web.Response:
    headers = {**SECURITY_HEADERS, "Cache-Control": "no-cache"}
    return web.Response(
        text=page, status=status, content_type="text/html", charset="utf-8", headers=headers
    )


def _poll(text: str | None) -> float:
    """``?poll=SECONDS`` within ``POLL_RANGE``; the default for anything else (a page's setting,
    not worth an error)."""
    if text is None or len(text) > 12:
        return POLL_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        return POLL_SECONDS
    low, high = POLL_RANGE
    return seconds if math.isfinite(seconds) and low <= seconds <= high else POLL_SECONDS
