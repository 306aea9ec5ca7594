"""A real coordinator on a loopback port for the account tests (real clock, fast scrypt)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from core.coordinator import CoordinatorService, LoginLimits, ScryptParams
from core.net import Identity
from core.project import Manifest, parse_manifest

FAST_SCRYPT = ScryptParams(n=2**10)
PROJECT = "account-test"
PASSWORD = "correct horse battery"


def manifest_text(
    project_key: str,
    coordinator_url: str = "http://127.0.0.1:1",
    *,
    pass_lifetime: float = 12.0,
    refresh_interval: float = 0.2,
    mode: str = "moderated",
    allow_signup: bool = False,
) -> str:
    return f"""
[project]
name = "{PROJECT}"
description = "accounts under test"

[[data.sources]]
urls = ["shards/a.jsonl"]

[network]
coordinator_url = "{coordinator_url}"

[access]
mode = "{mode}"
project_key = "{project_key}"
pass_lifetime = {pass_lifetime}
refresh_interval = {refresh_interval}
allow_signup = {"true" if allow_signup else "false"}
"""


@dataclass
class Coordinator:
    service: CoordinatorService
    key: Identity
    manifest: Manifest

    @property
    def url(self) -> str:
        return self.service.url

    def add_user(self, name: str, password: str = PASSWORD, *, moderator: bool = False) -> None:
        self.service.store.add_user(name, password, moderator=moderator, params=FAST_SCRYPT)

    def ban(self, name: str) -> None:
        self.service.store.ban(name, "testing bans")

    def manifest_file(self, folder: Path) -> Path:
        """The project's manifest pointing at this coordinator, as a volunteer would get it."""
        path = folder / "moderated.toml"
        path.write_text(manifest_text(str(self.key.peer_id), self.url))
        return path


@contextlib.asynccontextmanager
async def running_coordinator(
    folder: Path, *, limits: LoginLimits | None = None, allow_signup: bool = False
) -> AsyncIterator[Coordinator]:
    """``allow_signup`` is the coordinator's own setting; the manifest a volunteer gets from
    ``manifest_file`` does not say it (as a copy that predates the change would not)."""
    key = Identity.generate()
    manifest = parse_manifest(manifest_text(str(key.peer_id), allow_signup=allow_signup))
    service = CoordinatorService(
        manifest,
        folder / "coordinator.db",
        key,
        ["127.0.0.1:4001"],
        scrypt_n=FAST_SCRYPT.n,
        limits=limits,
    )
    await service.start("127.0.0.1", 0)
    try:
        yield Coordinator(service, key, manifest)
    finally:
        await service.close()
