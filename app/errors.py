"""The one error presenter: every failure the app shows goes through ``explain``.

It turns the API's error classes into one sentence for the user — what failed, why in the engine's or
the coordinator's own words, and what to do when there is something to do — whether it is shown in a
banner or under the control that failed.
"""

from __future__ import annotations

from core.api.errors import (
    ApiError,
    BadRequest,
    Conflict,
    CoordinatorUnreachable,
    EngineUnavailable,
    LoginRefused,
    LoginRequired,
    TooManyAttempts,
    VersionMismatch,
)


def explain(error: ApiError, doing: str) -> str:
    """One sentence: ``doing`` is what was attempted, as a gerund ("starting contribution")."""
    message = _sentence(error.message)
    if isinstance(error, EngineUnavailable):
        return (
            f"{_capital(doing)} failed: the engine is not answering. Barnraise reconnects by "
            "itself; try again in a moment."
        )
    if isinstance(error, LoginRefused | TooManyAttempts | BadRequest | Conflict):
        return message
    if isinstance(error, LoginRequired):
        return f"Log in first: {message}"
    if isinstance(error, CoordinatorUnreachable):
        later = "" if "try again later" in message.lower() else " Try again later."
        return f"The project's server does not answer. {message}{later}"
    if isinstance(error, VersionMismatch):
        return f"{message} (the app and the engine are from different versions)"
    return f"{_capital(doing)} failed: {message}"


def own_words(error: ApiError) -> str:
    """The error's own message as a sentence, for a control whose place already says what was
    attempted (the project URL field: "the project at … does not answer", "no project is served
    at …" need no "the project's server does not answer" in front)."""
    return _sentence(error.message)


def _sentence(text: str) -> str:
    text = text.strip()
    if not text:
        return "Something went wrong."
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?", ")")) else text + "."


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]
