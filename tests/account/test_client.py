"""CoordinatorClient and AccountSession against a real coordinator on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from core.account import (
    AccessRefused,
    AccountError,
    AccountSession,
    CoordinatorClient,
    CoordinatorUnavailable,
    LoginFailed,
    NotLoggedIn,
    RateLimited,
    SessionTokens,
    SignupClosed,
)
from core.coordinator import LoginLimits
from core.net import Identity
from core.net.host.gate import AccessGate
from core.trust.passes import pass_to_text
from tests.account.coordinator import PASSWORD, PROJECT, Coordinator, running_coordinator


async def test_info_login_and_wrong_passwords(
    coordinator: Coordinator, client: CoordinatorClient
) -> None:
    info = await client.info()
    assert (info.project, info.mode, info.allow_signup) == (PROJECT, "moderated", False)
    assert info.project_key == coordinator.key.peer_id
    assert info.bootstrap == ["127.0.0.1:4001"]
    assert (info.pass_lifetime, info.refresh_interval) == (12.0, 0.2)

    tokens = await client.login("Alice", PASSWORD)  # names are case-insensitive
    assert (tokens.username, tokens.role) == ("alice", "volunteer")
    assert tokens.session_expires > time.time()
    assert tokens.session not in repr(tokens)
    assert tokens.refresh not in repr(tokens)

    with pytest.raises(LoginFailed, match="wrong username or password") as wrong:
        await client.login("alice", "not the password")
    assert PASSWORD not in str(wrong.value)
    with pytest.raises(LoginFailed, match="wrong username or password"):
        await client.login("nobody", PASSWORD)
    with pytest.raises(SignupClosed, match="sign-up is closed"):
        await client.signup("newcomer", PASSWORD)
    with pytest.raises(AccountError, match="password"):
        await client.login("alice", "short")  # too short for any account: a 400 in plain words


async def test_repeated_failures_are_rate_limited(tmp_path: Path) -> None:
    limits = LoginLimits(user_threshold=3, first_delay=30.0)
    async with running_coordinator(tmp_path, limits=limits) as coordinator:
        coordinator.add_user("alice")
        async with CoordinatorClient(coordinator.url) as client:
            for _ in range(3):
                with pytest.raises(LoginFailed):
                    await client.login("alice", "guess guess guess")
            with pytest.raises(RateLimited, match="too many login attempts") as limited:
                await client.login("alice", PASSWORD)  # even the right password waits
            assert 25 <= limited.value.retry_after <= 30


async def test_banned_users_are_refused(
    coordinator: Coordinator, client: CoordinatorClient
) -> None:
    tokens = await client.login("alice", PASSWORD)
    coordinator.ban("alice")
    with pytest.raises(AccessRefused, match="banned"):
        await client.login("alice", PASSWORD)
    key = Identity.generate()
    with pytest.raises(AccessRefused, match="banned"):
        await client.request_pass(tokens, key.peer_id, key.sign, project=PROJECT)
    with pytest.raises(AccessRefused, match="banned"):
        await client.refresh(tokens)


async def test_pass_grant_verifies_and_opens_the_gate(
    coordinator: Coordinator, client: CoordinatorClient
) -> None:
    key = Identity.generate()
    me = key.peer_id
    tokens = await client.login("alice", PASSWORD)
    grant = await client.request_pass(tokens, me, key.sign, project=PROJECT)
    assert grant.access.peer == me
    assert grant.access.username == "alice"
    assert grant.project_key == coordinator.key.peer_id
    assert grant.expires == grant.access.expires
    assert 11 <= grant.expires - time.time() <= 12.5
    assert grant.bootstrap == ["127.0.0.1:4001"]
    assert grant.revoked == frozenset()
    assert grant.refresh_interval == 0.2
    grant.access.check(PROJECT, coordinator.key.peer_id, time.time())
    gate = AccessGate(PROJECT, coordinator.key.peer_id, me)
    gate.set_pass(grant.access)
    assert gate.own_pass == grant.access
    assert await client.revocations() == frozenset()


async def test_a_key_another_account_proved_is_refused_for_good(
    coordinator: Coordinator, client: CoordinatorClient
) -> None:
    """The same identity logged in as a second account: a refusal, not an error to retry."""
    coordinator.add_user("bob")
    key = Identity.generate()
    alice = await client.login("alice", PASSWORD)
    await client.request_pass(alice, key.peer_id, key.sign, project=PROJECT)
    bob = await client.login("bob", PASSWORD)
    with pytest.raises(AccessRefused, match="another account"):
        await client.request_pass(bob, key.peer_id, key.sign, project=PROJECT)


async def test_session_renews_once_and_rotates_the_refresh_secret(
    client: CoordinatorClient,
) -> None:
    tokens = await client.login("alice", PASSWORD)
    renewed: list[SessionTokens] = []
    # a session the coordinator no longer knows (ended, or from before a restart)
    stale = dataclasses.replace(tokens, session="x" * 43)
    session = AccountSession(client, stale, renewed.append)
    key = Identity.generate()
    me = key.peer_id
    grants = await asyncio.gather(
        session.request_pass(me, key.sign, project=PROJECT),
        session.request_pass(me, key.sign, project=PROJECT),
    )
    assert all(g.access.username == "alice" for g in grants)
    assert len(renewed) == 1  # both calls failed, yet the refresh secret was spent only once
    assert session.tokens == renewed[0]
    assert renewed[0].refresh != tokens.refresh
    with pytest.raises(NotLoggedIn):
        await client.refresh(tokens)  # the old refresh secret stopped working

    # a session past its stated expiry is renewed before the call, not after a refusal
    expired = dataclasses.replace(renewed[0], session_expires=time.time() - 1)
    session.replace(expired)
    me_rank = await session.leaderboard_me()
    assert me_rank["username"] == "alice"
    assert len(renewed) == 2

    # a refresh secret that is refused means a new login is needed
    dead = dataclasses.replace(tokens, session="y" * 43)
    lost: list[bool] = []
    expired_session = AccountSession(
        client, dead, renewed.append, on_expired=lambda: lost.append(True)
    )
    with pytest.raises(NotLoggedIn, match="log in again"):
        await expired_session.request_pass(me, key.sign, project=PROJECT)
    assert lost == [True]
    assert expired_session.tokens is None


async def test_contributions_and_the_leaderboard(
    coordinator: Coordinator, client: CoordinatorClient
) -> None:
    alice = await client.login("alice", PASSWORD)
    key = Identity.generate()
    me = key.peer_id
    grant = await client.request_pass(alice, me, key.sign, project=PROJECT)
    mod = AccountSession(client, await client.login("mod", PASSWORD))
    report = {
        "epoch": 1,
        "time": time.time(),
        "samples": 64,
        "contributions": [
            {"peer": str(me), "pass": pass_to_text(grant.access), "samples": 64,
             "compute_seconds": 2.5},
        ],
    }  # fmt: skip
    assert (await mod.report_contributions(report))["accepted"] == 1
    with pytest.raises(AccessRefused, match="moderator"):
        await client.report_contributions(alice, report)
    board = await client.leaderboard(5)
    assert [(u["username"], u["samples"]) for u in board["users"]] == [("alice", 64)]
    mine = await client.leaderboard_me(alice)
    assert (mine["rank"], mine["samples"]) == (1, 64)


async def test_coordinator_down_or_confused_is_unavailable(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with CoordinatorClient(f"http://127.0.0.1:{port}", timeout=2.0) as client:
        with pytest.raises(CoordinatorUnavailable, match="does not answer"):
            await client.login("alice", PASSWORD)
    async with _impostor() as url, CoordinatorClient(url, timeout=2.0) as client:
        with pytest.raises(CoordinatorUnavailable, match=r"malformed answer to GET /info"):
            await client.info()
        with pytest.raises(CoordinatorUnavailable, match=r"'session' is missing"):
            await client.login("alice", PASSWORD)
        with pytest.raises(CoordinatorUnavailable, match="HTTP 500: database on fire"):
            await client.revocations()
        tokens = SessionTokens("alice", "s", "r", time.time() + 60)
        key = Identity.generate()
        with pytest.raises(CoordinatorUnavailable, match="not an access pass"):
            await client.request_pass(tokens, key.peer_id, key.sign, project=PROJECT)
        # a challenge for another project (or user) is never signed
        with pytest.raises(AccountError, match="refusing to sign"):
            await client.request_pass(tokens, key.peer_id, key.sign, project="another project")
        signed = False

        def sign(data: bytes) -> bytes:
            nonlocal signed
            signed = True
            return key.sign(data)

        mallory = SessionTokens("mallory", "s", "r", time.time() + 60)
        with pytest.raises(AccountError, match="refusing to sign"):
            await client.request_pass(mallory, key.peer_id, sign, project=PROJECT)
        assert not signed


@contextlib.asynccontextmanager
async def _impostor() -> AsyncIterator[str]:
    """Something on the coordinator's port that does not speak its API."""

    async def page(request: web.Request) -> web.Response:
        return web.Response(text="<html>hello</html>", content_type="text/html")

    async def half(request: web.Request) -> web.Response:
        return web.json_response({"username": "alice"})

    async def broken(request: web.Request) -> web.Response:
        return web.json_response({"error": "database on fire"}, status=500)

    async def bad_pass(request: web.Request) -> web.Response:
        return web.json_response({"pass": "!!", "project_key": "x"})

    async def challenge(request: web.Request) -> web.Response:
        body = {"challenge": "c", "expires": 1.0, "project": PROJECT, "username": "alice"}
        return web.json_response(body)

    app = web.Application()
    app.add_routes(
        [
            web.get("/info", page),
            web.post("/login", half),
            web.get("/revocations", broken),
            web.post("/pass", bad_pass),
            web.post("/pass/challenge", challenge),
        ]
    )
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
