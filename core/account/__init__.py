"""The volunteer's side of accounts: talking to a project's coordinator and keeping its secrets.

- ``errors``       AccountError and its cases (wrong password, rate limited, refused, sign-up
  closed, coordinator unavailable, not logged in, no keyring), in plain words.
- ``replies``      SessionTokens, CoordinatorInfo, PassGrant, CreditedEpochs: the coordinator's
  answers, checked.
- ``client``       CoordinatorClient: the coordinator's HTTP API, one aiohttp session per client
  (a headless login's password variable is ``core.config.environment.PASSWORD_VARIABLE``).
- ``session``      AccountSession: calls as a logged-in user, renewing the session on a 401.
- ``proof``        what the peer key signs to prove it is ours when asking for a pass.
- ``keeper``       PassKeeper: fetches this peer's access pass, renews it, follows revocations.
- ``credentials``  CredentialStore: session and refresh secrets in the OS keyring (never passwords).
- ``reporter``     CoordinatorReporter: a backbone's epoch reports and members' signed
  evidence, and an expert server's receipts from its trainers, sent in order, retried.

This package imports neither torch nor the engine, training or coordinator code; the engine uses
it for ``barnraise ctl login`` and to hand a moderated project's peer an ``AccessGate``.
"""

from core.account.client import CoordinatorClient
from core.account.credentials import CredentialStore
from core.account.errors import (
    AccessRefused,
    AccountError,
    CoordinatorUnavailable,
    KeyringUnavailable,
    LoginFailed,
    NotLoggedIn,
    RateLimited,
    SignupClosed,
)
from core.account.keeper import PassKeeper
from core.account.replies import CoordinatorInfo, PassGrant, SessionTokens
from core.account.session import AccountSession

__all__ = [
    "AccessRefused",
    "AccountError",
    "AccountSession",
    "CoordinatorClient",
    "CoordinatorInfo",
    "CoordinatorUnavailable",
    "CredentialStore",
    "KeyringUnavailable",
    "LoginFailed",
    "NotLoggedIn",
    "PassGrant",
    "PassKeeper",
    "RateLimited",
    "SessionTokens",
    "SignupClosed",
]
