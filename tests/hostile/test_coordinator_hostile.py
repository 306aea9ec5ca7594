"""Attacks on the coordinator, replayed against a real
``CoordinatorService`` over HTTP on loopback, and against the ``barnraise coordinator`` process.

Each test asserts the clean outcome: the attack is refused in plain words, nobody else is harmed,
and the service keeps answering.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from core.account.proof import proof_payload, signature_text
from core.coordinator import CoordinatorService, LoginLimits, SignupLimits
from core.net import Identity
from core.trust.passes import issue_pass, pass_to_text
from tests.coordinator.conftest import (
    FAST_SCRYPT,
    PASSWORD,
    PROJECT,
    make_manifest,
    manifest_text,
)
from tests.support.leaks import assert_no_leaks, open_fd_count

GENEROUS_SIGNUPS = SignupLimits(per_prefix=1000, total=1000)


class Hostile:
    """A coordinator on 127.0.0.1 (and ::1), and requests from any loopback address."""

    def __init__(self, service: CoordinatorService, v6_port: int) -> None:
        self.service = service
        self.v6_port = v6_port
        self._sessions: dict[str, aiohttp.ClientSession] = {}

    def url(self, source: str) -> str:
        if source == "::1":
            return f"http://[::1]:{self.v6_port}"
        return f"http://127.0.0.1:{self.service.port}"

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        source: str = "127.0.0.1",
        token: str | None = None,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any, dict[str, str]]:
        """Send from the loopback address ``source``; the status, JSON body and headers."""
        session = self._sessions.get(source)
        if session is None:
            connector = aiohttp.TCPConnector(local_addr=(source, 0), force_close=True)
            session = self._sessions[source] = aiohttp.ClientSession(connector=connector)
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        async with session.request(
            method,
            self.url(source) + path,
            json=body if data is None else None,
            data=data,
            headers=sent,
        ) as response:
            text = await response.text()
            return response.status, json.loads(text) if text else None, dict(response.headers)

    async def login(self, name: str, *, source: str = "127.0.0.1") -> str:
        status, body, _ = await self.request(
            "POST", "/login", {"username": name, "password": PASSWORD}, source=source
        )
        assert status == 200, body
        return str(body["session"])

    async def proven_pass(self, session: str, key: Identity) -> tuple[int, Any]:
        """A pass request as an up-to-date peer makes it: a challenge signed by ``key``."""
        status, issued, _ = await self.request("POST", "/pass/challenge", token=session)
        assert status == 200, issued
        payload = proof_payload(PROJECT, issued["username"], key.peer_id, issued["challenge"])
        body = {
            "peer": str(key.peer_id),
            "challenge": issued["challenge"],
            "signature": signature_text(key.sign(payload)),
        }
        status, reply, _ = await self.request("POST", "/pass", body, token=session)
        return status, reply

    async def close(self) -> None:
        for session in self._sessions.values():
            await session.close()


@contextlib.asynccontextmanager
async def hostile_coordinator(
    tmp_path: Path,
    *,
    allow_signup: bool = True,
    limits: LoginLimits | None = None,
    signup_limits: SignupLimits | None = GENEROUS_SIGNUPS,
) -> AsyncIterator[Hostile]:
    baseline = open_fd_count()
    key = Identity.generate()
    service = CoordinatorService(
        make_manifest(key, allow_signup=allow_signup),
        tmp_path / "coordinator.db",
        key,
        scrypt_n=FAST_SCRYPT.n,
        limits=limits,
        signup_limits=signup_limits,
    )
    await service.start("127.0.0.1", 0)
    # the same service on the IPv6 loopback too, as a dual-stack organizer's would be: the one
    # way for a test to reach it from a second address prefix
    assert service._runner is not None
    v6 = web.TCPSite(service._runner, "::1", 0)
    await v6.start()
    v6_port = int(v6._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
    hostile = Hostile(service, v6_port)
    try:
        yield hostile
    finally:
        await hostile.close()
        await service.close()
    await assert_no_leaks(baseline)


async def test_a_no_member_can_borrow_anothers_peer_key(tmp_path: Path) -> None:
    async with hostile_coordinator(tmp_path, allow_signup=False) as c:
        store = c.service.store
        for name in ("mallory", "victim"):
            store.add_user(name, PASSWORD, params=FAST_SCRYPT)
        store.add_user("aux", PASSWORD, moderator=True, params=FAST_SCRYPT)
        mallory, victim = await c.login("mallory"), await c.login("victim")
        mallory_key, victim_key = Identity.generate(), Identity.generate()
        victim_peer = str(victim_key.peer_id)

        # the attack as found: naming the victim's public PeerID
        status, body, _ = await c.request("POST", "/pass", {"peer": victim_peer}, token=mallory)
        assert (status, body["code"]) == (400, "bad_proof")
        assert "update Barnraise" in body["error"]
        # with a challenge, but signed by mallory's own key
        status, issued, _ = await c.request("POST", "/pass/challenge", token=mallory)
        payload = proof_payload(PROJECT, "mallory", victim_key.peer_id, issued["challenge"])
        forged = {
            "peer": victim_peer,
            "challenge": issued["challenge"],
            "signature": signature_text(mallory_key.sign(payload)),
        }
        status, body, _ = await c.request("POST", "/pass", forged, token=mallory)
        assert (status, body["code"]) == (400, "bad_proof")

        # the victim proves the key; from then on it is theirs alone
        status, granted = await c.proven_pass(victim, victim_key)
        assert status == 200, granted
        status, body = await c.proven_pass(mallory, victim_key)  # even holding a copy
        assert (status, body["code"]) == (409, "conflict")
        assert (await c.proven_pass(mallory, mallory_key))[0] == 200

        # a pass the project signed for mallory and the victim's key (as the old coordinator
        # handed out) earns mallory nothing; the victim's own pass counts for the victim
        borrowed = issue_pass(
            c.service.project_key,
            PROJECT,
            "mallory",
            victim_key.peer_id,
            issued=time.time(),
            lifetime=600.0,
        )
        report = {
            "epoch": 1,
            "time": time.time(),
            "samples": 96,
            "contributions": [
                {
                    "peer": victim_peer,
                    "pass": pass_to_text(borrowed),
                    "samples": 64,
                    "compute_seconds": 1.0,
                },
            ],
        }
        aux = await c.login("aux")
        status, verdict, _ = await c.request("POST", "/contributions", report, token=aux)
        assert (status, verdict["accepted"]) == (200, 0)
        assert "never proved" in verdict["rejected"][0]["reason"]
        report["epoch"] = 2
        report["contributions"][0]["pass"] = granted["pass"]
        status, verdict, _ = await c.request("POST", "/contributions", report, token=aux)
        assert (status, verdict["accepted"]) == (200, 1)

        # mallory is banned: only her own key is revoked, never the victim's
        store.ban("mallory", "borrowing keys")
        status, revoked, _ = await c.request("GET", "/revocations")
        assert revoked["revoked"] == [str(mallory_key.peer_id)]
        status, board, _ = await c.request("GET", "/leaderboard?limit=10")
        users = {u["username"]: u for u in board["users"]}
        assert "mallory" not in users
        assert (users["victim"]["samples"], users["victim"]["devices"]) == (64, 1)
        store.unban("mallory")
        mallory = await c.login("mallory")
        status, mine, _ = await c.request("GET", "/leaderboard/me", token=mallory)
        assert (mine["samples"], mine.get("devices", 1)) == (0, 1)


async def test_b_sign_ups_are_rate_limited_per_network(tmp_path: Path) -> None:
    async with hostile_coordinator(tmp_path, signup_limits=SignupLimits()) as c:
        per_prefix = c.service.signups.limits.per_prefix
        for i in range(per_prefix):
            body = {"username": f"bot{i}", "password": PASSWORD}
            status, reply, _ = await c.request("POST", "/signup", body, source=f"127.0.0.{i + 2}")
            assert status == 201, reply
        # more from anywhere in 127/8 (one network): refused before any hashing
        body = {"username": "bot-next", "password": PASSWORD}
        status, reply, headers = await c.request("POST", "/signup", body, source="127.9.9.9")
        assert (status, reply["code"]) == (429, "too_many_attempts")
        assert "sign-ups" in reply["error"]
        assert int(headers["Retry-After"]) > 0
        assert len(c.service.store.users()) == per_prefix
        # another network may still sign up
        status, _, _ = await c.request("POST", "/signup", body, source="::1")
        assert status == 201


async def test_c_guessing_never_locks_the_owner_out_elsewhere(tmp_path: Path) -> None:
    async with hostile_coordinator(tmp_path, allow_signup=False) as c:
        c.service.store.add_user("alice", PASSWORD, params=FAST_SCRYPT)
        wrong = {"username": "alice", "password": "guess guess guess"}
        statuses = []
        for i in range(8):
            status, _, _ = await c.request("POST", "/login", wrong, source=f"127.0.0.{i + 2}")
            statuses.append(status)
        assert statuses[:5] == [401] * 5
        assert 429 in statuses  # the guesser's network is slowed
        # the owner, on another network, logs in at once
        assert await c.login("alice", source="::1")


async def test_d_look_alike_and_dot_names_are_refused(tmp_path: Path) -> None:
    async with hostile_coordinator(tmp_path) as c:
        for name in ("alice", "alices"):
            body = {"username": name, "password": PASSWORD}
            assert (await c.request("POST", "/signup", body))[0] == 201
        for name in ("ＡＬＩＣＥ", "𝒶𝓁𝒾𝒸ℯ", "ALİCE", "alice\u017f", "\u0430lice", "A1ice"):
            status, reply, _ = await c.request(
                "POST", "/signup", {"username": name, "password": PASSWORD}
            )
            assert (status, reply["code"]) == (409, "conflict"), name
        for name in (".", ".."):
            status, reply, _ = await c.request(
                "POST", "/signup", {"username": name, "password": PASSWORD}
            )
            assert (status, reply["code"]) == (400, "bad_request"), name
            assert "letter or digit" in reply["error"]
        assert sorted(u.name for u in c.service.store.users()) == ["alice", "alices"]


async def test_e_login_limits_count_networks_not_addresses(tmp_path: Path) -> None:
    limits = LoginLimits(address_threshold=20)
    async with hostile_coordinator(tmp_path, allow_signup=False, limits=limits) as c:
        statuses = []
        for i in range(30):  # a new address of 127/8 and a new name for every guess
            body = {"username": f"user{i}", "password": "guess guess guess"}
            status, reply, _ = await c.request("POST", "/login", body, source=f"127.0.{i}.7")
            statuses.append(status)
            assert status in (401, 429), reply
        assert statuses[:20] == [401] * 20
        assert set(statuses[20:]) == {429}


async def test_f_json_bodies_must_say_they_are_json(tmp_path: Path) -> None:
    async with hostile_coordinator(tmp_path) as c:
        body = json.dumps({"username": "forged", "password": PASSWORD}).encode()
        for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
            for path in ("/signup", "/login"):
                status, reply, _ = await c.request(
                    "POST", path, data=body, headers={"Content-Type": kind}
                )
                assert (status, reply["code"]) == (415, "unsupported_media_type"), (kind, path)
                assert "application/json" in reply["error"]
        assert c.service.store.users() == []
        status, _, _ = await c.request(
            "POST",
            "/signup",
            data=body,
            headers={"Content-Type": "application/json; charset=UTF-8"},
        )
        assert status == 201


async def test_g_hostile_requests_are_clear_400s_and_401s(tmp_path: Path) -> None:
    async with hostile_coordinator(tmp_path) as c:
        c.service.store.add_user("aux", PASSWORD, moderator=True, params=FAST_SCRYPT)
        status, reply, _ = await c.request("GET", "/leaderboard?limit=" + "9" * 5000)
        assert (status, reply["code"]) == (400, "bad_request")
        assert "limit must be a whole number" in reply["error"]
        for token in ("é" * 10, "tok\u2028en", "\U0001f600"):
            status, reply, _ = await c.request(
                "GET", "/leaderboard/me", headers={"Authorization": f"Bearer {token}"}
            )
            assert (status, reply["code"]) == (401, "unauthorized"), token
            assert "not one this coordinator hands out" in reply["error"]
        aux = await c.login("aux")
        deep = b"[" * 100_000
        as_json = {"Content-Type": "application/json"}
        status, reply, _ = await c.request(
            "POST", "/contributions", data=deep, token=aux, headers=as_json
        )
        assert (status, reply) == (
            400,
            {"error": "the request body must be JSON", "code": "bad_request"},
        )
        status, reply, _ = await c.request("GET", "/info")
        assert status == 200  # still serving


def test_the_coordinator_process_refuses_the_same(tmp_path: Path) -> None:
    """The ``barnraise coordinator`` process: floods, cross-site posts and absurd limits."""
    key = Identity.generate()
    key_file = tmp_path / "project-key.pem"
    key.save(key_file)
    manifest = tmp_path / "project.toml"
    manifest.write_text(manifest_text(str(key.peer_id), allow_signup=True))
    command = [sys.executable, "-m", "core", "coordinator", "--manifest", str(manifest)]
    command += ["--db", str(tmp_path / "c.db"), "--key", str(key_file), "--port", "0"]
    env = dict(os.environ, BARNRAISE_HOME=str(tmp_path / "home"))
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        url = "http://127.0.0.1:" + line.split("http://127.0.0.1:", 1)[1].split(",")[0]

        def call(
            path: str, body: bytes | None = None, kind: str = "application/json"
        ) -> tuple[int, Any]:
            request = urllib.request.Request(url + path, data=body, headers={"Content-Type": kind})
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    return response.status, json.load(response)
            except urllib.error.HTTPError as refused:
                with refused:
                    return refused.code, json.load(refused)

        assert call("/leaderboard?limit=" + "1" * 5000)[0] == 400
        plain = json.dumps({"username": "forged", "password": PASSWORD}).encode()
        assert call("/signup", plain, "text/plain")[0] == 415
        statuses = [
            call("/signup", json.dumps({"username": f"bot{i}", "password": PASSWORD}).encode())[0]
            for i in range(12)
        ]
        assert statuses[:10] == [201] * 10
        assert statuses[10:] == [429, 429]
        assert call("/info")[0] == 200
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
