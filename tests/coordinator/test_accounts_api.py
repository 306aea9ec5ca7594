"""Sign-up, login, sessions and their refusals, through the real HTTP service."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from core.coordinator import API_VERSION, CoordinatorService, Password
from core.coordinator.people.passwords import verify_password
from core.util.errors import BarnraiseError
from tests.coordinator.conftest import PASSWORD, PROJECT, Running


async def test_info_describes_the_project(coordinator: Running) -> None:
    reply = await coordinator.client.get("/info")
    assert reply.status == 200
    assert reply.body == {
        "api": API_VERSION,
        "project": PROJECT,
        "project_key": str(coordinator.key.peer_id),
        "mode": "moderated",
        "allow_signup": False,
        "bootstrap": ["/ip4/127.0.0.1/tcp/4001/p2p/" + str(coordinator.key.peer_id)],
        "pass_lifetime": 600.0,
        "refresh_interval": 60.0,
    }


async def test_open_signup_creates_an_account_once(open_signup: Running) -> None:
    client = open_signup.client
    reply = await client.post("/signup", {"username": "Ada", "password": PASSWORD})
    assert (reply.status, reply.body) == (201, {"username": "Ada"})
    # names are unique without regard to case
    taken = await client.post("/signup", {"username": "ADA", "password": PASSWORD})
    assert taken.status == 409
    assert "taken" in taken.body["error"]
    session = await client.login("ada")  # any case logs in; the name keeps its first spelling
    assert session["username"] == "Ada"
    assert session["role"] == "volunteer"


async def test_closed_signup_refuses_strangers_but_honours_invitations(
    coordinator: Running,
) -> None:
    client = coordinator.client
    closed = await client.post("/signup", {"username": "mallory", "password": PASSWORD})
    assert closed.status == 403
    assert "sign-up is closed" in closed.body["error"]
    coordinator.add_user("grace", password=None)  # an invitation: allowlisted, no password
    # an invited name cannot be logged into before it is claimed
    assert (await client.post("/login", {"username": "grace", "password": PASSWORD})).status == 401
    claimed = await client.post("/signup", {"username": "Grace", "password": PASSWORD})
    assert (claimed.status, claimed.body) == (201, {"username": "Grace"})
    again = await client.post("/signup", {"username": "grace", "password": "another password"})
    assert again.status == 409
    assert (await client.login("grace"))["username"] == "Grace"


async def test_signup_refuses_bad_names_and_passwords(open_signup: Running) -> None:
    client = open_signup.client
    for name, words in [
        ("", "empty"),
        ("robert'); DROP TABLE users;--", "letters, digits"),
        ("tab\there", "letters, digits"),
        ("a" * 65, "at most 64"),
        (42, "must be a string"),
    ]:
        reply = await client.post("/signup", {"username": name, "password": PASSWORD})
        assert reply.status == 400, name
        assert words in reply.body["error"]
    short = await client.post("/signup", {"username": "ok", "password": "short"})
    assert short.status == 400
    assert "8 to 1024" in short.body["error"]
    assert "short" not in short.body["error"]  # the password is never echoed
    users = (await client.get("/leaderboard")).body
    assert users["totals"]["users"] == 0
    assert [u.name for u in open_signup.service.store.users()] == []


async def test_login_refusals_say_little_to_strangers(coordinator: Running) -> None:
    coordinator.add_user("alice")
    client = coordinator.client
    wrong = await client.post("/login", {"username": "alice", "password": "not the password"})
    unknown = await client.post("/login", {"username": "nobody", "password": PASSWORD})
    assert wrong.status == unknown.status == 401
    assert (
        wrong.body
        == unknown.body
        == {"error": "wrong username or password", "code": "unauthorized"}
    )
    assert "Bearer" in wrong.headers["WWW-Authenticate"]
    coordinator.service.store.ban("alice", "spam")
    banned = await client.post("/login", {"username": "alice", "password": PASSWORD})
    assert banned.status == 403
    assert "banned" in banned.body["error"]
    assert "spam" in banned.body["error"]


async def test_self_signed_up_users_need_the_allowlist_once_signup_closes(
    open_signup: Running,
) -> None:
    client = open_signup.client
    assert (await client.post("/signup", {"username": "eve", "password": PASSWORD})).status == 201
    await client.login("eve")
    # the organizer closes sign-up: only allowlisted people may still come in
    open_signup.service.manifest = open_signup.service.manifest.with_access(allow_signup=False)
    refused = await client.post("/login", {"username": "eve", "password": PASSWORD})
    assert refused.status == 403
    assert "allowlist" in refused.body["error"]
    open_signup.service.store.add_user("eve")  # a moderator vouches for eve
    await client.login("eve")


async def test_login_answers_a_session_that_works_and_refresh_rotates(coordinator: Running) -> None:
    coordinator.add_user("bob")
    client = coordinator.client
    first = await client.login("bob")
    assert set(first) == {"username", "role", "session", "refresh", "session_expires"}
    assert first["session_expires"] == coordinator.clock.time() + 24 * 3600
    assert (await client.get("/leaderboard/me", token=first["session"])).status == 200

    refreshed = await client.post("/session/refresh", {"refresh": first["refresh"]})
    assert refreshed.status == 200
    second = refreshed.body
    assert second["username"] == "bob"
    assert second["refresh"] != first["refresh"]
    assert second["session"] != first["session"]
    # the old pair stops working: a replayed refresh token finds nothing
    replay = await client.post("/session/refresh", {"refresh": first["refresh"]})
    assert replay.status == 401
    assert (await client.get("/leaderboard/me", token=first["session"])).status == 401
    assert (await client.get("/leaderboard/me", token=second["session"])).status == 200

    # sessions expire after a day; refresh tokens last 30 days
    coordinator.clock.advance(24 * 3600 + 1)
    assert (await client.get("/leaderboard/me", token=second["session"])).status == 401
    third = await client.post("/session/refresh", {"refresh": second["refresh"]})
    assert third.status == 200
    coordinator.clock.advance(31 * 86400)
    late = await client.post("/session/refresh", {"refresh": third.body["refresh"]})
    assert late.status == 401


async def test_refresh_of_a_banned_user_is_refused(coordinator: Running) -> None:
    coordinator.add_user("carol")
    session = await coordinator.client.login("carol")
    coordinator.service.store.ban("carol")
    reply = await coordinator.client.post("/session/refresh", {"refresh": session["refresh"]})
    assert reply.status == 403
    assert "banned" in reply.body["error"]


async def test_logout_ends_the_session(coordinator: Running) -> None:
    coordinator.add_user("dave")
    client = coordinator.client
    session = await client.login("dave")
    assert (await client.post("/logout", token=session["session"])).status == 204
    assert (await client.get("/leaderboard/me", token=session["session"])).status == 401
    assert (await client.post("/session/refresh", {"refresh": session["refresh"]})).status == 401
    assert (await client.post("/logout")).status == 401  # no bearer token at all


async def test_brute_force_logins_are_slowed_even_for_the_right_password(
    coordinator: Running,
) -> None:
    coordinator.add_user("frank")
    client = coordinator.client
    limits = coordinator.service.limiter.limits
    for _ in range(limits.user_threshold):
        wrong = await client.post("/login", {"username": "frank", "password": "guess-guess"})
        assert wrong.status == 401
    blocked = await client.post("/login", {"username": "frank", "password": PASSWORD})
    assert blocked.status == 429
    assert blocked.headers["Retry-After"] == str(blocked.body["retry_after"])
    assert blocked.body["retry_after"] == limits.first_delay
    # other names from the same address are not yet affected
    coordinator.add_user("gina")
    await client.login("gina")
    # after the wait the right password gets in and the name's count starts over
    coordinator.clock.advance(blocked.body["retry_after"])
    await client.login("frank")
    assert (await client.post("/login", {"username": "frank", "password": "x" * 8})).status == 401


async def test_malformed_requests_get_plain_errors(coordinator: Running) -> None:
    client = coordinator.client
    bad_json = await client.request("POST", "/login", data=b"{not json")
    assert (bad_json.status, bad_json.body) == (
        400,
        {"error": "the request body must be JSON", "code": "bad_request"},
    )
    not_object = await client.post("/login", ["alice", PASSWORD])
    assert not_object.status == 400
    huge = await client.post("/login", {"username": "a", "password": "p" * 10_000})
    assert huge.status == 413
    assert "too large" in huge.body["error"]
    nowhere = await client.get("/no/such/thing")
    assert (nowhere.status, nowhere.body) == (
        404,
        {"error": "no such endpoint", "code": "not_found"},
    )
    wrong_method = await client.get("/login")
    assert wrong_method.status == 405
    assert "error" in wrong_method.body
    refresh = await client.post("/session/refresh", {"refresh": 7})
    assert refresh.status == 400


async def test_hostile_usernames_over_http_are_refused_and_store_nothing(
    open_signup: Running,
) -> None:
    client = open_signup.client
    hostile: list[object] = [
        "",
        "' OR '1'='1",
        "admin'--",
        "x); DELETE FROM users; --",
        "a" * 65,
        "a" * 3000,
        "\x00",
        "bell\x07",
        "\u202eevil",
        "lone\ud800",
        None,
        {"$ne": ""},
    ]
    for name in hostile:
        for path in ("/signup", "/login"):
            reply = await client.post(path, {"username": name, "password": PASSWORD})
            assert reply.status == 400, (path, name)
            assert "username" in reply.body["error"]
    huge = await client.post("/signup", {"username": "a" * 10_000, "password": PASSWORD})
    assert huge.status == 413
    assert open_signup.service.store.users() == []
    # names of any script are welcome, and normalised
    for name in ("Zoë", "Σωκράτης", "Jose\u0301"):
        reply = await client.post("/signup", {"username": name, "password": PASSWORD})
        assert reply.status == 201, name
    assert (await client.login("JOSÉ"))["username"] == "José"


async def test_429_comes_before_any_password_check(
    coordinator: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    coordinator.add_user("frank")
    checks: list[str] = []

    def counting(password: Password, stored: str) -> bool:
        checks.append(stored)
        return verify_password(password, stored)

    monkeypatch.setattr("core.coordinator.service.verify_password", counting)
    threshold = coordinator.service.limiter.limits.user_threshold
    for _ in range(threshold):
        reply = await coordinator.client.post(
            "/login", {"username": "frank", "password": "wrong-one"}
        )
        assert reply.status == 401
    assert len(checks) == threshold
    for password in ("wrong-one", PASSWORD, PASSWORD):
        reply = await coordinator.client.post("/login", {"username": "frank", "password": password})
        assert reply.status == 429
    assert len(checks) == threshold  # nothing was hashed for the refused attempts


async def test_passwords_never_reach_the_logs(
    open_signup: Running, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    client = open_signup.client
    secret = "a very particular secret"
    await client.post("/signup", {"username": "ivy", "password": secret})
    await client.post("/login", {"username": "ivy", "password": secret + "?"})
    await client.post("/login", {"username": "nobody", "password": secret})
    await client.login("ivy", secret)
    await client.post("/signup", {"username": "ivy", "password": secret})
    assert caplog.records  # something was logged, just not that
    assert secret not in caplog.text


async def test_expired_sessions_are_swept(coordinator: Running) -> None:
    coordinator.add_user("jo")
    await coordinator.client.login("jo")
    await coordinator.client.login("jo")
    assert coordinator.service.sweep() == 0
    coordinator.clock.advance(31 * 86400)
    assert coordinator.service.sweep() == 2


async def test_a_port_in_use_is_a_clear_error(coordinator: Running, tmp_path: Path) -> None:
    other = CoordinatorService(
        coordinator.service.manifest, tmp_path / "other.db", coordinator.key, scrypt_n=2**10
    )
    with pytest.raises(BarnraiseError, match="cannot listen"):
        await other.start("127.0.0.1", coordinator.service.port)
