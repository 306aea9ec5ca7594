"""The errors that cross the control API, with the codes and HTTP statuses they travel as.

The engine raises its own errors; the control server's one table maps them onto these classes and
sends ``{"error": {"code": ..., "message": ..., "id": ...}}``; the client raises the same class
again, so the CLI and the GUI's one error presenter see one hierarchy whichever side of the socket
the problem was on. ``id`` comes with the engine's own failures (``internal``, ``storage_failed``):
the same id is in the engine's log, next to the traceback; the client keeps it as ``error_id``.
"""

from __future__ import annotations

from typing import ClassVar

from core.util.errors import BarnraiseError


class ApiError(BarnraiseError):
    """A control API call failed; ``message`` is written for the user."""

    code: ClassVar[str] = "internal"
    status: ClassVar[int] = 500

    def __init__(self, *args: object, error_id: str | None = None) -> None:
        super().__init__(*args)
        self.error_id = error_id
        """Names the failure in the engine's log (failures of the engine itself only)."""

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else self.code


class BadRequest(ApiError):
    """The request is malformed or a value is invalid (the message says which)."""

    code = "bad_request"
    status = 400


class UnsupportedMediaType(ApiError):
    """A request body that is not declared as JSON (``Content-Type: application/json``): a web
    page can post plain text to any address without asking first, never JSON."""

    code = "unsupported_media_type"
    status = 415


class Unauthorized(ApiError):
    """Missing or wrong token."""

    code = "unauthorized"
    status = 401


class Forbidden(ApiError):
    """A browser page from another origin, or a foreign Host header (DNS rebinding)."""

    code = "forbidden"
    status = 403


class NotFound(ApiError):
    code = "not_found"
    status = 404


class Conflict(ApiError):
    """The request contradicts the engine's state (e.g. a project attached twice)."""

    code = "conflict"
    status = 409


class VersionMismatch(ApiError):
    """Client and engine speak different API versions."""

    code = "version_mismatch"
    status = 426


class StorageFailed(ApiError):
    """The engine cannot write or read its own files (disk full, permissions): not the caller's
    fault; what was asked for may hold only until the engine stops (the message says)."""

    code = "storage_failed"
    status = 500


class EngineUnavailable(ApiError):
    """No engine answers (not started, crashed, or its endpoint file is stale)."""

    code = "unavailable"
    status = 503


class EngineBusy(ApiError):
    """The engine is there but cannot take this call now (its blocking work is queued full, or it
    is stopping): try again in a moment."""

    code = "busy"
    status = 503


class LoginRefused(ApiError):
    """The coordinator refused the login or sign-up: wrong password, banned, not allowlisted, sign-up
    closed or the name taken (the message says which)."""

    code = "login_refused"
    status = 403


class LoginRequired(ApiError):
    """The call needs a login at the project's coordinator (none yet, or it expired)."""

    code = "login_required"
    status = 403


class TooManyAttempts(ApiError):
    """The coordinator slows down logins after failures; the message says how long to wait."""

    code = "too_many_attempts"
    status = 429


class CoordinatorUnreachable(ApiError):
    """The project's coordinator does not answer or answers nonsense (the engine itself is fine)."""

    code = "coordinator_unavailable"
    status = 502


ERRORS: dict[str, type[ApiError]] = {
    cls.code: cls
    for cls in (
        ApiError,
        BadRequest,
        UnsupportedMediaType,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
        VersionMismatch,
        StorageFailed,
        EngineUnavailable,
        EngineBusy,
        LoginRefused,
        LoginRequired,
        TooManyAttempts,
        CoordinatorUnreachable,
    )
}


def error_from_wire(code: object, message: object, error_id: object = None) -> ApiError:
    """Rebuild an error the server sent; unknown codes become a plain ``ApiError``."""
    cls = ERRORS.get(code, ApiError) if isinstance(code, str) else ApiError
    return cls(str(message), error_id=error_id if isinstance(error_id, str) else None)
