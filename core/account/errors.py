"""What can go wrong between a volunteer's engine and the project's coordinator.

Every message is written for the volunteer and carries the coordinator's own words (its ``error``
text) where it gave some. Callers tell the cases apart by class: a wrong password is not a network
problem, and a ban is not something to retry.
"""

from __future__ import annotations

from core.util.errors import BarnraiseError


class AccountError(BarnraiseError):
    """The coordinator refused a request, or answered in a way we cannot use."""


class LoginFailed(AccountError):
    """Wrong username or password (the coordinator does not say which)."""


class RateLimited(AccountError):
    """Too many login attempts: the coordinator asks us to wait ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class AccessRefused(AccountError):
    """The account is banned, or not on the project's allowlist: retrying will not help."""


class SignupClosed(AccountError):
    """The project does not let anyone create an account; a moderator has to add you."""


class CoordinatorUnavailable(AccountError):
    """The coordinator does not answer, fails (5xx) or sends something that is not its API."""


class NotLoggedIn(AccountError):
    """No session, or one that expired and could not be refreshed: log in again."""


class KeyringUnavailable(AccountError):
    """The operating system's keyring cannot be used, so the login secrets cannot be kept."""
