"""Account: the volunteer's login at the active project's coordinator, as the engine holds it.

It follows the active project (its manifest's ``network.coordinator_url``): one coordinator client,
the session loaded from the OS keyring, and, while a moderated project's peer runs, the pass keeper
and the ``AccessGate`` that peer shows others. Logins and new session secrets go to the keyring
(a keyring that cannot be used leaves the login in memory until the engine stops, and says so).
Every change of what ``info()`` says is handed to ``on_change`` (the engine publishes it as an
event). Account errors leave as they are (``LoginFailed``, ``RateLimited``, ...: the coordinator's
words); the control server maps them onto the API's.

Whether volunteers may sign up themselves is the coordinator's to say (``GET /info``): it is asked
in the background whenever the coordinator changes, again and again with a growing pause while it
does not answer; until it has answered, the manifest's ``access.allow_signup`` stands in.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from core.account import (
    AccountError,
    AccountSession,
    CoordinatorClient,
    CoordinatorUnavailable,
    CredentialStore,
    KeyringUnavailable,
    NotLoggedIn,
    PassKeeper,
    SessionTokens,
)
from core.account.replies import CreditedEpochs
from core.api.codec import decode
from core.api.errors import ApiError
from core.api.schema import (
    AccountInfo,
    HistoryDay,
    Leaderboard,
    LeaderboardEntry,
    LeaderboardTotals,
    MyRank,
)
from core.engine.errors import InvalidArgument, NoCoordinator
from core.net.host.gate import AccessGate
from core.project import AnyManifest, ManifestError, load_any_manifest
from core.trust.peer_id import PeerID
from core.util.blocking import BlockingPool
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")
INFO_RETRY = (2.0, 60.0)
"""Seconds before asking a silent coordinator for its project info again: first, and at most."""


class Account:
    def __init__(
        self,
        store: CredentialStore,
        *,
        on_change: Callable[[AccountInfo], None],
        timeout: float = 10.0,
        blocking: BlockingPool | None = None,
    ) -> None:
        """``blocking``: where the keyring and manifests are used (the engine's pool; without one,
        threads of the loop's default executor)."""
        self._store = store
        self._blocking = blocking
        self._on_change = on_change
        self._timeout = timeout
        self.manifest: AnyManifest | None = None
        self.session: AccountSession | None = None
        self.keeper: PassKeeper | None = None
        self._client: CoordinatorClient | None = None
        self._error: str | None = None
        self._last: AccountInfo | None = None
        self._tasks = BackgroundTasks("account")
        self._saving = asyncio.Lock()  # rotated secrets are written in the order they came
        # one change of coordinator at a time; a starting peer asks for its pass after the change
        # under way (a switch of the active project opens the new peer before the account follows)
        self._following = asyncio.Lock()
        self._writes: set[asyncio.Task[None]] = set()
        self._signup: bool | None = None
        """The coordinator's ``allow_signup``, once it has told us."""
        self._asking: asyncio.Task[None] | None = None

    @property
    def url(self) -> str | None:
        return (self.manifest.network.coordinator_url or None) if self.manifest else None

    @property
    def moderated(self) -> bool:
        return self.manifest is not None and self.manifest.access.moderated

    # ---- following the active project ------------------------------------------------------------

    async def select(self, manifest_path: Path | None) -> None:
        """Follow the project whose manifest is at ``manifest_path`` (None: no project)."""
        async with self._following:
            await self._select(manifest_path)

    async def _select(self, manifest_path: Path | None) -> None:
        manifest = None
        error = None
        if manifest_path is not None:
            try:
                manifest = await self._off_loop(load_any_manifest, manifest_path)
            except ManifestError as exc:
                error = str(exc)
        old_url = self.url
        self.manifest = manifest
        if self.url != old_url:
            await self._close_client()
            self._error = None
            if self.url is not None:
                self._client = CoordinatorClient(self.url, timeout=self._timeout)
                tokens = await self._load(self.url)
                self.session = AccountSession(
                    self._client, tokens, self._tokens_renewed, on_expired=self._expired
                )
                if not self._tasks.closed:
                    self._asking = self._tasks.spawn(
                        "coordinator-info", self._ask_info(self._client, self.url)
                    )
        if error is not None:
            self._error = error
        self._publish()

    async def close(self) -> None:
        if self._writes:  # a rotated refresh secret must reach the keyring before we go
            await asyncio.wait(self._writes, timeout=5.0)
        await self._tasks.close()
        await self._close_client()

    # ---- commands --------------------------------------------------------------------------------

    async def login(self, username: str, password: str, *, signup: bool = False) -> AccountInfo:
        url, client, session = self._coordinator()
        if signup:
            await client.signup(username, password)
        tokens = await client.login(username, password)
        previous = session.tokens
        session.replace(tokens)
        if previous is not None:
            with contextlib.suppress(AccountError):  # end the old session; it is gone here anyway
                await client.logout(previous)
        log.info("logged in to %s as %s", url, tokens.username)
        self._error = None
        try:
            async with self._saving:
                await self._off_loop(self._store.save, url, tokens)
        except KeyringUnavailable as exc:
            self._error = f"logged in until the engine stops: {exc}"
        self._publish()
        return self.info()

    async def logout(self) -> AccountInfo:
        url, _, session = self._coordinator()
        try:
            await session.logout()
        except AccountError as exc:  # the coordinator is down: the secrets are forgotten anyway
            log.warning("the coordinator did not hear the logout: %s", exc)
        session.replace(None)
        self._error = None
        with contextlib.suppress(KeyringUnavailable):  # nothing could have been saved then
            async with self._saving:
                await self._off_loop(self._store.delete, url)
        self._publish()
        return self.info()

    async def open_access(
        self, manifest: AnyManifest, me: PeerID, sign: Callable[[bytes], bytes]
    ) -> PassKeeper:
        """Fetch a pass for ``me`` (``sign``: its key's, proving we hold it) and keep it fresh
        (a moderated project's peer is starting)."""
        async with self._following:  # a change of project under way ends first
            pass
        key = manifest.access.key
        session = self.session
        if key is None or manifest.network.coordinator_url != self.url or session is None:
            raise AccountError(f"the manifest of {manifest.project.name} changed; attach it again")
        if session.tokens is None:
            raise NotLoggedIn(
                f"{manifest.project.name} admits only volunteers with an account; "
                "log in with 'barnraise ctl login'"
            )
        gate = AccessGate(manifest.project.name, key, me)
        keeper = PassKeeper(session, gate, sign, on_error=self._keeper_failed)
        await keeper.start()
        gate.add_listener(self._publish)
        self.keeper = keeper
        self._publish()
        return keeper

    async def close_access(self, keeper: PassKeeper) -> None:
        await keeper.close()
        keeper.gate.remove_listener(self._publish)
        if self.keeper is keeper:
            self.keeper = None
            self._publish()

    # ---- views -----------------------------------------------------------------------------------

    def info(self) -> AccountInfo:
        session, keeper = self.session, self.keeper
        error = self._error
        if keeper is not None and keeper.error is not None:
            error = str(keeper.error)
        return AccountInfo(
            project=self.manifest.project.name if self.manifest else None,
            coordinator=self.url,
            username=session.username if session else None,
            logged_in=session is not None and session.tokens is not None,
            pass_expires=keeper.expires if keeper is not None else None,
            error=error,
            moderated=self.moderated,
            allow_signup=self._allow_signup(),
        )

    def secrets(self) -> list[str]:
        """The session and refresh secrets held now (to keep them out of diagnostics)."""
        tokens = self.session.tokens if self.session is not None else None
        return [] if tokens is None else [tokens.session, tokens.refresh]

    async def leaderboard(self, limit: int) -> Leaderboard:
        if not 1 <= limit <= 1000:
            raise InvalidArgument("limit must be between 1 and 1000")
        _, client, _ = self._coordinator()
        data = await client.leaderboard(limit)
        assert self.manifest is not None
        return _read(
            Leaderboard,
            {
                "project": self.manifest.project.name,
                "time": data.get("time"),
                "users": [_pick(LeaderboardEntry, u) for u in data["users"]],
                "totals": _pick(LeaderboardTotals, data["totals"]),
            },
        )

    async def my_rank(self) -> MyRank:
        _, _, session = self._coordinator()
        data = await session.leaderboard_me()
        assert self.manifest is not None
        history = data["history"]
        return _read(
            MyRank,
            _pick(MyRank, data)
            | {
                "project": self.manifest.project.name,
                "above": [_pick(LeaderboardEntry, u) for u in _list(data.get("above"))],
                "below": [_pick(LeaderboardEntry, u) for u in _list(data.get("below"))],
                "history_7d": [_pick(HistoryDay, d) for d in _list(history.get("7d"))],
                "history_30d": [_pick(HistoryDay, d) for d in _list(history.get("30d"))],
            },
        )

    async def credit_mine(self, peer: PeerID, since: int) -> CreditedEpochs:
        """What the coordinator credited to ``peer`` (this computer's key), in all and per epoch
        from ``since`` on; ``NoCoordinator`` and ``NotLoggedIn`` as ``my_rank``."""
        _, _, session = self._coordinator()
        return await session.credit_mine(peer, since)

    # ---- helpers ---------------------------------------------------------------------------------

    async def _off_loop(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """``fn`` on the engine's blocking pool (a keyring may wait on a password prompt)."""
        if self._blocking is not None:
            return await self._blocking.run(fn, *args, **kwargs)
        return await asyncio.to_thread(fn, *args, **kwargs)

    def _coordinator(self) -> tuple[str, CoordinatorClient, AccountSession]:
        if self.manifest is None:
            raise NoCoordinator("no project is attached: attach one first (barnraise ctl attach)")
        if self.url is None or self._client is None or self.session is None:
            raise NoCoordinator(
                f"{self.manifest.project.name} has no coordinator: it is open to everyone "
                "and has no accounts or leaderboard"
            )
        return self.url, self._client, self.session

    async def _load(self, url: str) -> SessionTokens | None:
        try:
            return await self._off_loop(self._store.load, url)
        except KeyringUnavailable as exc:
            self._error = str(exc)
            return None

    def _allow_signup(self) -> bool:
        if self.url is None or self.manifest is None:
            return False
        if self._signup is not None:
            return self._signup
        return self.manifest.access.allow_signup

    async def _ask_info(self, client: CoordinatorClient, url: str) -> None:
        """Learn from the coordinator whether it lets volunteers sign up."""
        pause, longest = INFO_RETRY
        while True:
            try:
                info = await client.info()
                break
            except AccountError as exc:  # not up yet (a demo swarm starting), or unreachable
                log.debug("the coordinator at %s did not say whether sign-up is open: %s", url, exc)
            await asyncio.sleep(pause)
            pause = min(longest, pause * 2)
        if self.url == url:
            self._signup = info.allow_signup
            self._publish()

    def _tokens_renewed(self, tokens: SessionTokens) -> None:
        self._write(tokens)

    def _expired(self) -> None:
        self._error = "the login expired: log in again (barnraise ctl login)"
        self._write(None)
        self._publish()

    def _write(self, tokens: SessionTokens | None) -> None:
        """Save (or, with None, forget) the login in the background, in order."""
        url = self.url
        if url is not None and not self._tasks.closed:
            task = self._tasks.spawn("save-login", self._save(url, tokens))
            self._writes.add(task)
            task.add_done_callback(self._writes.discard)

    async def _save(self, url: str, tokens: SessionTokens | None) -> None:
        async with self._saving:
            try:
                if tokens is None:
                    await self._off_loop(self._store.delete, url)
                else:
                    await self._off_loop(self._store.save, url, tokens)
            except KeyringUnavailable as exc:
                log.warning("could not update the saved login: %s", exc)

    def _keeper_failed(self, exc: AccountError) -> None:
        self._publish()

    def _publish(self) -> None:
        info = self.info()
        if info != self._last:
            self._last = info
            self._on_change(info)

    async def _close_client(self) -> None:
        asking, self._asking = self._asking, None
        if asking is not None and not asking.done():
            asking.cancel()  # it uses the client that closes now
            await asyncio.gather(asking, return_exceptions=True)
        self._signup = None
        if self._client is not None:
            await self._client.close()
        self._client = None
        self.session = None


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _pick(cls: type[Any], data: object) -> Any:
    """Keep the fields ``cls`` knows: a newer coordinator may say more."""
    if not isinstance(data, dict):
        return data
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def _read(cls: type[T], data: object) -> T:
    try:
        return decode(cls, data)
    except ApiError as exc:  # the codec's words for a shape it cannot read
        raise CoordinatorUnavailable(
            f"the coordinator sent a {cls.__name__} we cannot read: {exc}"
        ) from None
