"""The wheel works once installed (not editable), from any folder.

The wheel is built from the checkout's sources, installed without its dependencies into a fresh
virtual environment outside the checkout, and given this environment's third-party packages through
a ``.pth`` line (nothing of the checkout: the editable install's own ``.pth`` finder is not run for a
folder added that way, which the test checks). Then, from a folder that holds decoy ``app`` and
``core`` packages that fail when imported, the installed ``barnraise`` runs the demo swarm and opens
the app's preview.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("core", "app", "resources", "pyproject.toml", "setup.py", "README.md")
"""What the wheel is built from (setup.py where there is one)."""
BIN = "Scripts" if os.name == "nt" else "bin"
EXE = ".exe" if os.name == "nt" else ""

pytestmark = pytest.mark.slow


def _run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{command}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done  # type: ignore[no-any-return]


def _build_wheel(into: Path) -> Path:
    """The wheel of a copy of the checkout's sources (a build writes beside them)."""
    source = into / "source"
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(
                ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        elif (ROOT / name).is_file():
            shutil.copy2(ROOT / name, source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _run([*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(into), str(source)])
    (wheel,) = into.glob("barnraise-*.whl")
    return wheel


def _installed(wheel: Path, venv: Path) -> Path:
    """A fresh environment with the wheel and, through a .pth line, this one's other packages."""
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / BIN / f"python{EXE}"
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    site = Path(purelib.stdout.strip())
    (site / "dev-packages.pth").write_text(sysconfig.get_path("purelib") + "\n")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", str(python)]
    _run([*pip, "install", "-q", "--no-deps", "--no-index", str(wheel)])
    return site


def _decoys(where: Path) -> Path:
    """A folder whose ``app`` and ``core`` packages fail loudly if anything imports them."""
    for name in ("app", "core"):
        (where / name).mkdir(parents=True)
        (where / name / "__init__.py").write_text(
            f"raise ImportError('the decoy {name}/ in the current folder was imported')\n"
        )
    return where


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the environment's ``barnraise``, its site-packages)."""
    base = tmp_path_factory.mktemp("wheel")
    wheel = _build_wheel(base / "dist")
    site = _installed(wheel, base / "venv")
    return base / "venv" / BIN / f"barnraise{EXE}", site


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "QT_"))}
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    return env | {"BARNRAISE_HOME": str(home)} | extra


def test_the_installed_package_is_the_wheel_not_the_checkout(
    installed: tuple[Path, Path], tmp_path: Path
) -> None:
    barnraise, site = installed
    python = barnraise.with_name(f"python{EXE}")
    code = (
        "import core, app, core.util.process.resources as r\n"
        "print(core.__file__, app.__file__, r.resource_root(), core.__version__)"
    )
    out = _run([str(python), "-c", code], cwd=tmp_path, env=_env(tmp_path)).stdout.split()
    assert [Path(p) for p in out[:3]] == [
        site / "core" / "__init__.py",
        site / "app" / "__init__.py",
        site / "core" / "resources",
    ]
    shipped = ("demo/project.toml", "albert-large/project.toml", "albert-xxlarge/project.toml")
    for name in (*shipped, "confusables/confusables.txt", "README.md"):
        assert (site / "core" / "resources" / name).is_file(), name
    assert not (site / "resources").exists()  # no top-level package of that generic name
    version = _run([str(barnraise), "--version"], cwd=tmp_path, env=_env(tmp_path)).stdout
    assert version.split() == ["barnraise", out[3]]
    metadata = "import importlib.metadata as m; print(m.version('barnraise'))"
    assert (
        _run([str(python), "-c", metadata], cwd=tmp_path, env=_env(tmp_path)).stdout.strip()
        == out[3]
    )


def test_the_demo_swarm_runs_from_any_folder(installed: tuple[Path, Path], tmp_path: Path) -> None:
    barnraise, site = installed
    where = _decoys(tmp_path / "elsewhere")
    swarm = subprocess.Popen(
        [str(barnraise), "swarm", "--peers", "1", "--minutes", "0.3"],
        cwd=where,
        env=_env(tmp_path / "home"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = swarm.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        swarm.send_signal(signal.SIGTERM)  # it stops its peers (their own sessions) itself
        out, err = swarm.communicate(timeout=30)
        pytest.fail(f"the swarm did not stop by itself:\n{out}\n{err}")
    finally:
        if swarm.poll() is None:
            swarm.kill()
            swarm.communicate()
    done = subprocess.CompletedProcess(swarm.args, swarm.returncode, out, err)
    logs = "".join(
        f"\n--- {log.name}\n{log.read_text(errors='replace')[-2000:]}"
        for log in (tmp_path / "home").rglob("*.log")
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}{logs}"
    # the swarm's copy of the installed demo manifest, naming its backbone's key
    manifest = tmp_path / "home" / "cache" / "swarm" / "barnraise-demo" / "project.anchored.toml"
    assert f"barnraise ctl attach {manifest} " in done.stdout, done.stdout
    demo = tomllib.loads((site / "core" / "resources" / "demo" / "project.toml").read_text())
    copy = tomllib.loads(manifest.read_text())
    assert copy["project"] == demo["project"]
    assert len(copy["access"]["backbone_keys"]) == 1
    assert "backbone on loopback" in done.stdout
    assert "decoy" not in done.stdout + done.stderr + logs


def test_the_app_opens_from_any_folder(installed: tuple[Path, Path], tmp_path: Path) -> None:
    barnraise, _ = installed
    where = _decoys(tmp_path / "elsewhere")
    probe = tmp_path / "probe.jsonl"
    env = _env(tmp_path / "home", QT_QPA_PLATFORM="offscreen", BARNRAISE_STARTUP_PROBE=str(probe))
    proc = subprocess.Popen(
        [str(barnraise), "app", "--preview"],
        cwd=where,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        shown: set[str] = set()
        while shown != {"window_shown", "state_shown"}:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, f"the window was not shown: {shown}"
            time.sleep(0.2)
            lines = probe.read_text().splitlines() if probe.exists() else []
            shown = {json.loads(line)["event"] for line in lines}
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
