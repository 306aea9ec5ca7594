"""The coordinator's refusals, each a ``BarnraiseError`` named for what it refuses.

The store raises them too (an unknown user, a taken name), so the management commands print the
same plain words the HTTP API sends as ``{"error": ...}``; which status and code each answers with
is said in one place, the table in ``http``. A report's body that does not read
(``core.trust.reports``) is a ``BadRequest`` in the reader's words (``reading_report``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

from core.trust.reports import InvalidReport
from core.util.errors import BarnraiseError


class CoordinatorError(BarnraiseError):
    """A request the coordinator refuses."""


class BadRequest(CoordinatorError):
    """The request is malformed or a value is invalid (the message says which)."""


class BadProof(BadRequest):
    """A pass request whose proof of holding the peer key is missing, stale or wrong."""


class Unauthorized(CoordinatorError):
    """No session, a wrong password, or a token that is unknown or has expired."""


class Forbidden(CoordinatorError):
    """Banned, not allowlisted, sign-up closed, or not a moderator."""


class NotFound(CoordinatorError):
    """No such user."""


class Conflict(CoordinatorError):
    """The name is taken (or the request contradicts what the store holds)."""


class TooLarge(CoordinatorError):
    """The request body is over the route's limit."""


class UnsupportedMediaType(CoordinatorError):
    """A body that does not say it is JSON (``Content-Type: application/json``)."""


class TooManyAttempts(CoordinatorError):
    """Logins or sign-ups (``what``) are paused for ``retry_after`` seconds."""

    def __init__(self, retry_after: float, what: str = "login attempts") -> None:
        # Retry-After is whole seconds; rounding up means a client that obeys it is let in.
        self.retry_after = max(1, math.ceil(retry_after))
        super().__init__(f"too many {what}; try again in {self.retry_after} s")


class StoreError(BarnraiseError):
    """The coordinator's database cannot be opened or is not ours; the message names the file."""


@contextmanager
def reading_report() -> Iterator[None]:
    """Around the reading of a report's body: ``InvalidReport`` leaves as a ``BadRequest`` with
    the same message."""
    try:
        yield
    except InvalidReport as exc:
        raise BadRequest(str(exc)) from None
