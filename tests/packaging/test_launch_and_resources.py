"""The launch commands and the resource folder, from Python and as a PyInstaller bundle would see them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from core import __version__
from core.util.process.launch import app_command, barnraise_command, frozen
from core.util.process.resources import resource_path, resource_root

ROOT = Path(__file__).resolve().parents[2]


def test_from_python_the_commands_keep_the_current_folder_off_the_path() -> None:
    assert not frozen()
    assert barnraise_command("engine") == [sys.executable, "-P", "-m", "core.cli.main", "engine"]
    assert app_command("--preview") == [sys.executable, "-P", "-m", "app", "--preview"]


def test_a_decoy_core_in_the_current_folder_is_not_imported(tmp_path: Path) -> None:
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "__init__.py").write_text("raise ImportError('the decoy was imported')\n")
    done = subprocess.run(
        barnraise_command("--version"), cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"barnraise {__version__}"


def test_frozen_the_bundle_program_is_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", "/opt/Barnraise/barnraise")
    assert frozen()
    assert barnraise_command("swarm", "--peers", "2") == [
        "/opt/Barnraise/barnraise",
        "swarm",
        "--peers",
        "2",
    ]
    # the bundle's entry answers -m app as Python would (core may not import the app)
    assert app_command("--hidden") == ["/opt/Barnraise/barnraise", "-m", "app", "--hidden"]


def test_in_the_checkout_the_resources_are_its_folder() -> None:
    assert resource_root() == ROOT / "resources"
    assert resource_path("demo/project.toml") == ROOT / "resources" / "demo" / "project.toml"
    assert resource_path("demo/project.toml").is_file()


def test_frozen_the_resources_are_in_the_bundle(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    assert resource_root() == tmp_path / "resources"
    assert (
        resource_path("icons/barnraise.svg") == tmp_path / "resources" / "icons" / "barnraise.svg"
    )
