"""``barnraise swarm --project dmoe --moderated``: a coordinator, three expert servers and four
asynchronous trainers, each an OS process on loopback and logged in with an access pass, and the loss
they report falls; a stranger without a pass gets nothing from the experts;
the record lets an engine here find the swarm while it runs; every process is gone after Ctrl-C."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from core.config.paths import UserDirs
from core.moe.server import RemoteExpert
from core.net import Host, Identity, NetConfig
from core.net.errors import NetError
from core.net.host.address import PeerAddress
from core.swarm import running_swarms

ROOT = Path(__file__).resolve().parents[2]
UIDS = [f"ffn.{i}.{j}" for i in range(4) for j in range(4)]
LINE = re.compile(
    r"^\s*(?P<seconds>\d+) s\s+steps\s+(?P<steps>\d+)\s+loss (?P<loss>[0-9.]+)\s+"
    r"accuracy (?P<accuracy>[0-9.]+|-)\s+.*answered\s+(?P<answered>[0-9.]+)%\s+trainers (?P<trainers>\d)"
)


@pytest.mark.slow
@pytest.mark.timeout(400)  # seven processes load torch on two cores; the limit guards a hang
@pytest.mark.skipif(os.name == "nt", reason="sends SIGINT")
async def test_three_servers_and_four_trainers_make_the_loss_fall(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    env = os.environ | {"BARNRAISE_HOME": str(home), "BARNRAISE_SWARM_LOG_LEVEL": "warning"}
    command = ["swarm", "--project", "dmoe", "--servers", "3", "--peers", "4", "--moderated"]
    errors = (tmp_path / "stderr.txt").open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "core.cli.main", *command, "--work-dir", str(work)),
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=errors,  # a pipe nobody reads could fill and stall it
    )
    assert proc.stdout is not None
    lines: list[re.Match[str]] = []
    pids: list[int] = []
    try:
        async with asyncio.timeout(300):
            while line := (await proc.stdout.readline()).decode():
                if line.startswith("3 expert server(s) and 4 trainer(s)"):
                    (record,) = running_swarms(UserDirs.under(home))
                    assert (record.project, record.moderated) == ("dmoe-demo", True)
                    pids = record.live_pids()
                    assert len(pids) == 1 + 3 + 4  # the swarm, its servers and trainers
                    await assert_strangers_are_refused(record.initial_peers[0])
                if (match := LINE.match(line)) and int(match["trainers"]) == 4:
                    lines.append(match)
                    # four trainers, 40 steps each in their first reports, then a long way down
                    if int(match["steps"]) >= 600 and match["accuracy"] != "-":
                        break
        assert lines, "no progress line"
        first, last = float(lines[0]["loss"]), float(lines[-1]["loss"])
        assert last < 0.5 * first, [m.group(0) for m in lines]
        assert float(last_accuracy(lines)) > 0.5  # ten classes: chance is 0.1
        assert float(lines[-1]["answered"]) == 100.0  # nothing failed on a quiet loopback

        proc.send_signal(signal.SIGINT)
        async with asyncio.timeout(90):
            rest = (await proc.stdout.read()).decode().splitlines()
            assert await proc.wait() == 0
        assert running_swarms(UserDirs.under(home)) == []
        deadline = time.monotonic() + 10
        while [p for p in pids if psutil.pid_exists(p) and not zombie(p)]:
            assert time.monotonic() < deadline, "processes of the swarm are still running"
            await asyncio.sleep(0.2)
        # every server stopped by itself and saved its experts on the way out: each expert that
        # learned has a folder. One that no trainer ever chose has nothing to save (a takeover
        # builds it alike from its uid); the trainers' gates all start alike, and a corner of the
        # grid can stay cold for a whole run, so the servers name those.
        (said,) = [line for line in rest if line.startswith("expert servers stopped:")]
        assert said.startswith("expert servers stopped: 3 of 3 saved their experts"), said
        untrained = next(
            (line.split(": ", 1)[1].split() for line in rest if line.startswith("never trained")),
            [],
        )
        folders = sorted(path.name for path in (work / "experts").iterdir())
        assert folders == sorted(set(UIDS) - set(untrained)), untrained
    finally:
        errors.close()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        for pid in pids[1:]:
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()


async def assert_strangers_are_refused(address: str) -> None:
    """A peer without a pass reaches no expert of a moderated project."""
    stranger = Host(Identity.generate(), NetConfig(dial_timeout=5, handshake_timeout=5))
    await stranger.start([])
    try:
        with pytest.raises(NetError):
            await RemoteExpert(stranger, PeerAddress.parse(address), "ffn.0.0", timeout=10).info()
    finally:
        await stranger.close()


def last_accuracy(lines: list[re.Match[str]]) -> str:
    return next(m["accuracy"] for m in reversed(lines) if m["accuracy"] != "-")


def zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True
