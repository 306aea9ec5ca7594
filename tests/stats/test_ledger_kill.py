"""A ledger writer killed with SIGKILL at any moment loses no committed row and leaves a sound file."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from core.stats import Ledger

REPO_ROOT = Path(__file__).resolve().parents[2]

# Adds one sample at a time, a new hour every 7 adds and two projects, so that both the insert and
# the update paths of the upsert are under way when the kill lands. The count is printed only
# after ``add`` has returned, that is after its commit.
CHILD = """
import sys
from pathlib import Path
from core.stats import WorkDone, Ledger

ledger = Ledger(Path(sys.argv[1]))
count = 0
while True:
    project = "even" if count % 2 == 0 else "odd"
    ledger.add(project, WorkDone(samples=1), when=1_700_000_000.0 + count * 500.0)
    count += 1
    print(count, flush=True)
"""


def kill_after(path: Path, commits: int) -> int:
    """Run a writer, SIGKILL it once it reports ``commits`` commits; return the last count seen."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        last = 0
        for line in child.stdout:
            last = int(line)
            if last >= commits:
                os.kill(child.pid, signal.SIGKILL)
                break
        else:
            child.wait()
            assert child.stderr is not None
            pytest.fail(f"the writer exited early ({child.returncode}): {child.stderr.read()}")
        # Whatever it reported between our read and the kill also counts; a last line cut short
        # by the kill (no newline) is ignored, which only lowers the bound we check.
        for line in child.stdout:
            if line.endswith("\n"):
                last = int(line)
        assert child.wait(timeout=10) == -signal.SIGKILL
        return last
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX only")
def test_every_committed_add_survives_sigkill(tmp_path: Path) -> None:
    for commits in (50, 200, 500):
        path = tmp_path / f"killed-after-{commits}" / "ledger.sqlite"
        reported = kill_after(path, commits)
        assert reported >= commits
        with Ledger(path) as ledger:
            samples = ledger.totals().samples
            # Every reported add was committed; at most the one in flight committed unreported.
            assert reported <= samples <= reported + 1, (commits, reported, samples)
            assert ledger.projects() == ["even", "odd"]
        conn = sqlite3.connect(path)
        try:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        finally:
            conn.close()
