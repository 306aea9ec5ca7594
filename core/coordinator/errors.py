"""The coordinator's refusals: each is a ``BarnraiseError`` that knows the HTTP status it answers.

The store raises them too (an unknown user, a taken name), so the management commands print the
same plain words the HTTP API sends as ``{"error": ...}``.
"""

from __future__ import annotations

import math

from core.util.errors import BarnraiseError


class CoordinatorError(BarnraiseError):
    """A request the coordinator refuses; ``status`` is the HTTP status of the answer."""

    status = 400


class BadRequest(CoordinatorError):
    status = 400


class Unauthorized(CoordinatorError):
    status = 401


class Forbidden(CoordinatorError):
    status = 403


class NotFound(CoordinatorError):
    status = 404


class Conflict(CoordinatorError):
    status = 409


class TooLarge(CoordinatorError):
    status = 413


class TooManyAttempts(CoordinatorError):
    """Login attempts for a name or from an address are paused for ``retry_after`` seconds."""

    status = 429

    def __init__(self, retry_after: float) -> None:
        # Retry-After is whole seconds; rounding up means a client that obeys it is let in.
        self.retry_after = max(1, math.ceil(retry_after))
        super().__init__(f"too many login attempts; try again in {self.retry_after} s")


class StoreError(BarnraiseError):
    """The coordinator's database cannot be opened or is not ours; the message names the file."""
