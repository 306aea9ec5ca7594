"""Logging a headless peer (``barnraise peer`` / ``backbone``) in to its project's coordinator.

The password comes from ``--password-stdin``, else the ``BARNRAISE_PASSWORD`` environment variable,
else a prompt when a terminal is attached; it is used once, for the login, and never stored or logged.
In a moderated project the session then keeps the peer's pass fresh (a ``PassKeeper``) and, for an
backbone, reports completed epochs to the coordinator (a ``CoordinatorReporter``). An open
project's backbone given an account only reports (``reporting_access``): its epochs' figures
are what the coordinator's project page shows.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from core.config.environment import PASSWORD_VARIABLE
from core.net.host.gate import AccessGate
from core.trust.identity import Identity
from core.util.errors import ConfigError

if TYPE_CHECKING:
    from core.account import PassKeeper
    from core.account.reporter import CoordinatorReporter
    from core.project import AnyManifest

log = logging.getLogger(__name__)


@dataclass
class PeerAccess:
    gate: AccessGate
    keeper: PassKeeper
    reporter: CoordinatorReporter | None

    @property
    def bootstrap(self) -> list[str]:
        """Entry peers the coordinator named with the pass."""
        return [] if self.keeper.grant is None else list(self.keeper.grant.bootstrap)


def add_login_arguments(
    parser: argparse.ArgumentParser,
    username_help: str = "your account at a moderated project's coordinator",
) -> None:
    """``--username`` and ``--password-stdin``: how every process that logs in is given its account."""
    parser.add_argument("--username", default=None, help=username_help)
    parser.add_argument(
        "--password-stdin",
        action="store_true",
        help=f"read the password from stdin (else ${PASSWORD_VARIABLE}, else a prompt)",
    )


def read_password(from_stdin: bool) -> str:
    """The password for a headless login, from stdin, the environment or a prompt."""
    if from_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif PASSWORD_VARIABLE in os.environ:
        password = os.environ[PASSWORD_VARIABLE]
    elif sys.stdin.isatty():
        import getpass  # noqa: PLC0415 - only to ask: it loads the terminal modules

        password = getpass.getpass("password: ")
    else:
        raise ConfigError(
            f"logging in to the coordinator needs a password: pass --password-stdin or set "
            f"{PASSWORD_VARIABLE}"
        )
    if not password:
        raise ConfigError("the password is empty")
    return password


@asynccontextmanager
async def moderated_access(
    manifest: AnyManifest, identity: Identity, username: str | None, password: str, *, report: bool
) -> AsyncIterator[PeerAccess]:
    """Log in, get the first pass, keep it fresh while the block runs, then log out."""
    # the coordinator client (aiohttp) and the keyring only for a login: an open project's node,
    # and every command's --help, start without them
    from core.account import AccountError, AccountSession, CoordinatorClient, PassKeeper  # noqa: PLC0415
    from core.account.reporter import CoordinatorReporter  # noqa: PLC0415

    key = manifest.access.key
    if key is None or not manifest.network.coordinator_url:
        raise ConfigError("the manifest names no project key or coordinator")
    if not username:
        raise ConfigError(
            f"project {manifest.project.name} is moderated: give --username (and a password)"
        )
    gate = AccessGate(manifest.project.name, key, identity.peer_id)
    async with CoordinatorClient(manifest.network.coordinator_url) as client:
        session = AccountSession(client, await client.login(username, password))

        def warn(exc: AccountError) -> None:
            log.warning("access pass: %s", exc)

        keeper = PassKeeper(session, gate, identity.sign, on_error=warn)
        await keeper.start()
        reporter = CoordinatorReporter(session) if report else None
        try:
            yield PeerAccess(gate, keeper, reporter)
        finally:
            if reporter is not None:
                await reporter.close()
            await keeper.close()
            try:
                await session.logout()
            except AccountError as exc:
                log.info("logout: %s", exc)


@asynccontextmanager
async def reporting_access(
    manifest: AnyManifest, username: str, password: str
) -> AsyncIterator[CoordinatorReporter]:
    """Log in (an open project: no pass to keep) and report epochs while the block runs; then send
    what is queued and log out. The account must be a moderator's, as for any reporter."""
    from core.account import AccountError, AccountSession, CoordinatorClient  # noqa: PLC0415
    from core.account.reporter import CoordinatorReporter  # noqa: PLC0415

    url = manifest.network.coordinator_url
    if not url:
        raise ConfigError(
            f"--username was given, but project {manifest.project.name}'s manifest names no "
            "coordinator to report to: set network.coordinator_url, or leave out --username"
        )
    async with CoordinatorClient(url) as client:
        session = AccountSession(client, await client.login(username, password))
        reporter = CoordinatorReporter(session)
        try:
            yield reporter
        finally:
            await reporter.close()
            try:
                await session.logout()
            except AccountError as exc:
                log.info("logout: %s", exc)


class _MoESettings(Protocol):
    """What the mixture-of-experts commands' settings share (``ExpertHostSettings``,
    ``MoETrainerSettings``): frozen dataclasses with these fields."""

    @property
    def manifest(self) -> AnyManifest: ...

    @property
    def initial_peers(self) -> tuple[str, ...]: ...


SettingsT = TypeVar("SettingsT", bound=_MoESettings)


async def with_access(
    settings: SettingsT,
    args: argparse.Namespace,
    serve: Callable[[SettingsT, CoordinatorReporter | None], Awaitable[int]],
    *,
    report: bool = False,
) -> int:
    """``serve(settings, reporter)``, logged in first when the project is moderated: the settings
    then carry a fresh identity, the gate holding its pass, and the coordinator's entry peers unless
    some were given (the mixture-of-experts commands; ``barnraise peer`` also reports
    contributions). ``report``: the account reports to the coordinator (an expert server its
    trainers' receipts, and a moderator's backbone evidence); ``reporter`` is None in an open
    project or without it."""
    if not settings.manifest.access.moderated:
        return await serve(settings, None)
    identity = Identity.generate()
    password = read_password(args.password_stdin)
    async with moderated_access(
        settings.manifest, identity, args.username, password, report=report
    ) as access:
        del password
        changes: dict[str, Any] = {
            "identity": identity,
            "access": access.gate,
            "initial_peers": settings.initial_peers or tuple(access.bootstrap),
        }
        chosen = dataclasses.replace(settings, **changes)  # type: ignore[type-var]
        return await serve(chosen, access.reporter)
