"""The organizer's coordinator: accounts, the allowlist, access passes and the leaderboard.

An aiohttp service over one SQLite file, run with ``barnraise coordinator`` (or inside
``barnraise swarm --moderated``). It never imports torch or the training code.

- ``service``      ``CoordinatorService``: the HTTP endpoints, pass signing, start and close.
- ``http``         request bodies with size limits, bearer tokens, JSON answers, and the one table
  from errors to status and code (``{"error", "code"}``; a 500 also carries a logged error ``id``).
- ``store``        ``CoordinatorStore``: the one connection, the table helpers, ``add_user`` for set-up.
- ``schema``       opening the database safely (WAL, ours or refused), tables, migrations.
- ``accounts``     users, roles, the allowlist (invitations) and bans; new names vs look-alikes.
- ``sessions``     session and rotating refresh tokens, stored only as SHA-256.
- ``possession``   ``PassChallenges`` (single-use, HMAC) and the payload a peer key signs to
  prove it is the caller's before a pass names it.
- ``peer_keys``    which account proved each peer key: one key, one account.
- ``records``      passes handed out per user and peer key; contributions per epoch, totals, days.
- ``reports``      reading the auxiliary peer's epoch report and checking each contribution's pass.
- ``figures``      the epoch figures a report may carry (loss, speed, live peers): bounds, one row
  per epoch, the newest and the loss curve's points.
- ``evidence``     reading the auxiliary peer's evidence report: each accusation's signature,
  project, age, and the standing of the account that proved the reporter's key; a rate per account.
- ``evidence_records`` the accepted accusations, and the listing by accused peer (with its user and
  how many distinct accounts accused it) that ``barnraise coordinator reports`` prints.
- ``rollback``     the moderators' signed rollback orders: numbered, checked against the epochs
  reported, stored; the latest is what ``GET /rollback`` serves to every peer.
- ``manifest_route`` ``GET /manifest``: the manifest file as it is now, re-read when it changes,
  checked (a broken or foreign change is logged and not served), versioned and signed.
- ``manifest_versions`` every distinct manifest text served, numbered from 1, never going back.
- ``leaderboard``  top N, one user's rank, percentile and neighbours, daily history.
- ``data_files``   ``DataFiles``: the project's public data folder (shards, tokenizer), read-only at
  ``GET /data/<path>``: regular files under it only, byte ranges, no listings.
- ``page/``        the public web pages: the project page (``GET /``) with its live figures
  (``/stats``), volunteers' pages (``/u/<name>``); server-rendered HTML, a small script, strict CSP.
- ``names``        username rules (NFKC, case-folded key) and ``Password``, which never prints itself.
- ``confusables``  the UTS #39 skeleton of a name, from the table in ``resources/confusables``.
- ``passwords``    scrypt hashes with their parameters, constant-time checks, re-hashing.
- ``addresses``    the address prefix rate limits count by (IPv4 /24, IPv6 /56, 127/8 as one).
- ``ratelimit``    ``LoginLimiter``: failures per account and prefix, per prefix, and a capped
  account-wide slow-down; doubling waits (429), never a lock from everywhere.
- ``signup_limit`` ``SignupLimiter``: sign-ups per prefix and over all, sliding windows (429).
- ``client_address`` ``TrustedProxies``: the address the limits count, the TCP peer's or, from a
  trusted reverse proxy, the right-most ``X-Forwarded-For`` entry that is not a trusted proxy.
- ``tls``          the coordinator's own HTTPS: a server context from certificate and key files,
  each checked first (readable, PEM, no passphrase, the key is the certificate's).
- ``public_url``   ``check_public_url``: the URL volunteers reach the coordinator by, a bare base.
- ``errors``       refusals named for what they refuse; ``StoreError`` for the database file.
"""

from core.coordinator.accounts import MODERATOR, VOLUNTEER, User
from core.coordinator.errors import CoordinatorError, StoreError
from core.coordinator.names import Password, Username
from core.coordinator.passwords import DEFAULT_PARAMS, ScryptParams
from core.coordinator.ratelimit import LoginLimiter, LoginLimits
from core.coordinator.service import (
    API_VERSION,
    DEFAULT_PORT,
    CoordinatorService,
    check_project_key,
)
from core.coordinator.signup_limit import SignupLimiter, SignupLimits
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
