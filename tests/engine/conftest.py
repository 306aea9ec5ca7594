"""An engine daemon in this process, on loopback, with scripted sensors, its own folders and an
in-memory keyring (tests never touch the user's real one)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from core.account import CredentialStore
from core.api import Endpoint, EngineClient
from core.config.paths import UserDirs
from core.control import EngineDaemon
from core.engine import EngineConfig
from core.scheduler import ConditionSampler, GpuSensor, ScriptedIdleSensor, SystemSensor
from tests.account.memory_keyring import MemoryKeyring
from tests.engine.standin import StandInPeer
from tests.support.leaks import assert_no_leaks, open_fd_count


@dataclass
class Running:
    daemon: EngineDaemon
    endpoint: Endpoint
    client: EngineClient
    idle: ScriptedIdleSensor
    dirs: UserDirs
    keyring: MemoryKeyring


def fast_config(root: Path, *, headless: bool = False) -> EngineConfig:
    return EngineConfig(
        UserDirs.under(root),
        headless=headless,
        tick_computing=0.05,
        tick_resting=0.1,
        progress_interval=0.2,
        flush_interval=0.5,
        swarm_interval=0.2,
    )


def scripted_sampler(idle: ScriptedIdleSensor) -> ConditionSampler:
    return ConditionSampler(idle, SystemSensor(), GpuSensor(), headless=False)


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Running]:
    """A started daemon whose user has been away an hour (so only the tests' commands matter)."""
    baseline = open_fd_count()
    idle = ScriptedIdleSensor(idle_seconds=3600.0)
    config = fast_config(tmp_path / "home")
    keyring = MemoryKeyring()
    daemon = EngineDaemon(
        config, sampler=scripted_sampler(idle), credentials=CredentialStore(keyring)
    )
    endpoint = await daemon.start()
    client = EngineClient(endpoint)
    try:
        yield Running(daemon, endpoint, client, idle, config.dirs, keyring)
    finally:
        await client.close()
        await daemon.stop()
    await assert_no_leaks(baseline)


@pytest.fixture
def peers(monkeypatch: pytest.MonkeyPatch) -> list[StandInPeer]:
    """Every peer the engine builds is a ``StandInPeer``, listed here in order."""
    from core.training import runtime

    made: list[StandInPeer] = []

    def make(settings: runtime.PeerSettings, on_event: Callable[[Any], None]) -> StandInPeer:
        made.append(StandInPeer(settings, on_event))
        return made[-1]

    monkeypatch.setattr(runtime, "ProjectPeer", make)
    return made
