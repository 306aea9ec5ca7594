"""Fuzzing the coordinator's JSON endpoints with hypothesis, over real HTTP on loopback.

Whatever arrives (any JSON, any bytes, any declared type, any bearer token), the coordinator never
fails with a 500, every refusal is a JSON object with ``error`` and ``code``, and it still answers
afterwards. Logins, sign-ups and pass requests are fuzzed with a real session too, so the
checks behind the session are reached; the rate limits are generous here so that the fuzzed
requests reach the handlers instead of a 429.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
from hypothesis import given, settings
from hypothesis import strategies as st

from core.coordinator import CoordinatorService, LoginLimits, SignupLimits
from core.net import Identity
from tests.coordinator.conftest import FAST_SCRYPT, PASSWORD, make_manifest
from tests.support.leaks import assert_no_leaks, open_fd_count

POSTS = [
    "/signup",
    "/login",
    "/session/refresh",
    "/logout",
    "/pass/challenge",
    "/pass",
    "/contributions",
]
FIELDS = [
    "username",
    "password",
    "refresh",
    "peer",
    "challenge",
    "signature",
    "epoch",
    "time",
    "samples",
    "contributions",
    "pass",
    "compute_seconds",
]
TYPES = [
    "application/json",
    "application/json; charset=utf-8",
    "application/json; charset=latin-1",
    "text/plain",
    "application/x-www-form-urlencoded",
    "",
]

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=80)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
objects = st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6)
contributions = st.fixed_dictionaries(
    {
        "epoch": json_values | st.integers(0, 10),
        "time": json_values | st.floats(1.6e9, 1.8e9),
        "samples": json_values | st.integers(0, 100),
        "contributions": st.lists(objects | json_values, max_size=3),
    }
)
bodies = st.one_of(
    objects.map(lambda value: json.dumps(value).encode()),
    contributions.map(lambda value: json.dumps(value).encode()),
    json_values.map(lambda value: json.dumps(value).encode()),
    st.binary(max_size=200),
    st.text(max_size=100).map(lambda text: text.encode("utf-8", "surrogatepass")),
)
header_text = st.text(
    st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=60
).map(str.strip)
tokens = st.one_of(st.none(), st.just("SESSION"), header_text)
limits = st.one_of(header_text, st.integers(-5, 2000).map(str), st.just("9" * 5000))


class Target:
    def __init__(self, loop: asyncio.AbstractEventLoop, service: CoordinatorService) -> None:
        self.loop = loop
        self.service = service
        self.http: aiohttp.ClientSession | None = None
        self.session = ""

    def call(
        self, method: str, path: str, body: bytes | None, kind: str, token: str | None
    ) -> tuple[int, Any]:
        return self.loop.run_until_complete(self._call(method, path, body, kind, token))

    async def _call(
        self, method: str, path: str, body: bytes | None, kind: str, token: str | None
    ) -> tuple[int, Any]:
        if self.http is None:
            self.http = aiohttp.ClientSession()
        headers = {"Content-Type": kind} if kind else {}
        if token is not None:
            headers["Authorization"] = f"Bearer {self.session if token == 'SESSION' else token}"
        async with self.http.request(
            method, self.service.url + path, data=body, headers=headers
        ) as response:
            text = await response.text(errors="replace")
            return response.status, (json.loads(text) if text else None)


def check(status: int, reply: Any) -> None:
    assert status < 500, reply
    if status >= 400:
        assert isinstance(reply, dict), reply
        assert isinstance(reply.get("error"), str)
        assert reply["error"]
        assert isinstance(reply.get("code"), str)


def test_fuzzed_requests_never_break_the_coordinator(tmp_path: Path) -> None:
    loop = asyncio.new_event_loop()
    baseline = open_fd_count()  # with the loop's own descriptors, which it keeps to the end
    key = Identity.generate()
    service = CoordinatorService(
        make_manifest(key, allow_signup=True),
        tmp_path / "coordinator.db",
        key,
        scrypt_n=FAST_SCRYPT.n,
        limits=LoginLimits(user_threshold=10**6, address_threshold=10**6, account_threshold=10**6),
        signup_limits=SignupLimits(per_prefix=10**6, total=10**6),
    )
    loop.run_until_complete(service.start("127.0.0.1", 0))
    target = Target(loop, service)
    try:
        service.store.add_user("fuzz-mod", PASSWORD, moderator=True, params=FAST_SCRYPT)
        status, reply = target.call(
            "POST",
            "/login",
            json.dumps({"username": "fuzz-mod", "password": PASSWORD}).encode(),
            "application/json",
            None,
        )
        assert status == 200, reply
        target.session = reply["session"]

        @settings(max_examples=250, deadline=None, database=None)
        @given(
            path=st.sampled_from(POSTS),
            body=bodies,
            kind=st.sampled_from(TYPES),
            token=tokens,
        )
        def posts(path: str, body: bytes, kind: str, token: str | None) -> None:
            check(*target.call("POST", path, body, kind, token))

        @settings(max_examples=60, deadline=None, database=None)
        @given(limit=limits, token=tokens, me=st.booleans())
        def gets(limit: str, token: str | None, me: bool) -> None:
            path = "/leaderboard/me" if me else "/leaderboard"
            query = "?" + aiohttp.helpers.quote(f"limit={limit}", safe="=") if not me else ""
            check(*target.call("GET", path + query, None, "", token))

        posts()
        gets()
        status, info = target.call("GET", "/info", None, "", None)
        assert status == 200
        assert info["allow_signup"] is True
    finally:
        if target.http is not None:
            loop.run_until_complete(target.http.close())
        loop.run_until_complete(service.close())
        try:
            loop.run_until_complete(assert_no_leaks(baseline))
        finally:
            loop.close()
