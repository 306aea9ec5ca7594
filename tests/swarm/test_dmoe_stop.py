"""How a dmoe swarm says its expert servers stopped, with stand-in servers (small Python processes,
no torch): one that saves and says so, one that must be killed after its grace, one that ends without
a word. (The whole swarm: tests/cli/test_dmoe_swarm.py.)"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from core.swarm import dmoe_run
from core.swarm.children import ChildProcess
from core.swarm.dmoe_run import DmoeLine, DmoeStop, DmoeSwarmOptions, LocalDmoeRun, ReceiptCredit
from core.util.process.detached import start_detached_async

pytestmark = pytest.mark.skipif(os.name == "nt", reason="stand-ins stop on SIGTERM")

STOPPED = {"event": "stopped", "saved": ["ffn.0.0"], "untrained": ["ffn.3.3"]}
SAVES = f"""
import signal, sys
def stop(*_):
    print({json.dumps(json.dumps(STOPPED))}, flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("up", flush=True)
signal.pause()
"""
STUBBORN = """
import signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("up", flush=True)
signal.pause()
"""
SILENT = """
import signal, sys
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("up", flush=True)
signal.pause()
"""


class Heard:
    """A DmoeOutput that keeps what it was told."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.stops: list[DmoeStop] = []

    def running(self, servers: int, trainers: int, address: str, logs: Path) -> None:
        pass

    def progress(self, line: DmoeLine) -> None:
        pass

    def stopped(self, stop: DmoeStop) -> None:
        self.stops.append(stop)

    def problem(self, message: str) -> None:
        self.problems.append(message)

    def receipts(self, credited: ReceiptCredit) -> None:
        pass


async def stand_in(name: str, script: str) -> ChildProcess:
    proc = await start_detached_async([sys.executable, "-c", script])
    assert proc.stdout is not None
    assert await proc.stdout.readline() == b"up\n"  # its signal handler is in place
    return ChildProcess(name, proc)


async def test_the_swarm_says_which_servers_saved_which_were_killed_and_what_never_learned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dmoe_run, "STOP_GRACE", 0.5)
    heard = Heard()
    run = LocalDmoeRun(DmoeSwarmOptions(manifest=tmp_path / "unused.toml"), heard)
    servers = [
        await stand_in("experts-0", SAVES),
        await stand_in("experts-1", STUBBORN),
        await stand_in("experts-2", SILENT),
    ]
    try:
        for child in servers:
            run._servers.append(child)
            run._server_readers.append(run._tasks.spawn(child.name, run._read(child)))
        run._running = True
        run._checkpoints = tmp_path / "experts"
        await run._close()
    finally:
        for child in servers:
            if child.proc.returncode is None:
                child.proc.kill()
                await child.proc.wait()
    assert heard.problems == [
        (
            "expert server experts-1 did not stop within 0.5 s and was killed: what its experts "
            "learned since their last checkpoint is lost"
        ),
        "expert server experts-2 ended without saving its experts; see its log",
    ]
    assert heard.stops == [DmoeStop(3, 1, 1, ["ffn.3.3"], tmp_path / "experts")]


async def test_a_child_that_ignores_the_stop_signal_is_killed_and_says_so() -> None:
    stubborn = await stand_in("stubborn", STUBBORN)
    assert await stubborn.stop(0.3) is False
    assert stubborn.proc.returncode is not None
    polite = await stand_in("polite", SILENT)
    assert await polite.stop(10) is True
    assert await polite.stop(10) is True  # stopping a stopped child is no kill
