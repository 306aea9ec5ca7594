"""An engine daemon in this process, on loopback, with scripted sensors, its own folders and an
in-memory keyring (tests never touch the user's real one): what the engine's, the control server's
and the organizer's tests start. The ``engine`` fixture (``tests/conftest.py``) is
``running_engine``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from core.account import CredentialStore
from core.api import Endpoint, EngineClient, EngineState
from core.config.paths import UserDirs
from core.control import EngineDaemon
from core.engine import EngineConfig
from core.scheduler import ConditionSampler, GpuSensor, ScriptedIdleSensor, SystemSensor
from tests.account.memory_keyring import MemoryKeyring
from tests.support.leaks import assert_no_leaks, open_fd_count, poll_until


@dataclass
class Running:
    daemon: EngineDaemon
    endpoint: Endpoint
    client: EngineClient
    idle: ScriptedIdleSensor
    dirs: UserDirs
    keyring: MemoryKeyring


CtlRun = Callable[..., Awaitable[str]]
"""``barnraise ctl ARGS`` against a test's engine (the engine tests' ``ctl_run`` fixture)."""


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


@contextlib.asynccontextmanager
async def running_engine(home: Path) -> AsyncIterator[Running]:
    """A started daemon whose user has been away an hour (so only the tests' commands matter);
    stopped at the end, failing on leaked tasks or descriptors."""
    baseline = open_fd_count()
    idle = ScriptedIdleSensor(idle_seconds=3600.0)
    config = fast_config(home)
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


async def until(
    client: EngineClient, check: Callable[[EngineState], bool], timeout: float = 20.0
) -> EngineState:
    """Poll the engine's state until ``check`` holds (it is the engine's to change, not ours).

    The deadline is generous, but stays below the 30 s after which the engine rebuilds a failed
    peer, so that "at once, not after the back-off" is what a passing wait means."""
    return await poll_until(client.state, check, timeout)
