"""Spoofed ``X-Forwarded-For`` against the coordinator's rate limits, over HTTP on loopback.

A stranger who rotates the header must stay one client to the limits; only a trusted proxy (here
127.0.0.1, named with ``trusted_proxies``) may name the client, and then the right-most entry that
is not a trusted proxy counts, whatever the client wrote to its left.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import aiohttp

from core.coordinator import CoordinatorService, LoginLimits, SignupLimits
from core.net import Identity
from tests.coordinator.conftest import FAST_SCRYPT, PASSWORD, make_manifest
from tests.support.leaks import assert_no_leaks, open_fd_count

LIMITS = LoginLimits(user_threshold=3, address_threshold=1000, account_threshold=1000)
"""Three failures for one account from one address prefix, then waits (429)."""


class Attacker:
    def __init__(self, service: CoordinatorService, session: aiohttp.ClientSession) -> None:
        self.service = service
        self.session = session

    async def post(self, path: str, body: dict[str, str], forwarded: str | None) -> int:
        headers = {} if forwarded is None else {"X-Forwarded-For": forwarded}
        async with self.session.post(
            self.service.url + path, json=body, headers=headers
        ) as response:
            await response.read()
            return response.status

    async def guess(self, forwarded: str | None) -> int:
        """A wrong password for grace, from 127.0.0.1, naming ``forwarded``."""
        body = {"username": "grace", "password": "wrong guess wrong"}
        return await self.post("/login", body, forwarded)


@contextlib.asynccontextmanager
async def coordinator(
    tmp_path: Path, trusted: Sequence[str], *, signups: SignupLimits | None = None
) -> AsyncIterator[Attacker]:
    baseline = open_fd_count()
    key = Identity.generate()
    service = CoordinatorService(
        make_manifest(key, allow_signup=True),
        tmp_path / "coordinator.db",
        key,
        scrypt_n=FAST_SCRYPT.n,
        limits=LIMITS,
        signup_limits=signups,
        trusted_proxies=trusted,
    )
    await service.start("127.0.0.1", 0)
    service.store.add_user("grace", PASSWORD, params=FAST_SCRYPT)
    session = aiohttp.ClientSession()
    try:
        yield Attacker(service, session)
    finally:
        await session.close()
        await service.close()
    await assert_no_leaks(baseline)


async def test_a_stranger_cannot_dodge_the_limit_by_rotating_the_header(tmp_path: Path) -> None:
    # a proxy is trusted, but not the stranger's address
    async with coordinator(tmp_path, ["10.0.0.0/8"]) as c:
        statuses = [await c.guess(f"198.51.{i}.7") for i in range(5)]
        assert statuses == [401, 401, 401, 429, 429]
        assert c.service.limiter.retry_after("grace", "127.0.0.1") > 0
        assert c.service.limiter.retry_after("grace", "198.51.0.7") == 0  # never counted


async def test_a_stranger_cannot_dodge_the_signup_limit_either(tmp_path: Path) -> None:
    async with coordinator(tmp_path, [], signups=SignupLimits(per_prefix=2, total=100)) as c:
        statuses = [
            await c.post("/signup", {"username": f"new{i}", "password": PASSWORD}, f"203.0.{i}.1")
            for i in range(3)
        ]
        assert statuses == [201, 201, 429]


async def test_through_a_trusted_proxy_each_client_is_limited_on_its_own(tmp_path: Path) -> None:
    async with coordinator(tmp_path, ["127.0.0.1/32"]) as c:
        # ten clients behind the proxy, one guess each: nobody is slowed for the others
        assert [await c.guess(f"198.51.{i}.7") for i in range(10)] == [401] * 10
        # one of them keeps guessing: it alone waits
        assert [await c.guess("198.51.0.7") for _ in range(3)] == [401, 401, 429]
        assert await c.guess("198.51.1.7") == 401
        assert c.service.limiter.retry_after("grace", "127.0.0.1") == 0  # the proxy: not counted
        # the right password from another client still logs in
        reply = await c.post("/login", {"username": "grace", "password": PASSWORD}, "192.0.2.1")
        assert reply == 200
        # and without the header, the proxy's own requests count as the proxy's
        assert await c.guess(None) == 401


async def test_a_spoofed_chain_counts_its_right_most_untrusted_entry(tmp_path: Path) -> None:
    async with coordinator(tmp_path, ["127.0.0.1/32", "10.0.0.0/8"]) as c:
        # the client writes whatever it likes on the left; the proxy appended 5.6.7.8
        statuses = [await c.guess(f"1.2.{i}.4, 5.6.7.8") for i in range(4)]
        assert statuses == [401, 401, 401, 429]
        assert await c.guess("5.6.7.8") == 429  # the same client without the decoy
        assert await c.guess("1.2.0.4") == 401  # the decoys were never counted
        # an inner proxy (10.0.0.0/8) is skipped: 9.9.9.9 is the client
        assert [await c.guess("6.6.6.6, 9.9.9.9, 10.1.2.3") for _ in range(4)][-1] == 429
        assert c.service.limiter.retry_after("grace", "9.9.9.9") > 0
        assert c.service.limiter.retry_after("grace", "6.6.6.6") == 0


async def test_a_malformed_header_from_the_proxy_counts_as_the_proxy(tmp_path: Path) -> None:
    async with coordinator(tmp_path, ["127.0.0.1/32"]) as c:
        junk = ["unknown", "5.6.7.8:99", "<script>", "5.6.7.8, ", "1.2.3.4, nonsense"]
        statuses = [await c.guess(value) for value in junk]
        assert statuses == [401, 401, 401, 429, 429]
        assert c.service.limiter.retry_after("grace", "127.0.0.1") > 0
