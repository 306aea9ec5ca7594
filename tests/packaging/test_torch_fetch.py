"""Fetching torch on a light bundle's first run: pip's output as progress, the offline path, the
user's folder on the path, and a real pip install of a small wheel published there."""

from __future__ import annotations

import sys
import time
import zipfile
from pathlib import Path

import pytest

from core.api.torch_fetch import FetchProgress
from core.cli import torch_fetch
from core.cli.pip_output import PipOutput, offline_reason, package_of
from core.config import runtime_packages

PIP_LINES = """\
Looking in indexes: https://download.pytorch.org/whl/cpu
Collecting torch==2.13.0+cpu
  Downloading https://download.pytorch.org/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_\
x86_64.whl (184.3 MB)
Progress 0 of 184300000
Progress 92150000 of 184300000
Collecting typing-extensions>=4.10.0 (from torch==2.13.0+cpu)
  Downloading typing_extensions-4.16.0-py3-none-any.whl (44 kB)
Installing collected packages: typing-extensions, torch
Successfully installed torch-2.13.0+cpu typing-extensions-4.16.0
"""


def test_pip_output_becomes_progress() -> None:
    output = PipOutput()
    seen = [p for line in PIP_LINES.splitlines() if (p := output.feed(line)) is not None]
    assert [p.stage for p in seen] == [
        "checking",
        "downloading",
        "downloading",
        "downloading",
        "checking",
        "downloading",
        "installing",
    ]
    assert seen[1].text == "Downloading torch (184.3 MB)"
    assert (seen[3].package, seen[3].done, seen[3].total) == ("torch", 92150000, 184300000)
    assert seen[5].package == "typing-extensions"
    assert seen[6].text == "Unpacking 2 package(s)"
    assert package_of("typing_extensions-4.16.0-py3-none-any.whl") == "typing-extensions"


def test_offline_is_told_from_other_failures() -> None:
    retrying = (
        "WARNING: Retrying (Retry(total=1, connect=None, read=None, redirect=None, status=None)) "
        "after connection broken by 'NewConnectionError(\"<pip._vendor.urllib3.connection."
        "HTTPSConnection object>: Failed to establish a new connection: [Errno -3] Temporary "
        "failure in name resolution\")': /whl/cpu/torch/"
    )
    unreachable = [
        retrying,
        "ERROR: Could not find a version that satisfies the requirement torch==2.13.0+cpu",
    ]
    words = offline_reason(unreachable, "https://download.pytorch.org/whl/cpu")
    assert words is not None
    assert "Could not reach download.pytorch.org" in words
    assert offline_reason(unreachable[1:], "https://download.pytorch.org/whl/cpu") is None
    output = PipOutput()
    for line in unreachable:
        output.feed(line)
    assert output.last_error().startswith("Could not find a version")


def test_progress_lines_round_trip_and_other_lines_are_ignored() -> None:
    progress = FetchProgress("downloading", "Downloading torch", "torch", 5, 10)
    assert FetchProgress.read_line(progress.to_json()) == progress
    assert FetchProgress.read_line("WARNING: something") is None
    assert FetchProgress.read_line('{"stage": "exploding", "text": ""}') is None


@pytest.mark.usefixtures("barnraise_home")
def test_an_unreachable_index_fails_at_once_as_offline() -> None:
    said: list[FetchProgress] = []
    started = time.monotonic()
    code = torch_fetch.install(
        said.append,
        requirement="torch==2.13.0",
        index_url="http://127.0.0.1:9/simple",  # the discard port: nothing listens
        force=True,
    )
    assert code == 3
    assert time.monotonic() - started < 10
    assert said[-1].stage == "failed"
    assert said[-1].offline
    assert said[-1].text.startswith("Could not reach 127.0.0.1")
    assert runtime_packages.installed() is None


@pytest.mark.usefixtures("barnraise_home")
def test_the_users_folder_goes_last_on_the_path() -> None:
    before = list(sys.path)
    try:
        place = runtime_packages.activate()
        assert place.is_dir()
        assert sys.path[-1] == str(place)
        runtime_packages.activate()
        assert sys.path.count(str(place)) == 1
    finally:
        sys.path[:] = before


def tiny_wheel(folder: Path) -> Path:
    """A wheel of one module, ``barnraise_tiny``, enough for pip to install."""
    path = folder / "barnraise_tiny-1.0-py3-none-any.whl"
    info = "barnraise_tiny-1.0.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("barnraise_tiny/__init__.py", "VALUE = 42\n")
        wheel.writestr(
            f"{info}/METADATA", "Metadata-Version: 2.1\nName: barnraise-tiny\nVersion: 1.0\n"
        )
        wheel.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        wheel.writestr(f"{info}/RECORD", "")
    return path


@pytest.mark.slow
def test_pip_installs_into_staging_and_the_folder_is_published(
    barnraise_home: Path, tmp_path: Path
) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    tiny_wheel(wheels)
    said: list[FetchProgress] = []
    code = torch_fetch.install(
        said.append,
        requirement="barnraise-tiny==1.0",
        find_links=[str(wheels)],
        no_index=True,
        force=True,
    )
    assert code == 0, said[-1]
    assert said[-1].stage == "done"
    assert any(p.stage == "installing" for p in said)
    place = runtime_packages.folder()
    assert (place / "barnraise_tiny" / "__init__.py").is_file()
    assert not runtime_packages.staging().exists()
    note = runtime_packages.installed()
    assert note is not None
    assert note.requirement == "barnraise-tiny==1.0"
