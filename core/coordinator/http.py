"""The HTTP plumbing shared by the coordinator's handlers: bodies, bearer tokens, answers, errors.

Every refusal leaves as ``{"error": "<plain words>"}`` with its status (``CoordinatorError.status``);
aiohttp's own (no such path, wrong method) are reworded the same way, and anything unexpected is a
500 whose details go only to the log. Bodies are read up to a per-route limit and never logged, as
they may hold passwords.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from core.coordinator.errors import (
    BadRequest,
    CoordinatorError,
    TooLarge,
    TooManyAttempts,
    Unauthorized,
)
from core.coordinator.sessions import MAX_TOKEN_CHARS

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

SMALL_BODY = 4 * 1024
LARGE_BODY = 1024 * 1024


@web.middleware
async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except CoordinatorError as exc:
        return error_response(exc)
    except web.HTTPException as exc:
        return reworded(exc)
    except Exception:
        # Only the method and path: the body may hold a password.
        log.exception("coordinator: %s %s failed", request.method, request.path)
        return web.json_response({"error": "internal error in the coordinator"}, status=500)


def error_response(exc: CoordinatorError) -> web.Response:
    body: dict[str, Any] = {"error": str(exc)}
    headers: dict[str, str] = {}
    if isinstance(exc, TooManyAttempts):
        body["retry_after"] = exc.retry_after
        headers["Retry-After"] = str(exc.retry_after)
    elif isinstance(exc, Unauthorized):
        headers["WWW-Authenticate"] = "Bearer"
    return web.json_response(body, status=exc.status, headers=headers)


def reworded(exc: web.HTTPException) -> web.Response:
    words = {
        404: "no such endpoint",
        405: "this endpoint does not take that method",
        413: "the request body is too large",
    }.get(exc.status, exc.reason)
    return web.json_response({"error": words}, status=exc.status)


async def json_body(request: web.Request, limit: int = SMALL_BODY) -> dict[str, Any]:
    """The request's JSON object, read up to ``limit`` bytes (``TooLarge`` beyond)."""
    too_large = TooLarge(f"the request body is too large (at most {limit} bytes)")
    if request.content_length is not None and request.content_length > limit:
        raise too_large
    body = bytearray()
    while chunk := await request.content.read(64 * 1024):
        body += chunk
        if len(body) > limit:
            raise too_large
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise BadRequest("the request body must be JSON") from None
    if not isinstance(value, dict):
        raise BadRequest("the request body must be a JSON object")
    return value


def bearer(request: web.Request) -> str:
    """The session token of ``Authorization: Bearer <token>``; ``Unauthorized`` without one."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > MAX_TOKEN_CHARS:
        raise Unauthorized("log in first: this needs a session (Authorization: Bearer <session>)")
    return token


def string_field(body: dict[str, Any], name: str, *, max_chars: int = 1024) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise BadRequest(f"{name} must be a non-empty string")
    if len(value) > max_chars:
        raise BadRequest(f"{name} is too long (at most {max_chars} characters)")
    return value


def answer(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status)
