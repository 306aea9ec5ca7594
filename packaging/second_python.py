"""The test command's second leg: the engine's own tests again, on another Python (3.12).

Python 3.12 changed asyncio under our feet once already: ``await gather(...)`` over tasks that have
all finished no longer yields to the loop, and a loop that relied on that hung the engine on 3.12
while every test passed on 3.11. So the tests of the packages that drive the event loop hardest
(net, dht, averaging, training, the engine and its control server, and the units under them)
also run on 3.12.

The environment holds only the dependencies, never the project: the tests import it from the
checkout through PYTHONPATH. So one environment serves every clone on the machine; it lives in the
user's cache folder, named by a digest of the dependency lists, and is rebuilt only when they
change (torch's 3.12 wheel comes from the package index and is large). The GUI's packages stay out
of it: the app's tests run on the main leg. Only the standard library is used here.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

VERSION = "3.12"
TEST_PATHS = (
    "tests/net",
    "tests/trust",
    "tests/dht",
    "tests/averaging",
    "tests/codecs",
    "tests/training",
    "tests/worker",
    "tests/engine",
    "tests/control",
    "tests/util",
    "tests/config",
    "tests/api",
)
SKIPPED_HERE = (
    "tests/dht/test_simulation.py::test_a_thousand_nodes",
    "tests/training/test_large_models.py",
)
"""Left to the main leg: half a minute of pure lookup arithmetic on the in-memory network, and
real-size model shapes (torch arithmetic). They say nothing about the asyncio behaviour this leg
exists for (the DHT's socket tests and the training swarms still run here), and this leg shares the
machine's two cores with the main one. The optimizers, the models and the Byzantine collaborations
(``tests/optim``, ``tests/models``, ``tests/swarm``) are torch arithmetic too, and stay out of
``TEST_PATHS``."""
# the GUI and its tests stay on the main leg, and so do the linters (they check code, not Python)
LEAVE_OUT = frozenset({"pyside6", "pytest-qt", "ruff", "mypy", "import-linter", "types-psutil"})
DOCS_SECTION = b"# docs extra:"
"""Where ``constraints.txt``'s pins of the docs tools begin: this leg installs none of them, so its
environment's digest stops there (a new mkdocs must not cost a rebuild of gigabytes)."""
OVERRIDE = "BARNRAISE_PYTHON312"  # the interpreter to use, when it is not on PATH or under pyenv


@dataclass(frozen=True)
class Leg:
    interpreter: list[str]
    """How to start the base interpreter (``["py", "-3.12"]`` on Windows)."""
    env_dir: Path
    log: Path


def find_interpreter() -> list[str] | None:
    """A Python 3.12 on this machine: $BARNRAISE_PYTHON312, python3.12 on PATH, pyenv, or py.exe."""
    candidates: list[list[str]] = []
    if os.environ.get(OVERRIDE):
        candidates.append([os.environ[OVERRIDE]])
    on_path = shutil.which(f"python{VERSION}")
    if on_path:
        candidates.append([on_path])
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for found in sorted(glob.glob(str(pyenv / f"{VERSION}.*")), reverse=True):
        candidates.append([str(Path(found) / "bin" / "python")])
    if os.name == "nt" and shutil.which("py"):
        candidates.append(["py", f"-{VERSION}"])
    for command in candidates:
        if _version_of(command) == VERSION:
            return command
    return None


def _version_of(command: list[str]) -> str | None:
    probe = "import sys; print('%d.%d' % sys.version_info[:2])"
    try:
        done = subprocess.run(
            [*command, "-c", probe], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def requirements(root: Path) -> list[str]:
    """The project's dependencies and its dev tools, less the GUI's."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    return [r for r in wanted if _name(r) not in LEAVE_OUT]


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    return (match.group(0) if match else requirement).lower().replace("_", "-")


def cache_root() -> Path:
    if os.name == "nt":
        base = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local"))
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "barnraise-dev"


def plan(root: Path, interpreter: list[str], constraints: Path, log: Path) -> Leg:
    digest = hashlib.sha256()
    for line in [*requirements(root), " ".join(interpreter)]:
        digest.update(line.encode() + b"\n")
    if constraints.exists():
        digest.update(constraints.read_bytes().partition(DOCS_SECTION)[0])
    env_dir = cache_root() / f"venv-py{VERSION}-{digest.hexdigest()[:16]}"
    return Leg(interpreter, env_dir, log)


def _env_python(env_dir: Path) -> Path:
    return env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_env(leg: Leg, root: Path, torch_pin: str, constraints: Path, out: object) -> Path:
    """The leg's environment, built if it is missing or was left half-built; its python."""
    python = _env_python(leg.env_dir)
    stamp = leg.env_dir / ".barnraise-ready"
    if python.exists() and stamp.exists():
        return python
    for old in leg.env_dir.parent.glob(f"venv-py{VERSION}-*"):
        if old != leg.env_dir:  # a stale one: the dependency lists changed since (gigabytes each)
            shutil.rmtree(old, ignore_errors=True)
    leg.env_dir.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [*leg.interpreter, "-m", "venv", "--clear", str(leg.env_dir)],
        check=True,
        stdout=out,  # type: ignore[arg-type]
        stderr=subprocess.STDOUT,
    )
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    pinned = ["-c", constraints] if constraints.exists() else []
    for step in ([*pip, *pinned, torch_pin], [*pip, *pinned, *requirements(root)]):
        subprocess.run(
            [str(part) for part in step],
            check=True,
            cwd=root,
            stdout=out,  # type: ignore[arg-type]
            stderr=subprocess.STDOUT,
        )
    stamp.write_text("ok\n")
    return python


def run_leg(leg: Leg, root: Path, torch_pin: str, constraints: Path, env: dict[str, str]) -> int:
    """Set up (if needed) and run the leg's tests, everything written to ``leg.log``."""
    leg.log.parent.mkdir(parents=True, exist_ok=True)
    with leg.log.open("w") as out:
        try:
            python = ensure_env(leg, root, torch_pin, constraints, out)
        except (OSError, subprocess.CalledProcessError) as exc:
            out.write(f"\nSetting up the Python {VERSION} environment failed: {exc}\n")
            return 1
        # the checkout's code, not an installed copy; no shared pytest cache with the main leg
        leg_env = dict(env, PYTHONPATH=str(root))
        command = [
            str(python),
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--durations=10",
            *(f"--deselect={test}" for test in SKIPPED_HERE),
            *TEST_PATHS,
        ]
        out.write("$ " + " ".join(command) + "\n")
        out.flush()
        return subprocess.call(command, cwd=root, env=leg_env, stdout=out, stderr=subprocess.STDOUT)
