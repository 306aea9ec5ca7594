"""``barnraise experts`` as real processes on loopback: the ready line, calls answered, stats lines,
SIGTERM exits 0 with a checkpoint, and a second process takes the expert over from that folder
(then SIGKILL loses its last update and leaves no half-written file)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import torch

from core.moe.remote import RemoteExpert
from core.moe.server.checkpoints import ExpertCheckpoints
from core.worker.events import PeerReady, PeerStopped, from_json
from tests.cli.test_cli import barnraise
from tests.conftest import MakeHost

MANIFEST = """
[project]
name = "experts-cli-test"
kind = "dmoe"
[grid]
prefix = "ffn"
shape = [2, 3]
[expert]
kind = "ffn"
hidden = 8
max_batch = 16
[server]
max_wait = 0.0
max_queue = 64
checkpoint_interval = 0.0
[trainer]
batch_size = 8
k = 2
beam_size = 2
"""
UID = "ffn.1.2"
LINE_TIMEOUT = 60.0


class Experts:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def event(self, name: str) -> dict[str, Any]:
        """The next JSON line whose ``event`` is ``name`` (others are skipped)."""
        assert self.proc.stdout is not None
        while True:
            line = await asyncio.wait_for(self.proc.stdout.readline(), LINE_TIMEOUT)
            assert line, f"the process ended before a {name!r} line (code {self.proc.returncode})"
            data: dict[str, Any] = json.loads(line)
            if data["event"] == name:
                return data


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Any]:
    manifest = tmp_path / "project.toml"
    manifest.write_text(MANIFEST, encoding="utf-8")
    started: list[Experts] = []
    env = {**os.environ, "BARNRAISE_HOME": str(tmp_path / "home")}

    async def run(*args: str) -> Experts:
        proc = await asyncio.create_subprocess_exec(
            *barnraise(),
            "experts",
            "--manifest",
            str(manifest),
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--threads",
            "1",
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=env,
        )
        started.append(Experts(proc))
        return started[-1]

    yield run
    for experts in started:
        if experts.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                experts.proc.kill()
        await experts.proc.wait()


async def test_serves_reports_stops_on_sigterm_with_a_checkpoint_and_is_taken_over(
    tmp_path: Path, make_host: MakeHost, start: Any
) -> None:
    folder = tmp_path / "checkpoints"
    first = await start("--uids", UID, "--checkpoints", str(folder), "--stats-every", "0.2")
    ready = await first.event("ready")
    assert (ready["uids"], ready["restored"], ready["role"]) == ([UID], {}, "experts")
    # a swarm reads it as any peer's ready line (the fields it does not know are skipped)
    assert from_json(ready) == PeerReady(ready["address"], "experts")
    client = await make_host()
    remote = RemoteExpert(client, ready["address"], UID, timeout=30)
    x = torch.randn(3, 8)
    (out,) = await remote.forward([x])
    assert out.shape == (3, 8)
    await remote.backward([x], [torch.ones(3, 8)])
    served = await first.event("served")
    while served["backward_samples"] < 3:
        served = await first.event("served")
    assert (served["forward_samples"], served["updates"], served["paused"]) == (3, 1, False)

    first.proc.send_signal(signal.SIGTERM)
    stopped = await first.event("stopped")
    assert stopped["saved"] == [UID]
    assert from_json(stopped) == PeerStopped()
    assert await asyncio.wait_for(first.proc.wait(), LINE_TIMEOUT) == 0
    store = ExpertCheckpoints(folder)
    (saved,) = store.files(UID)
    assert torch.load(saved, weights_only=True)["updates"] == 1

    # another process with the same uid and folder takes the expert over from that checkpoint
    second = await start("--uids", "ffn.1.*", "--checkpoints", str(folder), "--stats-every", "0")
    taken = await second.event("ready")
    assert taken["uids"] == ["ffn.1.0", "ffn.1.1", UID]
    assert taken["restored"] == {UID: 1}
    moved = RemoteExpert(client, taken["address"], UID, timeout=30)
    await moved.backward([x], [torch.ones(3, 8)])  # update 2, which no checkpoint holds
    second.proc.send_signal(signal.SIGKILL)
    assert await asyncio.wait_for(second.proc.wait(), LINE_TIMEOUT) == -signal.SIGKILL
    assert store.files(UID) == [saved]
    assert sorted(p.name for p in (folder / UID).iterdir()) == [saved.name]


def test_a_uid_off_the_grid_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from core.cli.main import main

    manifest = tmp_path / "project.toml"
    manifest.write_text(MANIFEST, encoding="utf-8")
    args = ["experts", "--manifest", str(manifest), "--host", "127.0.0.1", "--port", "0"]
    assert main([*args, "--uids", "ffn.2.0", "--checkpoints", str(tmp_path / "c")]) == 1
    out, err = capsys.readouterr()
    assert out == ""  # no ready line: nothing started
    assert "barnraise: error: index 2 is outside dimension 0 of grid 'ffn'" in err
    assert not (tmp_path / "c").exists()
