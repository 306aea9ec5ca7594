"""A coordinator on a loopback port with a fake clock, a fast scrypt, and a small HTTP client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from core.account.proof import proof_payload, signature_text
from core.coordinator import CoordinatorService, ScryptParams
from core.net import Identity
from core.project import Manifest, parse_manifest
from core.util.clock import FakeClock
from tests.support.leaks import assert_no_leaks, open_fd_count

FAST_SCRYPT = ScryptParams(n=2**10)
PROJECT = "coord-test"
PASSWORD = "correct horse battery"


def manifest_text(project_key: str, *, allow_signup: bool = False, mode: str = "moderated") -> str:
    return f"""
[project]
name = "{PROJECT}"

[[data.sources]]
urls = ["shards/a.jsonl"]

[network]
initial_peers = ["/ip4/127.0.0.1/tcp/4001/p2p/{project_key}"]
coordinator_url = "http://127.0.0.1:8470"

[access]
mode = "{mode}"
project_key = "{project_key}"
allow_signup = {str(allow_signup).lower()}
pass_lifetime = 600.0
refresh_interval = 60.0
"""


def make_manifest(key: Identity, *, allow_signup: bool = False) -> Manifest:
    return parse_manifest(manifest_text(str(key.peer_id), allow_signup=allow_signup))


@dataclass
class Reply:
    status: int
    body: Any
    headers: dict[str, str]


class Client:
    """Plain JSON requests against the service, returning status, body and headers."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session = session
        self.url = url

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        data: bytes | None = None,
        content_type: str = "application/json",
    ) -> Reply:
        """``data`` is sent as is, declared as ``content_type``; else ``body`` as JSON."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if data is not None:
            headers["Content-Type"] = content_type
        async with self.session.request(
            method, self.url + path, json=body if data is None else None, data=data, headers=headers
        ) as response:
            text = await response.text()
            parsed = await response.json() if text else None
            return Reply(response.status, parsed, dict(response.headers))

    async def get(self, path: str, *, token: str | None = None) -> Reply:
        return await self.request("GET", path, token=token)

    async def post(self, path: str, body: Any = None, *, token: str | None = None) -> Reply:
        return await self.request("POST", path, body, token=token)

    async def request_pass(
        self, session: str, peer: Identity, *, signer: Identity | None = None
    ) -> Reply:
        """``POST /pass`` for ``peer`` the way a peer does: a challenge, signed by ``signer``
        (``peer`` itself unless a test lies about the key it holds)."""
        challenge = await self.post("/pass/challenge", token=session)
        if challenge.status != 200:
            return challenge
        body = challenge.body
        payload = proof_payload(body["project"], body["username"], peer.peer_id, body["challenge"])
        signature = signature_text((signer or peer).sign(payload))
        request = {
            "peer": str(peer.peer_id),
            "challenge": body["challenge"],
            "signature": signature,
        }
        return await self.post("/pass", request, token=session)

    async def login(self, username: str, password: str = PASSWORD) -> dict[str, Any]:
        reply = await self.post("/login", {"username": username, "password": password})
        assert reply.status == 200, reply
        body: dict[str, Any] = reply.body
        return body


@dataclass
class Running:
    service: CoordinatorService
    client: Client
    clock: FakeClock
    key: Identity

    def add_user(
        self, name: str, *, moderator: bool = False, password: str | None = PASSWORD
    ) -> None:
        self.service.store.add_user(name, password, moderator=moderator, params=FAST_SCRYPT)


async def start(
    tmp_path: Path, *, allow_signup: bool = False
) -> tuple[Running, aiohttp.ClientSession]:
    key = Identity.generate()
    clock = FakeClock()
    service = CoordinatorService(
        make_manifest(key, allow_signup=allow_signup),
        tmp_path / "coordinator.db",
        key,
        ["/ip4/127.0.0.1/tcp/4001/p2p/" + str(key.peer_id)],
        scrypt_n=FAST_SCRYPT.n,
        clock=clock,
    )
    await service.start("127.0.0.1", 0)
    session = aiohttp.ClientSession()
    return Running(service, Client(session, service.url), clock, key), session


@pytest.fixture
async def coordinator(tmp_path: Path) -> AsyncIterator[Running]:
    """A coordinator whose project does not allow sign-up (moderators invite people)."""
    baseline = open_fd_count()
    running, session = await start(tmp_path)
    try:
        yield running
    finally:
        await session.close()
        await running.service.close()
    await assert_no_leaks(baseline)


@pytest.fixture
async def open_signup(tmp_path: Path) -> AsyncIterator[Running]:
    """A coordinator whose project lets anyone sign up."""
    baseline = open_fd_count()
    running, session = await start(tmp_path, allow_signup=True)
    try:
        yield running
    finally:
        await session.close()
        await running.service.close()
    await assert_no_leaks(baseline)
