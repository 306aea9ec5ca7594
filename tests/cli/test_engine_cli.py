"""``barnraise engine`` and ``barnraise ctl`` as the user runs them: separate processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "resources" / "demo" / "project.toml"


def barnraise(home: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "core.cli.main", *args],
        cwd=ROOT,
        env=os.environ | {"BARNRAISE_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@contextlib.contextmanager
def headless_engine(home: Path) -> Iterator[subprocess.Popen[str]]:
    """``barnraise engine --headless`` for ``home``, once it says it is ready; killed if still
    running afterwards."""
    engine = subprocess.Popen(
        [sys.executable, "-m", "core.cli.main", "engine", "--headless"],
        cwd=ROOT,
        env=os.environ | {"BARNRAISE_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert engine.stdout is not None
        assert engine.stdout.readline().startswith("engine ready at http://127.0.0.1:")
        yield engine
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait()
        for stream in (engine.stdout, engine.stderr):
            if stream is not None:
                stream.close()


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM is POSIX")
def test_engine_and_ctl_processes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with headless_engine(home) as engine:
        second = barnraise(home, "engine", "--headless")
        assert second.returncode == 1
        assert f"already running for this user (pid {engine.pid}" in second.stderr

        attached = barnraise(home, "ctl", "attach", str(DEMO))
        assert attached.returncode == 0, attached.stderr
        assert "attached barnraise-demo" in attached.stdout
        status = barnraise(home, "ctl", "status")
        assert status.stdout.startswith("paused: Paused: contribution is off")
        refused = barnraise(home, "ctl", "set", "idle_minutes=soon")
        assert refused.returncode == 1
        assert "idle_minutes" in refused.stderr
        changed = barnraise(home, "ctl", "--json", "set", "idle_minutes=7")
        assert '"idle_minutes": 7.0' in changed.stdout
        snoozed = barnraise(home, "ctl", "snooze", "30")
        assert "snoozed until" in snoozed.stdout  # (not opted in still comes first)
        account = barnraise(home, "ctl", "account")  # the demo is open: no coordinator, no keyring
        assert "barnraise-demo is open to everyone" in account.stdout, account.stderr
        stats = barnraise(home, "ctl", "stats", "--days", "2")
        assert stats.returncode == 0
        assert "all projects: 0 samples" in stats.stdout
        history = barnraise(home, "ctl", "history")
        assert history.stdout.strip() == "barnraise-demo: no completed epoch seen yet"
        offers = barnraise(home, "ctl", "offers")
        assert offers.stdout.startswith("barnraise-demo (attached): attached, contributing to it")
        diagnostics = barnraise(home, "ctl", "--json", "diagnostics")
        assert diagnostics.returncode == 0, diagnostics.stderr
        answer = json.loads(diagnostics.stdout)
        assert answer["pid"] == engine.pid
        assert answer["torch"] is None  # the engine never trained, so it never loaded torch
        assert any("engine ready at" in line for line in answer["log_tail"])
        token = json.loads((home / "run" / "engine.json").read_text())["token"]
        assert token not in diagnostics.stdout

        engine.send_signal(signal.SIGTERM)
        # a deadline far above a normal stop (well under a second), as a guard against one that
        # hangs or sits out a timeout; how long it takes is not this test's to judge
        assert engine.wait(10) == 0
        assert not (home / "run" / "engine.json").exists()
        # what the user set survived the stop
        assert "idle_minutes = 7.0" in (home / "config" / "engine.toml").read_text()
        gone = barnraise(home, "ctl", "status")
        assert gone.returncode == 1
        assert "no engine is running" in gone.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM is POSIX")
def test_an_engine_that_cannot_save_on_its_way_out_says_so_and_fails(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with headless_engine(home) as engine:
        (home / "config" / ".engine.toml.part").mkdir()  # the settings cannot be written
        engine.send_signal(signal.SIGTERM)
        _, stderr = engine.communicate(timeout=30)
        assert engine.returncode == 1
        assert "saving the settings failed" in stderr
        assert "may not have been written" in stderr
        assert not (home / "run" / "engine.json").exists()  # everything else was stopped
