"""The ``barnraise`` command as users run it: a real process, its output and exit code."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest


def barnraise() -> list[str]:
    script = shutil.which("barnraise", path=str(Path(sys.executable).parent))
    assert script, "the barnraise console script is not installed next to this Python"
    return [script]


def run(args: list[str], home: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    # no display: without arguments barnraise would open the desktop app (test_app_launch.py)
    hidden = ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")
    env = {k: v for k, v in os.environ.items() if k not in hidden} | {"BARNRAISE_HOME": str(home)}
    return subprocess.run(
        barnraise() + args, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_identity_is_created_once_and_stays(tmp_path: Path) -> None:
    first = run(["identity", "--show-path"], tmp_path)
    assert first.returncode == 0, first.stderr
    peer_id, key_path = first.stdout.split()
    assert peer_id.startswith("12D3KooW")
    assert "created a new identity key" in first.stderr
    assert stat.S_IMODE(Path(key_path).stat().st_mode) == 0o600
    second = run(["identity"], tmp_path)
    assert second.stdout.strip() == peer_id
    assert second.stderr == ""


def test_identity_with_a_damaged_key_fails_clearly(tmp_path: Path) -> None:
    key = tmp_path / "broken.key"
    key.write_text("not a key")
    result = run(["identity", "--identity", str(key)], tmp_path)
    assert result.returncode == 1
    assert "barnraise: error:" in result.stderr
    assert "not a valid identity key" in result.stderr
    assert "Traceback" not in result.stderr
    assert key.read_text() == "not a key"


def test_demo_exchanges_an_authenticated_call(tmp_path: Path) -> None:
    result = run(["demo"], tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    peer_b = lines[1].split()[1]
    assert any(line.strip() == f"caller as A saw it : {peer_b}" for line in lines)
    assert lines[-1].startswith("ok: each side proved its identity key")


@pytest.mark.parametrize("args", [["--help"], [], ["--version"]])
def test_help_and_version(tmp_path: Path, args: list[str]) -> None:
    result = run(args, tmp_path)
    assert result.returncode == 0
    assert "barnraise" in result.stdout


def test_python_dash_m_core_is_the_same_command(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "core", "--version"], capture_output=True, text=True, check=False
    )
    assert result.stdout.strip() == "barnraise 0.1.0"
