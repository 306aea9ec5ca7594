"""An engine daemon in this process, on loopback, with scripted sensors, its own folders and an
in-memory keyring (tests never touch the user's real one)."""

from __future__ import annotations

import io
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from core.account import CredentialStore
from core.api import Endpoint, EngineClient, EngineState
from core.cli import ctl
from core.cli.main import build_parser
from core.config.paths import UserDirs
from core.control import EngineDaemon
from core.engine import EngineConfig
from core.scheduler import ConditionSampler, GpuSensor, ScriptedIdleSensor, SystemSensor
from tests.account.memory_keyring import MemoryKeyring
from tests.engine.standin import StandInPeer
from tests.support.leaks import assert_no_leaks, open_fd_count, poll_until


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
    daemon = await EngineDaemon.open(
        config, sampler=scripted_sampler(idle), credentials=CredentialStore(keyring)
    )
    client = EngineClient(daemon.endpoint)
    try:
        yield Running(daemon, daemon.endpoint, client, idle, config.dirs, keyring)
    finally:
        await client.close()
        await daemon.stop()
    await assert_no_leaks(baseline)


@pytest.fixture
def peers(monkeypatch: pytest.MonkeyPatch) -> list[StandInPeer]:
    """Every peer the engine builds is a ``StandInPeer``, listed here in order."""
    from core.training import peer as runtime

    made: list[StandInPeer] = []

    def make(settings: runtime.PeerSettings, on_event: Callable[[Any], None]) -> StandInPeer:
        made.append(StandInPeer(settings, on_event))
        return made[-1]

    monkeypatch.setattr(runtime, "ProjectPeer", make)
    return made


async def until(
    client: EngineClient, check: Callable[[EngineState], bool], timeout: float = 20.0
) -> EngineState:
    """Poll the engine's state until ``check`` holds (it is the engine's to change, not ours).

    The deadline is generous, but stays below the 30 s after which the engine rebuilds a failed
    peer, so that "at once, not after the back-off" is what a passing wait means."""
    return await poll_until(client.state, check, timeout)


CtlRun = Callable[..., Awaitable[str]]


@pytest.fixture
def ctl_run(
    engine: Running, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> CtlRun:
    """``barnraise ctl ARGS`` against the test's engine (stdin as given); returns what it printed."""
    monkeypatch.setenv("BARNRAISE_HOME", str(engine.dirs.config.parent))

    async def run(*argv: str, stdin: str = "") -> str:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        assert await ctl._run(build_parser().parse_args(["ctl", *argv])) == 0
        return str(capsys.readouterr().out)

    return run
