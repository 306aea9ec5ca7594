"""The organizer's coordinator: accounts, the allowlist, access passes and the leaderboard.

An aiohttp service over one SQLite file, run with ``barnraise coordinator`` (or inside
``barnraise swarm --moderated``). It never imports torch or the training code.

- ``service``      ``CoordinatorService``: the HTTP endpoints, pass signing, start and close.
- ``http``         request bodies with size limits, bearer tokens, JSON answers, and the one table
  from errors to status and code (``{"error", "code"}``; a 500 also carries a logged error ``id``).
- ``store``        ``CoordinatorStore``: the one connection, the table helpers, ``add_user`` for set-up.
- ``schema``       opening the database safely (WAL, ours or refused), tables, migrations.
- ``manifest_route`` ``GET /manifest``: the manifest file as it is now, re-read when it changes,
  checked (a broken or foreign change is logged and not served), versioned and signed.
- ``manifest_versions`` every distinct manifest text served, numbered from 1, never going back.
- ``data_files``   ``DataFiles``: the project's public data folder (shards, tokenizer), read-only at
  ``GET /data/<path>``: regular files under it only, byte ranges, no listings.
- ``people/``      accounts, names, passwords, sessions, the peer keys each account proved.
- ``limits/``      rate limits on logins, sign-ups and by address prefix (behind a trusted proxy too).
- ``reports/``     the backbone's epoch, evaluation and evidence reports; contributions, figures,
  held-out evaluations, leaderboard, rollback orders.
- ``page/``        the public web pages: the project page (``GET /``) with its live figures
  (``/stats``), volunteers' pages (``/u/<name>``); server-rendered HTML, a small script, strict CSP.
- ``tls``          the coordinator's own HTTPS: a server context from certificate and key files,
  each checked first (readable, PEM, no passphrase, the key is the certificate's).
- ``published_model`` the model the backbone published (``network.checkpoint_url`` + ``model.json``),
  verified with the project key and kept a minute, for the page's download section.
- ``public_url``   ``check_public_url``: the URL volunteers reach the coordinator by, a bare base.
- ``audit``        the credit audit: contributions credited against the backbone's metrics lines,
  per (epoch, user), each difference with its reason; the store's own totals checked.
- ``errors``       refusals named for what they refuse; ``StoreError`` for the database file.
"""

from core.coordinator.errors import CoordinatorError, StoreError
from core.coordinator.limits.ratelimit import LoginLimiter, LoginLimits
from core.coordinator.limits.signup_limit import SignupLimiter, SignupLimits
from core.coordinator.people.accounts import MODERATOR, VOLUNTEER, User
from core.coordinator.people.names import Password, Username
from core.coordinator.people.passwords import DEFAULT_PARAMS, ScryptParams
from core.coordinator.service import (
    API_VERSION,
    DEFAULT_PORT,
    CoordinatorService,
    check_project_key,
)
from core.coordinator.store import CoordinatorStore

__all__ = [
    "API_VERSION",
    "DEFAULT_PARAMS",
    "DEFAULT_PORT",
    "MODERATOR",
    "VOLUNTEER",
    "CoordinatorError",
    "CoordinatorService",
    "CoordinatorStore",
    "LoginLimiter",
    "LoginLimits",
    "Password",
    "ScryptParams",
    "SignupLimiter",
    "SignupLimits",
    "StoreError",
    "User",
    "Username",
    "check_project_key",
]
