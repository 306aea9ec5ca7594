"""``barnraise`` with no arguments opens the app on a desktop and explains itself without one;
``barnraise app`` hands over to the app process, which shows its window and quits on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from core.util.process.desktop import display_available
from tests.support.leaks import wait_until_blocking

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("environ", "platform", "expected"),
    [
        ({}, "linux", False),
        ({"DISPLAY": ":0"}, "linux", True),
        ({"WAYLAND_DISPLAY": "wayland-0"}, "linux", True),
        ({"QT_QPA_PLATFORM": "offscreen"}, "linux", True),
        ({"DISPLAY": ""}, "freebsd14", False),
        ({}, "win32", True),
        ({}, "darwin", True),
    ],
)
def test_display_rule(environ: dict[str, str], platform: str, expected: bool) -> None:
    available, why = display_available(environ, platform)
    assert available is expected
    assert why


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.pop("QT_QPA_PLATFORM", None)
    return env | {"BARNRAISE_HOME": str(home)} | extra


def _barnraise(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "core.cli.main", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_no_arguments_and_no_display_explains(tmp_path: Path) -> None:
    done = _barnraise(env=_env(tmp_path))
    assert done.returncode == 0
    assert "usage: barnraise" in done.stdout
    assert "No display was found" in done.stdout


def test_app_without_a_display_says_what_to_run_instead(tmp_path: Path) -> None:
    done = _barnraise("app", env=_env(tmp_path))
    assert done.returncode == 2
    assert "cannot open the app" in done.stderr
    assert "barnraise engine --headless" in done.stderr


def test_the_app_process_shows_its_window_and_quits_on_sigterm(tmp_path: Path) -> None:
    probe = tmp_path / "probe.jsonl"
    env = _env(tmp_path, QT_QPA_PLATFORM="offscreen", BARNRAISE_STARTUP_PROBE=str(probe))
    proc = subprocess.Popen(
        [sys.executable, "-m", "core.cli.main", "app", "--preview"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def shown() -> bool:
            assert proc.poll() is None, proc.communicate()
            lines = probe.read_text().splitlines() if probe.exists() else []
            return {json.loads(line)["event"] for line in lines} == {"window_shown", "state_shown"}

        wait_until_blocking(shown, timeout=60)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    # a second app would have found the first through its single-instance socket; it is gone now
    assert not list(tmp_path.glob("**/engine.json"))  # the preview started no engine
