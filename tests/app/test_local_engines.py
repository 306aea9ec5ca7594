"""The app's supervisor with real ``barnraise engine`` processes: it starts one when none runs,
restarts one that is SIGKILLed (saying so), respects a deliberate shutdown until asked, and attaches
to an engine someone else started. Every engine process is gone at the end."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest

from app.engine.local import LocalEngines
from app.engine.supervisor import EngineSupervisor
from core.api import EngineClient
from core.config.paths import UserDirs
from tests.app.test_supervisor import Listener

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("BARNRAISE_HOME", str(home))
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    return home


@contextlib.asynccontextmanager
async def supervising(connector: LocalEngines) -> AsyncIterator[tuple[EngineSupervisor, Listener]]:
    listener = Listener()
    supervisor = EngineSupervisor(connector, listener, backoff=(0.2,))
    task = asyncio.create_task(supervisor.run(), name="test/supervisor")
    pids: set[int] = set()
    original = listener.connected

    def remember(client: object, state: object) -> None:
        pids.add(state.pid)  # type: ignore[attr-defined]
        original(client, state)  # type: ignore[arg-type]

    listener.connected = remember  # type: ignore[method-assign]
    try:
        yield supervisor, listener
    finally:
        supervisor.leaving()
        if supervisor.client is not None:
            with contextlib.suppress(Exception):
                await supervisor.client.shutdown()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await asyncio.to_thread(connector.stop_child)
        for pid in pids:  # nothing may outlive the test
            with contextlib.suppress(psutil.NoSuchProcess):
                proc = psutil.Process(pid)
                await asyncio.to_thread(proc.wait, 10)


async def test_start_restart_after_a_kill_and_respect_a_shutdown(home: Path) -> None:
    connector = LocalEngines(start_timeout=90)
    async with supervising(connector) as (supervisor, listener):
        await listener.until("connected", timeout=90)
        first = listener.connections[-1]
        assert ("connecting", "Starting the engine…") in listener.statuses
        assert connector.process is not None
        assert connector.process.pid == first

        os.kill(first, signal.SIGKILL)
        text = await listener.until("restarting", timeout=30)
        assert "killed by signal 9" in text
        await listener.until("connected", 2, timeout=90)
        second = listener.connections[-1]
        assert second != first
        assert not psutil.pid_exists(first) or psutil.Process(first).status() == "zombie"

        # someone stops the engine on purpose (barnraise ctl shutdown): no resurrection
        async with EngineClient.discover(UserDirs.under(home)) as outside:
            await outside.shutdown()
        text = await listener.until("stopped", timeout=30)
        assert "not contributing" in text
        await asyncio.sleep(1.0)  # an observation window: a restart would begin in it
        assert listener.kinds().count("connected") == 2

        supervisor.retry()  # the user clicks "Start the engine"
        await listener.until("connected", 3, timeout=90)
        assert listener.connections[-1] not in (first, second)
    assert "engine-output.log" in connector.describe_logs()
    assert connector.output_file.exists()


async def test_attaches_to_an_engine_started_elsewhere(home: Path) -> None:
    outside = subprocess.Popen(  # noqa: ASYNC220 - started once, waited for below
        [sys.executable, "-m", "core.cli.main", "engine"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert outside.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(outside.stdout.readline), 90)
        assert b"engine ready" in line
        connector = LocalEngines(start_timeout=90)
        async with supervising(connector) as (_, listener):
            await listener.until("connected", timeout=30)
            assert listener.connections == [outside.pid]
            assert connector.process is None  # attached, not started
    finally:
        if outside.poll() is None:
            outside.terminate()
        await asyncio.to_thread(outside.wait, 20)
