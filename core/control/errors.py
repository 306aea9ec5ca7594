"""The control API's one table from the engine's errors to the API's, and the one function using it.

The engine says what went wrong in its own terms (``core.engine.errors``, ``PreferencesError``,
``ManifestError``, the account's errors, ``LedgerError``); ``api_error`` finds the nearest class in
``ERROR_TABLE`` (by the error's MRO, so a subclass follows its parent unless listed itself) and
answers with that API error and the engine's words. What the engine cannot write (the ledger, the
settings file, the keyring, any ``OSError`` but timeouts and connections) is its own problem,
never the caller's: a ``storage_failed`` 500. Anything else (or listed as None) is unexpected: it
is logged with its traceback under a short random error id, and the caller gets an ``internal``
500 naming that id (the words of a ``BarnraiseError``, written for people, are kept; other
exceptions' stay in the log). 5xx answers from the table carry an id too, and are logged alike.
aiohttp's own refusals (no such route, wrong method, body too large) keep friendly words in
``http_error``.
"""

from __future__ import annotations

import logging
import secrets

from aiohttp import web

from core.account import (
    AccessRefused,
    AccountError,
    CoordinatorUnavailable,
    KeyringUnavailable,
    LoginFailed,
    NotLoggedIn,
    RateLimited,
    SignupClosed,
)
from core.api.errors import (
    ApiError,
    BadRequest,
    Conflict,
    CoordinatorUnreachable,
    EngineBusy,
    LoginRefused,
    LoginRequired,
    NotFound,
    StorageFailed,
    TooManyAttempts,
)
from core.engine.errors import (
    AlreadyAttached,
    DoesNotFit,
    InvalidArgument,
    NoCoordinator,
    NotJoinedByUrl,
    SettingsNotSaved,
    UnknownProject,
)
from core.engine.join.remote_manifest import ManifestRefused, ManifestUnreachable
from core.policy import PreferencesError
from core.project import ManifestError
from core.stats import LedgerError
from core.util.blocking import PoolBusy, PoolClosed
from core.util.errors import BarnraiseError

log = logging.getLogger(__name__)

ERROR_TABLE: dict[type[BaseException], type[ApiError] | None] = {
    # the caller asked for something that cannot be: their words need changing
    InvalidArgument: BadRequest,
    PreferencesError: BadRequest,
    ManifestError: BadRequest,
    DoesNotFit: BadRequest,
    UnknownProject: NotFound,
    AlreadyAttached: Conflict,
    NoCoordinator: Conflict,
    NotJoinedByUrl: Conflict,
    # a project URL that answers with a manifest that must not be used, or does not answer
    ManifestRefused: BadRequest,
    ManifestUnreachable: CoordinatorUnreachable,
    # the project's coordinator said no, or did not answer
    AccountError: BadRequest,
    LoginFailed: LoginRefused,
    AccessRefused: LoginRefused,
    SignupClosed: LoginRefused,
    NotLoggedIn: LoginRequired,
    RateLimited: TooManyAttempts,
    CoordinatorUnavailable: CoordinatorUnreachable,
    # the engine's blocking work is queued full, or the engine stops: try again
    PoolBusy: EngineBusy,
    PoolClosed: EngineBusy,
    # the engine cannot keep what it holds: its problem, not the caller's
    KeyringUnavailable: StorageFailed,
    LedgerError: StorageFailed,
    SettingsNotSaved: StorageFailed,
    OSError: StorageFailed,
    TimeoutError: None,  # an OSError, but not about files: unexpected (None)
    ConnectionError: None,
}


def api_error(exc: BaseException, where: str) -> ApiError:
    """The API's error for ``exc``, raised while answering ``where`` (method and path)."""
    if isinstance(exc, ApiError):  # the server's own refusals: token, origin, a body it cannot read
        return exc
    cls = next((ERROR_TABLE[c] for c in type(exc).__mro__ if c in ERROR_TABLE), None)
    if cls is None:
        return _unexpected(exc, where)
    words = str(exc) or type(exc).__name__
    if cls.status < 500:
        return cls(words)
    error_id = new_error_id()
    if isinstance(exc, OSError) and not isinstance(exc, BarnraiseError):
        words = f"the engine cannot use one of its files: {words}"
    log.error("%s failed (error id %s): %s", where, error_id, words, exc_info=exc)
    return cls(f"{words} (error id {error_id})", error_id=error_id)


def http_error(exc: web.HTTPException) -> ApiError:
    """aiohttp's own refusals, in the API's words."""
    if exc.status == 404:
        return NotFound(f"no such API call: {exc.reason}")
    if exc.status == 405:
        return BadRequest("this API call does not take that method")
    if exc.status == 413:
        return BadRequest("the request is too large")
    if exc.status < 500:
        return BadRequest(f"HTTP {exc.status}: {exc.reason}")
    error_id = new_error_id()
    log.error("aiohttp answered HTTP %d (error id %s): %s", exc.status, error_id, exc.reason)
    return ApiError(f"HTTP {exc.status}: {exc.reason} (error id {error_id})", error_id=error_id)


def new_error_id() -> str:
    """Short, random, and easy to search for in the log."""
    return secrets.token_hex(4)


def _unexpected(exc: BaseException, where: str) -> ApiError:
    error_id = new_error_id()
    log.error("%s failed unexpectedly (error id %s)", where, error_id, exc_info=exc)
    said = f"{exc}: " if isinstance(exc, BarnraiseError) and str(exc) else ""
    return ApiError(
        f"{said}the engine failed unexpectedly (error id {error_id}); its log has the details",
        error_id=error_id,
    )
