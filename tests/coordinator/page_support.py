"""A coordinator for the project page's tests: any description and access mode, an auxiliary
peer's moderator account, and epoch reports with figures and held-out evaluations."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from core.coordinator import CoordinatorService
from core.net import Identity
from core.project import parse_manifest
from core.util.clock import FakeClock
from tests.coordinator.conftest import FAST_SCRYPT, PASSWORD, PROJECT, Client, Reply

AUX = "aux"


def page_manifest(
    key: Identity,
    *,
    description: str = "",
    mode: str = "moderated",
    training: str = "",
    checkpoint_url: str = "",
) -> str:
    """``training``: the lines of a ``[training]`` table."""
    # JSON strings are TOML basic strings for everything a test writes (quotes, <, &, newlines)
    return f"""
[project]
name = "{PROJECT}"
description = {json.dumps(description)}

[training]
{training}

[[data.sources]]
urls = ["shards/a.jsonl"]

[network]
coordinator_url = "http://127.0.0.1:8470"
checkpoint_url = "{checkpoint_url}"

[access]
mode = "{mode}"
project_key = "{key.peer_id}"
allow_signup = true
"""


@dataclass
class Page:
    service: CoordinatorService
    client: Client
    session: aiohttp.ClientSession
    clock: FakeClock
    key: Identity
    token: str = ""
    """The backbone's session (a moderator's)."""

    def add_user(self, name: str, *, moderator: bool = False) -> None:
        self.service.store.add_user(name, PASSWORD, moderator=moderator, params=FAST_SCRYPT)

    async def text(self, path: str) -> tuple[int, str, dict[str, str]]:
        async with self.session.get(self.service.url + path) as response:
            return response.status, await response.text(), dict(response.headers)

    async def report(self, epoch: int, **fields: Any) -> Reply:
        """``POST /contributions`` of ``epoch`` without contributions, with ``fields`` added."""
        body = {
            "epoch": epoch,
            "time": self.clock.time(),
            "samples": 100,
            "contributions": [],
            **fields,
        }
        return await self.client.post("/contributions", body, token=self.token)

    async def evaluate(self, epoch: int, loss: float, **fields: Any) -> Reply:
        """``POST /evaluations`` of ``epoch`` measured now, with ``fields`` changed or added."""
        body = {
            "epoch": epoch,
            "loss": loss,
            "accuracy": 0.25,
            "samples": 256,
            "tokens": 4096,
            "seconds": 12.5,
            "time": self.clock.time(),
            **fields,
        }
        return await self.client.post("/evaluations", body, token=self.token)

    async def raw_report(self, text: str) -> Reply:
        """A report as raw JSON text (NaN and Infinity are not JSON, but Python reads them)."""
        return await self.client.request(
            "POST", "/contributions", data=text.encode(), token=self.token
        )


@asynccontextmanager
async def running_page(
    tmp_path: Path,
    *,
    description: str = "",
    mode: str = "moderated",
    training: str = "",
    checkpoint_url: str = "",
    key: Identity | None = None,
) -> AsyncIterator[Page]:
    """``key``: the project key (a new one by default)."""
    key = key or Identity.generate()
    clock = FakeClock()
    text = page_manifest(
        key, description=description, mode=mode, training=training, checkpoint_url=checkpoint_url
    )
    service = CoordinatorService(
        parse_manifest(text),
        tmp_path / "coordinator.db",
        key,
        scrypt_n=FAST_SCRYPT.n,
        clock=clock,
    )
    await service.start("127.0.0.1", 0)
    session = aiohttp.ClientSession()
    try:
        page = Page(service, Client(session, service.url), session, clock, key)
        page.add_user(AUX, moderator=True)
        page.token = (await page.client.login(AUX))["session"]
        yield page
    finally:
        await session.close()
        await service.close()
