"""The HTTP plumbing shared by the coordinator's handlers: bodies, bearer tokens, answers, errors.

Every refusal leaves as ``{"error": "<plain words>", "code": "<code>"}`` with the status and code
that ``ERROR_TABLE``, the one table, gives its class (the nearest in its MRO); aiohttp's own (no
such path, wrong method, too large) are reworded the same way. A database that cannot be used
(``StoreError``, ``sqlite3.Error``: disk full, permissions) is a ``storage_failed`` 500, and
anything unexpected an ``internal`` 500: both carry a short random ``"id"``, also in the message,
that is logged with the traceback, while the details stay in the log. Bodies are read up to a
per-route limit and never logged, as they may hold passwords.

A JSON body must say so (``Content-Type: application/json``, UTF-8 if a charset is named), else 415:
a web page may post ``text/plain`` to any site without asking, but not ``application/json``.
JSON nested too deep for the parser is a 400 like any other malformed body, and a bearer token must
be printable ASCII, as every token the coordinator hands out is.
"""

from __future__ import annotations

import json
import logging
import secrets
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from core.coordinator.errors import (
    BadProof,
    BadRequest,
    Conflict,
    CoordinatorError,
    Forbidden,
    NotFound,
    StoreError,
    TooLarge,
    TooManyAttempts,
    Unauthorized,
    UnsupportedMediaType,
)
from core.coordinator.people.sessions import MAX_TOKEN_CHARS

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

SMALL_BODY = 4 * 1024
LARGE_BODY = 1024 * 1024

ERROR_TABLE: dict[type[Exception], tuple[int, str]] = {
    CoordinatorError: (400, "bad_request"),
    BadRequest: (400, "bad_request"),
    BadProof: (400, "bad_proof"),
    Unauthorized: (401, "unauthorized"),
    Forbidden: (403, "forbidden"),
    NotFound: (404, "not_found"),
    Conflict: (409, "conflict"),
    TooLarge: (413, "too_large"),
    UnsupportedMediaType: (415, "unsupported_media_type"),
    TooManyAttempts: (429, "too_many_attempts"),
    # the database is the coordinator's problem, never the caller's
    StoreError: (500, "storage_failed"),
    sqlite3.Error: (500, "storage_failed"),
}
"""Status and code of each error class; a class not found in an error's MRO is unexpected."""

_AIOHTTP_WORDS = {
    404: ("no such endpoint", "not_found"),
    405: ("this endpoint does not take that method", "method_not_allowed"),
    413: ("the request body is too large", "too_large"),
}


@web.middleware
async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        return reworded(exc)
    except Exception as exc:
        # Only the method and path: the body may hold a password.
        return error_response(exc, f"{request.method} {request.path}")


def status_and_code(exc: BaseException) -> tuple[int, str]:
    """What ``ERROR_TABLE`` says of ``exc``'s class or its nearest parent; else an internal 500."""
    return next((ERROR_TABLE[c] for c in type(exc).__mro__ if c in ERROR_TABLE), (500, "internal"))


def error_response(exc: Exception, where: str) -> web.Response:
    """The answer to ``exc`` by ``ERROR_TABLE``; a 500 gets an error id, logged with its trace."""
    status, code = status_and_code(exc)
    if status >= 500:
        return _failure(exc, where, code)
    body: dict[str, Any] = {"error": str(exc), "code": code}
    headers: dict[str, str] = {}
    if isinstance(exc, TooManyAttempts):
        body["retry_after"] = exc.retry_after
        headers["Retry-After"] = str(exc.retry_after)
    elif isinstance(exc, Unauthorized):
        headers["WWW-Authenticate"] = "Bearer"
    return web.json_response(body, status=status, headers=headers)


def _failure(exc: Exception, where: str, code: str) -> web.Response:
    error_id = secrets.token_hex(4)
    log.error("coordinator: %s failed (error id %s)", where, error_id, exc_info=exc)
    what = "its database cannot be used" if code == "storage_failed" else "an internal error"
    words = f"the coordinator failed: {what} (error id {error_id}); its log has the details"
    return web.json_response({"error": words, "code": code, "id": error_id}, status=500)


def reworded(exc: web.HTTPException) -> web.Response:
    words, code = _AIOHTTP_WORDS.get(exc.status, (exc.reason, "http_error"))
    return web.json_response({"error": words, "code": code}, status=exc.status)


async def json_body(request: web.Request, limit: int = SMALL_BODY) -> dict[str, Any]:
    """The request's JSON object, read up to ``limit`` bytes (``TooLarge`` beyond)."""
    check_json_type(request)
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


def check_json_type(request: web.Request) -> None:
    """``UnsupportedMediaType`` unless the body is declared as JSON in UTF-8."""
    charset = (request.charset or "utf-8").lower()
    if request.content_type != "application/json" or charset not in ("utf-8", "utf8"):
        raise UnsupportedMediaType(
            "send the body as JSON with the header 'Content-Type: application/json' (UTF-8)"
        )


def bearer(request: web.Request) -> str:
    """The session token of ``Authorization: Bearer <token>``; ``Unauthorized`` without one."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > MAX_TOKEN_CHARS:
        raise Unauthorized("log in first: this needs a session (Authorization: Bearer <session>)")
    if not (token.isascii() and token.isprintable()):
        raise Unauthorized("the session token is not one this coordinator hands out; log in again")
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
