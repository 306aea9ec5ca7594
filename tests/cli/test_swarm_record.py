"""``barnraise swarm`` announces itself to engines on this computer: a private record in the
runtime folder while it runs, gone when it stops (Ctrl-C); ``--moderated`` lets anyone here sign up,
and ``--keep-accounts`` (the desktop app's demo) keeps those accounts from run to run."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from core.account import CoordinatorClient, LoginFailed
from core.config.paths import UserDirs
from core.project import load_manifest
from core.swarm import running_swarms
from core.swarm.demo_data import DEMO_MANIFEST
from core.swarm.moderated import start_coordinator
from core.trust.identity import Identity

ROOT = Path(__file__).resolve().parents[2]


async def line_starting(proc: asyncio.subprocess.Process, prefix: str, timeout: float) -> str:
    assert proc.stdout is not None
    async with asyncio.timeout(timeout):
        while line := (await proc.stdout.readline()).decode():
            if line.startswith(prefix):
                return line.strip()
    raise AssertionError(f"the swarm exited before printing {prefix!r}")


@pytest.mark.slow
@pytest.mark.skipif(os.name == "nt", reason="sends SIGINT")
async def test_the_swarm_writes_its_record_while_it_runs_and_removes_it_on_ctrl_c(
    demo_data: Path, tmp_path: Path
) -> None:
    work, home = tmp_path / "swarm", tmp_path / "home"
    shutil.copytree(demo_data, work / "data")  # written once for the module: no corpus to make
    env = os.environ | {"BARNRAISE_HOME": str(home), "BARNRAISE_SWARM_LOG_LEVEL": "warning"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "core.cli.main", "swarm", "--peers", "0", "--work-dir", str(work)),
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    started: list[int] = []
    try:
        join = (await line_starting(proc, "join with:", 120)).split()
        address = join[join.index("--initial-peers") + 1]
        base = join[join.index("--data-base") + 1]
        path = home / "run" / "swarms" / "barnraise-demo.json"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        (record,) = running_swarms(UserDirs.under(home))
        started = [p.pid for p in record.pids]
        assert record.project == "barnraise-demo"
        # the swarm's copy of the demo manifest, naming its backbone's key (which confirms)
        assert record.manifest == work / "project.anchored.toml"
        anchored = load_manifest(record.manifest)
        assert anchored.project == load_manifest(DEMO_MANIFEST).project
        key = Identity.load(work / "backbone" / "backbone-key.pem")
        assert anchored.access.backbone_keys == (str(key.peer_id),)
        assert (record.initial_peers, record.data_base) == ((address,), base)
        assert (record.moderated, record.trainers) == (False, 0)
        # the swarm process itself, then its backbone (a child of it)
        assert record.pids[0].pid == proc.pid
        assert len(record.pids) == 2
        assert psutil.Process(record.pids[1].pid).ppid() == proc.pid
        assert record.live_pids() == started

        proc.send_signal(signal.SIGINT)  # what Ctrl-C in its terminal sends
        assert await asyncio.wait_for(proc.wait(), 60) == 0
        assert not path.exists()
        assert running_swarms(UserDirs.under(home)) == []
        assert record.live_pids() == []  # its backbone stopped with it
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        for pid in started[1:]:
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()


async def test_a_moderated_demo_lets_anyone_here_sign_up(tmp_path: Path) -> None:
    swarm = await start_coordinator(DEMO_MANIFEST, tmp_path)
    try:
        manifest = load_manifest(swarm.manifest_path)
        assert manifest.access.moderated
        assert manifest.access.allow_signup
        async with CoordinatorClient(swarm.service.url) as client:
            assert (await client.info()).allow_signup
            assert await client.signup("someone-here", "a good long password") == "someone-here"
    finally:
        await swarm.service.close()


async def test_keep_accounts_keeps_who_signed_up_and_starts_a_new_leaderboard(
    tmp_path: Path,
) -> None:
    async def run(*, keep_accounts: bool) -> tuple[bool, tuple[int, int]]:
        """One demo run's coordinator: can 'someone-here' log in, and what it had counted."""
        swarm = await start_coordinator(DEMO_MANIFEST, tmp_path, keep_accounts=keep_accounts)
        try:
            counted = swarm.service.store.contributions.epoch_totals()
            async with CoordinatorClient(swarm.service.url) as client:
                try:
                    await client.login("someone-here", "a good long password")
                    known = True
                except LoginFailed:
                    known = False
                if not known:
                    await client.signup("someone-here", "a good long password")
            swarm.service.store.contributions.record(0, time.time(), 256, [])  # an epoch counted
            return known, counted
        finally:
            await swarm.service.close()

    assert await run(keep_accounts=False) == (False, (0, 0))  # signs up
    assert await run(keep_accounts=True) == (True, (0, 0))  # logs in; the last run's epoch is gone
    assert await run(keep_accounts=False) == (False, (0, 0))  # a fresh database: sign up again


def test_keep_accounts_needs_a_moderated_swarm(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "core.cli.main", "swarm", "--keep-accounts"],
        cwd=ROOT,
        env=os.environ | {"BARNRAISE_HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "--keep-accounts goes with --moderated" in result.stderr
    assert not (tmp_path / "home").exists()  # refused before anything was written
