"""CoordinatorService: the organizer's HTTP service for accounts, access passes and the leaderboard.

Endpoints (JSON; ``docs/design/coordinator.md`` describes each): ``GET /info``, ``POST /signup``,
``POST /login``, ``POST /session/refresh``, ``POST /logout``, ``POST /pass/challenge``, ``POST /pass``,
``GET /revocations``, ``POST /contributions`` (moderators), ``POST /evaluations`` (moderators: the
backbone's held-out evaluations, ``evaluations``), ``POST /evidence`` (moderators: members'
signed accusations, judged in ``evidence``), ``POST /receipts`` (an expert server's owner:
trainers' signed receipts for its work, judged in ``receipts``), ``GET /leaderboard``,
``GET /leaderboard/me``, ``GET /credit/mine`` (what one of the caller's own peer keys was
credited, epoch by epoch, ``peer_credit``), ``GET /rollback`` (the moderators' latest signed
rollback order, ``rollback``), ``GET /manifest`` (the project's manifest, versioned and signed
by the project key, ``manifest_route``).
The public pages (``page``): ``GET /`` (the project page), ``GET /stats`` (its live figures, from
the epoch reports' ``figures``), ``GET /u/<name>`` (a volunteer's page) and ``GET /static/...``.
With a ``data_dir``, ``GET /data/<path>`` serves the project's public data folder (``data_files``).

Passes are signed with the project key for ``access.pass_lifetime`` seconds, and only for a peer key
the caller proves it holds (a signed challenge, ``possession``), which then belongs to that account
(``peer_keys``). Logins are slowed by a ``LoginLimiter`` and sign-ups by a ``SignupLimiter``, both
per address prefix; password hashing runs on worker threads (at most ``hash_concurrency`` at once, each
scrypt check holding ~16 MiB), and everything else runs on the loop (see ``store``). A named
background task forgets expired sessions and stale rate-limit entries.

It serves HTTPS itself when started with a server TLS context (``tls``), or plain HTTP behind a
reverse proxy; the limits then count the client a trusted proxy names (``client_address``).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

from core.coordinator.data_files import DataFiles
from core.coordinator.errors import (
    BadProof,
    BadRequest,
    Conflict,
    Forbidden,
    Unauthorized,
    reading_report,
)
from core.coordinator.http import (
    LARGE_BODY,
    answer,
    bearer,
    errors_as_json,
    json_body,
    string_field,
)
from core.coordinator.limits.client_address import FORWARDED_FOR, TrustedProxies
from core.coordinator.limits.ratelimit import LoginLimiter, LoginLimits
from core.coordinator.limits.signup_limit import SignupLimiter, SignupLimits
from core.coordinator.manifest_route import ManifestPublisher
from core.coordinator.page import ProjectPage
from core.coordinator.people.accounts import User
from core.coordinator.people.names import Password, Username
from core.coordinator.people.passwords import (
    DEFAULT_PARAMS,
    ScryptParams,
    hash_password,
    needs_rehash,
    verify_password,
)
from core.coordinator.people.possession import (
    MAX_CHALLENGE_CHARS,
    MAX_SIGNATURE_CHARS,
    UPDATE,
    PassChallenges,
    proof_payload,
    signature_bytes,
)
from core.coordinator.people.sessions import MAX_TOKEN_CHARS, Tokens
from core.coordinator.public_url import check_public_url
from core.coordinator.reports.epoch_report import Judge
from core.coordinator.reports.evidence_report import EvidenceJudge
from core.coordinator.reports.peer_credit import parse_peer, parse_since
from core.coordinator.reports.receipts import ReceiptJudge
from core.coordinator.store import CoordinatorStore
from core.project import AnyManifest
from core.trust.errors import PeerIdError
from core.trust.identity import Identity
from core.trust.passes import issue_pass, pass_to_text
from core.trust.peer_id import PeerID
from core.trust.reports import (
    EVIDENCE,
    RECEIPTS,
    Contribution,
    EpochReport,
    Evaluation,
    Refused,
)
from core.util.clock import Clock, SystemClock
from core.util.errors import ConfigError
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)

API_VERSION = 1
DEFAULT_PORT = 8470
MAX_LEADERBOARD = 1000


def check_project_key(manifest: AnyManifest, key: PeerID, source: str = "the given key") -> None:
    """``ConfigError`` if the manifest names a project key other than ``key``."""
    named = manifest.access.project_key
    if named and named != str(key):
        raise ConfigError(
            f"the manifest names project key {named}, but {source} is {key}; "
            "use the matching key file or fix access.project_key"
        )


class CoordinatorService:
    def __init__(
        self,
        manifest: AnyManifest,
        db_path: Path,
        project_key: Identity,
        bootstrap: Sequence[str] = (),
        *,
        scrypt_n: int = DEFAULT_PARAMS.n,
        limits: LoginLimits | None = None,
        signup_limits: SignupLimits | None = None,
        clock: Clock | None = None,
        sweep_interval: float = 600.0,
        hash_concurrency: int = 4,
        public_url: str | None = None,
        trusted_proxies: Sequence[str] = (),
        data_dir: Path | None = None,
    ) -> None:
        check_project_key(manifest, project_key.peer_id)
        # the database must never be downloadable: refused if it lies in the served folder
        self.data = None if data_dir is None else DataFiles(data_dir, private=(db_path,))
        self._public_url = check_public_url(public_url) if public_url else None
        # whose X-Forwarded-For names the client the rate limits count (``client_address``)
        self.proxies = TrustedProxies.parse(trusted_proxies)
        self.tls = False
        self.manifest = manifest
        self.db_path = db_path
        self.project_key = project_key
        self.bootstrap = list(bootstrap)
        self.params = ScryptParams(n=scrypt_n)
        self.clock: Clock = clock or SystemClock()
        self.limiter = LoginLimiter(limits or LoginLimits(), self.clock)
        self.signups = SignupLimiter(signup_limits or SignupLimits(), self.clock)
        self.challenges = PassChallenges()
        self.host = "127.0.0.1"
        self.port = 0
        self._sweep_interval = sweep_interval
        self._hashing = asyncio.Semaphore(hash_concurrency)
        self._dummy_hash: str | None = None
        self._store: CoordinatorStore | None = None
        self._runner: web.AppRunner | None = None
        self._tasks = BackgroundTasks("coordinator")
        self._publisher = ManifestPublisher(self)
        self._page = ProjectPage(self)

    @property
    def shown_manifest(self) -> AnyManifest:
        """The manifest as ``GET /manifest`` serves it now (the organizer may have edited the file
        since the start), which the project's page describes; access rules keep following
        ``manifest``, the one the coordinator started with."""
        return self._publisher.shown()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    @property
    def public_url(self) -> str:
        """Where volunteers reach this coordinator (behind a proxy, the proxy's URL): the project
        URL that the page shows and that the app joins by. Without one set, ``url``."""
        return self._public_url or self.url

    @property
    def store(self) -> CoordinatorStore:
        if self._store is None:
            raise RuntimeError("the coordinator is not started")
        return self._store

    @property
    def project(self) -> str:
        return self.manifest.project.name

    async def start(
        self, host: str = "127.0.0.1", port: int = 0, *, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        """Listen on ``host``:``port`` (0: any free port); HTTPS with ``ssl_context`` (a server
        context, ``tls.server_tls_context``), else plain HTTP."""
        # Opened here, on the loop's thread, which is the only one that will use it.
        self._store = CoordinatorStore(self.db_path)
        app = web.Application(middlewares=[errors_as_json], client_max_size=LARGE_BODY)
        app.add_routes(
            [
                web.get("/info", self._info),
                web.post("/signup", self._signup),
                web.post("/login", self._login),
                web.post("/session/refresh", self._refresh),
                web.post("/logout", self._logout),
                web.post("/pass/challenge", self._challenge),
                web.post("/pass", self._pass),
                web.get("/revocations", self._revocations),
                web.get("/rollback", self._rollback),
                web.post("/contributions", self._contributions),
                web.post("/evaluations", self._evaluations),
                web.post("/evidence", self._evidence),
                web.post("/receipts", self._receipts),
                web.get("/leaderboard", self._leaderboard),
                web.get("/leaderboard/me", self._me),
                web.get("/credit/mine", self._credit_mine),
                self._publisher.route(),
                *self._page.routes(),
                *(self.data.routes() if self.data is not None else ()),
            ]
        )
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        try:
            await self._runner.setup()
            site = web.TCPSite(
                self._runner, host, port, reuse_address=False, ssl_context=ssl_context
            )
            await site.start()
        except OSError as exc:
            await self.close()
            raise ConfigError(f"the coordinator cannot listen on {host}:{port}: {exc}") from None
        except BaseException:
            await self.close()
            raise
        sockets = getattr(site._server, "sockets", None) or []  # the bound port when 0 was asked
        self.host = host
        self.port = int(sockets[0].getsockname()[1]) if sockets else port
        self.tls = ssl_context is not None
        self._tasks.spawn("sweep", self._sweep())
        log.info("coordinator for %s at %s", self.project, self.url)

    async def close(self) -> None:
        await self._tasks.close()
        await self._page.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._store is not None:
            self._store.close()
            self._store = None

    # ---- accounts ----------------------------------------------------------------------------

    async def _info(self, request: web.Request) -> web.Response:
        access = self.manifest.access
        return answer(
            {
                "api": API_VERSION,
                "project": self.project,
                "project_key": str(self.project_key.peer_id),
                "mode": access.mode,
                "allow_signup": access.allow_signup,
                "bootstrap": self.bootstrap,
                "pass_lifetime": access.pass_lifetime,
                "refresh_interval": access.refresh_interval,
            }
        )

    async def _signup(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        username = Username.parse(body.get("username"))
        password = Password.parse(body.get("password"))
        accounts = self.store.accounts
        existing = accounts.find(username)
        if existing is None and not self.manifest.access.allow_signup:
            raise Forbidden("sign-up is closed for this project; ask a moderator to invite you")
        self.signups.attempt(self.client_address(request))  # 429 here, before any hashing
        if existing is None:
            accounts.check_new(username, signup=True)
            hashed = await self._hash(password)
            user = accounts.create(username, hashed, self.clock.time(), allowlisted=False)
        elif existing.has_password:
            raise Conflict(f"the name {username.name!r} is taken")
        else:  # an invitation: a moderator allowlisted the name without a password
            existing.check_standing(allow_signup=True)
            user = accounts.claim_invitation(username, await self._hash(password))
        log.info("new account %r", user.name)
        return answer({"username": user.name}, status=201)

    async def _login(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        username = Username.parse(body.get("username"))
        password = Password.parse(body.get("password"))
        address = self.client_address(request)
        key = self.store.accounts.stored_key(username)
        self.limiter.begin(key, address)  # 429 here, before any password is checked
        stored = self.store.accounts.password_hash(key)
        if not await self._verify(password, stored):
            raise Unauthorized("wrong username or password")
        self.limiter.succeeded(key, address)
        user = self._standing(key)
        if stored is not None and needs_rehash(stored, self.params):
            self.store.accounts.set_password_hash(user.key, await self._hash(password))
        return answer(self._session(user, self.store.sessions.create(user.key, self.clock.time())))

    async def _refresh(self, request: web.Request) -> web.Response:
        refresh = string_field(await json_body(request), "refresh", max_chars=MAX_TOKEN_CHARS)
        now = self.clock.time()
        expired = Unauthorized("the refresh token is unknown or has expired; log in again")
        owner = self.store.sessions.owner_of_refresh(refresh, now)
        if owner is None:
            raise expired
        user = self._standing(owner)
        rotated = self.store.sessions.rotate(refresh, now)
        if rotated is None:
            raise expired
        return answer(self._session(user, rotated[1]))

    async def _logout(self, request: web.Request) -> web.Response:
        self.store.sessions.end(bearer(request))
        return web.Response(status=204)

    # ---- passes ------------------------------------------------------------------------------

    async def _challenge(self, request: web.Request) -> web.Response:
        user = self._session_user(request)
        challenge, expires = self.challenges.issue(user.key, self.clock.time())
        return answer(
            {
                "challenge": challenge,
                "expires": expires,
                "project": self.project,
                "username": user.name,
            }
        )

    async def _pass(self, request: web.Request) -> web.Response:
        user = self._session_user(request)
        body = await json_body(request)
        raw_peer = string_field(body, "peer", max_chars=200)
        try:
            peer = PeerID.from_string(raw_peer)
        except PeerIdError as exc:
            raise BadRequest(f"peer is not a PeerID: {exc}") from None
        if body.get("challenge") is None and body.get("signature") is None:
            raise BadProof(UPDATE)  # a client from before proofs of possession
        challenge = string_field(body, "challenge", max_chars=MAX_CHALLENGE_CHARS)
        signature = signature_bytes(string_field(body, "signature", max_chars=MAX_SIGNATURE_CHARS))
        now = self.clock.time()
        self.store.peer_keys.check_free_for(user.key, str(peer))
        self.challenges.redeem(challenge, user.key, now)
        if not peer.verify(signature, proof_payload(self.project, user.name, peer, challenge)):
            raise BadProof(
                f"the signature does not prove that this account holds the key of peer {peer}"
            )
        self.store.peer_keys.claim(user.key, str(peer), now)
        access = self.manifest.access
        issued = issue_pass(
            self.project_key,
            self.project,
            user.name,
            peer,
            issued=now,
            lifetime=access.pass_lifetime,
        )
        self.store.passes.record(user.key, str(peer), issued.issued, issued.expires)
        return answer(
            {
                "pass": pass_to_text(issued),
                "expires": issued.expires,
                "project_key": str(self.project_key.peer_id),
                "bootstrap": self.bootstrap,
                "revoked": self.store.passes.revoked(now),
                "refresh_interval": access.refresh_interval,
            }
        )

    async def _revocations(self, request: web.Request) -> web.Response:
        now = self.clock.time()
        return answer({"revoked": self.store.passes.revoked(now), "time": now})

    async def _rollback(self, request: web.Request) -> web.Response:
        """The latest rollback order, signed; public like the revocations (peers verify it)."""
        latest = self.store.rollbacks.latest()
        return answer({"rollback": None} if latest is None else latest.to_json())

    # ---- contributions and the leaderboard ---------------------------------------------------

    async def _contributions(self, request: web.Request) -> web.Response:
        user = self._session_user(request)
        if not user.moderator:
            raise Forbidden("only a moderator account may report contributions")
        body = await json_body(request, LARGE_BODY)
        with reading_report():
            report = EpochReport.from_json(body, self.clock.time())
        if report.withdrawn:
            return self._withdraw(report)
        verdicts = Judge(
            self.project,
            self.project_key.peer_id,
            self.manifest.access.pass_lifetime,
            self.store.accounts.find,
            self.store.peer_keys.owner,
        )(report)
        added = self.store.contributions.record(
            report.epoch, report.time, report.samples, verdicts.counted, late=report.late
        )
        if report.figures is not None:
            self.store.figures.record(report.figures, self.clock.time())
        self._page.changed()
        log.info(
            "epoch %d%s: %d contributions accepted (%d new), %d rejected",
            report.epoch,
            " (late)" if report.late else "",
            len(verdicts.counted),
            added,
            len(verdicts.rejected),
        )
        return answer({"accepted": len(verdicts.counted), "rejected": verdicts.rejected})

    def _withdraw(self, report: EpochReport) -> web.Response:
        """Credit the backbone takes back (a peer caught faking work, or one a check could not reach
        while it kept the work): whichever account the stored rows credited, whatever its
        standing or its pass's now."""
        reasons = {
            part.peer: part.note for part in report.contributions if isinstance(part, Contribution)
        }
        refused = [
            {"peer": part.peer, "reason": part.reason}
            for part in report.contributions
            if isinstance(part, Refused)
        ]
        taken = self.store.contributions.withdraw(report.epoch, reasons)
        if taken:
            self._page.changed()
        log.warning("epoch %d: %d samples of %d peer(s) withdrawn by the work checks",
                    report.epoch, taken, len(reasons))  # fmt: skip
        return answer({"accepted": 0, "withdrawn": taken, "rejected": refused})

    async def _evaluations(self, request: web.Request) -> web.Response:
        user = self._session_user(request)
        if not user.moderator:
            raise Forbidden("only a moderator account may report evaluations")
        now = self.clock.time()
        body = await json_body(request)
        with reading_report():
            evaluation = Evaluation.from_json(body, now)
        stored = self.store.evaluations.record(evaluation, now)
        if stored:
            self._page.changed()
        log.info("held-out evaluation of epoch %d: loss %.4g, accuracy %.3f%s",
                 evaluation.epoch, evaluation.loss, evaluation.accuracy,
                 "" if stored else " (already stored)")  # fmt: skip
        return answer({"epoch": evaluation.epoch, "stored": stored})

    async def _evidence(self, request: web.Request) -> web.Response:
        user = self._session_user(request)
        if not user.moderator:
            raise Forbidden("only a moderator account may report evidence")
        body = await json_body(request, LARGE_BODY)
        with reading_report():
            items = EVIDENCE.entries(body)
        now = self.clock.time()
        store = self.store
        verdicts = EvidenceJudge(
            self.project,
            now,
            store.accounts.get,
            store.peer_keys.owner,
            store.evidence.received_since,
        )(items)
        added = store.evidence.record(verdicts.accepted, now)
        log.info("evidence: %d accusations accepted (%d new), %d rejected",
                 len(verdicts.accepted), added, len(verdicts.rejected))  # fmt: skip
        return answer(
            {"accepted": len(verdicts.accepted), "new": added, "rejected": verdicts.rejected}
        )

    async def _receipts(self, request: web.Request) -> web.Response:
        """Trainers' signed receipts for an expert server's work, posted by the account that
        proved the server's key (any logged-in account may try); judged and credited in
        ``reports.receipts``."""
        user = self._session_user(request)
        body = await json_body(request, LARGE_BODY)
        with reading_report():
            items = RECEIPTS.entries(body)
        now = self.clock.time()
        receipts = self.store.receipts
        verdicts = ReceiptJudge(
            self.project,
            user,
            now,
            self.store.accounts.get,
            self.store.peer_keys.owner,
            receipts.known,
            receipts.new_since,
        )(items)
        credit = receipts.record(user.key, verdicts.accepted, now)
        if credit.samples:
            self._page.changed()
        log.info("receipts from %s: %d accepted (%d expert samples credited), %d rejected",
                 user.name, len(verdicts.accepted), credit.samples,
                 len(verdicts.rejected))  # fmt: skip
        return answer(
            {
                "accepted": len(verdicts.accepted),
                "credited": credit.samples,
                "rejected": verdicts.rejected,
            }
        )

    async def _leaderboard(self, request: web.Request) -> web.Response:
        text = request.query.get("limit", "10")
        # The length first: int() of thousands of digits is slow, and refused beyond 4300.
        short = len(text) <= len(str(MAX_LEADERBOARD))
        if not (short and text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_LEADERBOARD):
            raise BadRequest(f"limit must be a whole number from 1 to {MAX_LEADERBOARD}")
        now = self.clock.time()
        board = self.store.leaderboard
        return answer({"time": now, "users": board.top(int(text), now), "totals": board.totals()})

    async def _me(self, request: web.Request) -> web.Response:
        user = self._session_user(request)
        return answer(self.store.leaderboard.me(user.key, user.name, self.clock.time()))

    async def _credit_mine(self, request: web.Request) -> web.Response:
        """What one peer key of the caller's was credited, in all and from epoch ``since`` on, for
        its engine to compare with its own count (``peer_credit``). Only a key this account
        proved it holds: which epochs another volunteer's device joined is theirs to know."""
        user = self._session_user(request)
        peer = str(parse_peer(request.query.get("peer")))
        since = parse_since(request.query.get("since"))
        if self.store.peer_keys.owner(peer) != user.key:
            raise Forbidden(
                f"peer key {peer} is not one this account proved it holds: only the credit of "
                "your own devices' keys can be read (a device proves its key when it gets a pass)"
            )
        return answer(self.store.peer_credit.of(peer, since).to_json())

    # ---- helpers -----------------------------------------------------------------------------

    def client_address(self, request: web.Request) -> str | None:
        """The address the rate limits count ``request`` under: its TCP peer, or behind a trusted
        proxy the client that proxy names (``client_address``)."""
        return self.proxies.client_address(
            request.remote, request.headers.getall(FORWARDED_FOR, [])
        )

    def _session_user(self, request: web.Request) -> User:
        """The user whose live session the request carries, if they may take part now."""
        key = self.store.sessions.user_of(bearer(request), self.clock.time())
        if key is None:
            raise Unauthorized("the session has expired or was ended; refresh it or log in again")
        return self._standing(key)

    def _standing(self, key: str) -> User:
        user = self.store.accounts.get(key)
        if user is None:
            raise Unauthorized("wrong username or password")
        user.check_standing(allow_signup=self.manifest.access.allow_signup)
        return user

    @staticmethod
    def _session(user: User, tokens: Tokens) -> dict[str, Any]:
        return {
            "username": user.name,
            "role": user.role,
            "session": tokens.session,
            "refresh": tokens.refresh,
            "session_expires": tokens.session_expires,
        }

    async def _hash(self, password: Password) -> str:
        async with self._hashing:
            return await asyncio.to_thread(hash_password, password, self.params)

    async def _verify(self, password: Password, stored: str | None) -> bool:
        """Check ``password``; without an account (or a password) check a dummy hash instead, so
        that the answer takes as long whether or not the name exists."""
        if stored is None:
            if self._dummy_hash is None:
                self._dummy_hash = await self._hash(Password("no account has this password"))
            await self._check(password, self._dummy_hash)
            return False
        return await self._check(password, stored)

    async def _check(self, password: Password, stored: str) -> bool:
        async with self._hashing:
            return await asyncio.to_thread(verify_password, password, stored)

    def sweep(self) -> int:
        """Forget expired sessions and stale rate-limit entries; returns the sessions forgotten."""
        forgotten = self.store.sessions.purge(self.clock.time())
        self.limiter.sweep()
        self.signups.sweep()
        if forgotten:
            log.info("forgot %d expired sessions", forgotten)
        return forgotten

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(self._sweep_interval)
            self.sweep()
