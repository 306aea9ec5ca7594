"""Set up a virtual environment inside the checkout, then run the main job or the test suite.

Usage (from the repository root, with Python 3.11 or newer):

    python3 packaging/dev.py run     # set up .venv, then run the main job (the app on a desktop)
    python3 packaging/dev.py test    # set up .venv, then lint, type-check, check layers, run tests
    python3 packaging/dev.py docs    # set up .venv, then build the documentation site (site/)
    python3 packaging/dev.py setup   # only set up .venv
    python3 packaging/dev.py gpu-check [--device cpu]   # every GPU check (gpu_check.py)

Only the standard library is used here, so the same script works on Linux, macOS and Windows.
The environment is rebuilt only when pyproject.toml, setup.py, the constraints file or this script change.

``test`` also runs the engine's tests on Python 3.12 (``second_python.py``), beside the main run;
without extra arguments only. A machine without Python 3.12 skips that leg and says so, unless the
CI variable is set (``.ci/run`` sets it): then its absence fails the run. The two-minute churn soak,
the NAT lab and the training-process tests (``SIDE_TESTS``) run beside them too, in their own pytest
process: they wait on trainer processes and emulated networks for fixed times, and the trainers take
whatever CPU is spare, so beside the other tests they cost the run little more than their start
instead of their whole duration (about seven minutes), and one after another they do not compete.
The DHT's large in-process swarms follow them there: the main leg is the one the run waits for.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import venv
from pathlib import Path

import gpu_check  # packaging/: every check that needs an accelerator (standard library only)
import second_python  # packaging/, beside this script
import torch_build  # packaging/: which torch build suits this computer (standard library only)

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
CONSTRAINTS = ROOT / "packaging" / "constraints.txt"
STAMP = VENV / ".barnraise-setup"
# torch is installed first and on its own, the build torch_build picks for this computer (CUDA,
# CPU or macOS's; BARNRAISE_TORCH overrides), so pip never pulls a CUDA build where no GPU can use
# it; its dependencies come in the next step, under the constraints. TORCH: the second leg's pin.
TORCH = "torch==2.13.0"
VERBS = ("run", "test", "docs", "setup", "gpu-check")
"""What this script does; tests/test_docs.py checks that every ``dev.py VERB`` the docs show is one."""
NO_USABLE_DISPLAY = 3  # the app's exit status when Qt cannot use the display (app/preflight.py)
SIDE_TESTS = (
    "tests/cli/test_churn_soak.py",
    "tests/lab",
    "tests/cli/test_training_processes.py",
    "tests/cli/test_dmoe_swarm.py",
    "tests/packaging/test_gpu_check.py",
    # CPU-bound, but the side process has minutes to spare when the soak is done: the main leg
    # is the one the suite waits for (the thousand nodes took 83 s there beside the soak, 34 s
    # alone; the churn and fifty-node swarms 44 s and 31 s there, 28 s and 17 s alone)
    "tests/dht/test_simulation.py",
    "tests/dht/test_resilience.py",
    "tests/dht/test_swarm.py",
)


def _venv_bin(name: str) -> Path:
    scripts = VENV / ("Scripts" if os.name == "nt" else "bin")
    suffix = ".exe" if os.name == "nt" else ""
    return scripts / f"{name}{suffix}"


def _fingerprint() -> str:
    digest = hashlib.sha256()
    for path in (ROOT / "pyproject.toml", ROOT / "setup.py", CONSTRAINTS, Path(__file__)):
        digest.update(path.read_bytes() if path.exists() else b"-")
    digest.update(sys.version.encode())
    return digest.hexdigest()


def _run(cmd: list[str | Path], **kwargs: object) -> int:
    printable = " ".join(str(part) for part in cmd)
    print(f"$ {printable}", flush=True)
    return subprocess.call([str(part) for part in cmd], cwd=ROOT, **kwargs)  # type: ignore[call-overload]


def setup() -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 - this script must explain itself on old Pythons
        sys.exit(f"Barnraise needs Python 3.11 or newer; this is {sys.version.split()[0]}.")
    python = _venv_bin("python")
    try:
        torch = torch_build.pick()
    except torch_build.UnknownBuild as exc:
        sys.exit(str(exc))
    wanted = f"{_fingerprint()} {torch.requirement} {torch.index_url}"  # a new build: set up again
    if python.exists() and STAMP.exists() and STAMP.read_text() == wanted:
        return
    if not python.exists():
        print(f"Creating a virtual environment in {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    constraints = ["-c", CONSTRAINTS] if CONSTRAINTS.exists() else []
    print(f"torch: {' '.join(torch.pip_arguments())}\n  because {torch.reason}", flush=True)
    steps = [
        [*pip, "--no-deps", *torch.pip_arguments()],
        [*pip, *constraints, "-e", ".[dev,docs]"],
    ]
    for step in steps:
        if _run(step) != 0:
            sys.exit("Setting up the environment failed (see pip's output above).")
    _compile_bytecode()
    STAMP.write_text(wanted)


def _compile_bytecode() -> None:
    """Precompile our sources, as an installed package would be: every process starts faster.

    (An editable install leaves them uncompiled, and PYTHONDONTWRITEBYTECODE stops imports from
    caching bytecode.)"""
    subprocess.call([_venv_bin("python"), "-m", "compileall", "-q", "core", "app"], cwd=ROOT)


def has_display() -> bool:
    """The same test as ``core.util.process.desktop`` (this script may not import the project)."""
    if sys.platform in ("win32", "cygwin", "darwin"):
        return True
    return any(os.environ.get(v) for v in ("WAYLAND_DISPLAY", "DISPLAY", "QT_QPA_PLATFORM"))


def run_main(extra: list[str]) -> int:
    # The main job. On a desktop: the app, attached to a local demo swarm it starts (a backbone,
    # two trainers and a coordinator on this machine) and stops when it quits. Without a display:
    # that collaboration headless (a backbone and three trainers) for three minutes, one
    # line per epoch. Extra arguments go to the app, or replace the swarm's defaults. Headless, it
    # trains in diloco mode: a step every microbatch, no exchange to wait for, and on two cores it
    # ends well below the unigram floor, where dedloc's steps of 256 samples stay near it.
    if has_display() and os.environ.get("BARNRAISE_HEADLESS") != "1":
        code = _run([_venv_bin("barnraise"), "app", "--demo", *extra])
        if code != NO_USABLE_DISPLAY:
            return code
        print("The app cannot open on this display (see above): running the demo headless.")
        extra = []
    arguments = extra or [
        "--peers",
        "3",
        "--minutes",
        "3",
        "--mode",
        "diloco",
        "--round-seconds",
        "5",
    ]
    return _run([_venv_bin("barnraise"), "swarm", *arguments])


class SecondLeg:
    """The tests on Python 3.12, set up and run on a thread while the main checks run."""

    def __init__(self, interpreter: list[str], env: dict[str, str]) -> None:
        log = VENV / f"tests-py{second_python.VERSION}.log"
        self.leg = second_python.plan(ROOT, interpreter, CONSTRAINTS, log)
        self.code: int | None = None
        self._thread = threading.Thread(target=self._run, args=(env,), daemon=True)

    def start(self) -> None:
        print(f"(Python {second_python.VERSION}: {' '.join(self.leg.interpreter)};", end=" ")
        print(f"its tests run beside the main checks, output in {self.leg.log})", flush=True)
        self._thread.start()

    def _run(self, env: dict[str, str]) -> None:
        self.code = second_python.run_leg(self.leg, ROOT, TORCH, CONSTRAINTS, env)

    def finish(self) -> int:
        self._thread.join()
        text = self.leg.log.read_text(errors="replace") if self.leg.log.exists() else ""
        lines = text.splitlines()
        # the whole log when it failed, else pytest's summary line
        shown = lines if self.code != 0 else lines[-1:]
        print("\n".join(shown), flush=True)
        return 1 if self.code is None else self.code


class SideLeg:
    """Tests run in their own pytest process on a thread, output to a log shown at the end."""

    def __init__(self, title: str, command: list[str], log: Path, env: dict[str, str]) -> None:
        self.title = title
        self.command = command
        self.log = log
        self.code: int | None = None
        self._thread = threading.Thread(target=self._run, args=(env,), daemon=True)

    def start(self) -> None:
        print(f"({self.title}: beside the main checks, output in {self.log})", flush=True)
        self._thread.start()

    def _run(self, env: dict[str, str]) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("w") as out:
            out.write("$ " + " ".join(self.command) + "\n")
            out.flush()
            self.code = subprocess.call(
                self.command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
            )

    def finish(self) -> int:
        self._thread.join()
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        lines = text.splitlines()
        print("\n".join(lines if self.code != 0 else lines[-1:]), flush=True)
        return 1 if self.code is None else self.code


def _second_leg(extra: list[str], env: dict[str, str]) -> tuple[SecondLeg | None, str | None]:
    """The 3.12 leg to run, or why none runs (an error in CI, a note elsewhere)."""
    version = second_python.VERSION
    if extra:
        return None, None  # a focused run (-k, a path): the main leg only
    interpreter = second_python.find_interpreter()
    if interpreter is None:
        why = f"Python {version} was not found (PATH, pyenv, py.exe, ${second_python.OVERRIDE})"
        return None, why
    return SecondLeg(interpreter, env), None


DOCS_ENV = {"NO_MKDOCS_2_WARNING": "1"}
"""The Material theme prints a banner about its own future at every build: not the build's news."""


def docs_command() -> list[str | Path]:
    """``mkdocs build --strict``: a broken link, an anchor that is not there or a page left out of
    the navigation fails the build (mkdocs.yml's ``validation``)."""
    return [_venv_bin("python"), "-m", "mkdocs", "build", "--strict"]


def build_docs() -> int:
    return _run(docs_command(), env=dict(os.environ, **DOCS_ENV, PYTHONDONTWRITEBYTECODE="1"))


def run_tests(extra: list[str]) -> int:
    env = dict(os.environ, **DOCS_ENV, QT_QPA_PLATFORM="offscreen", PYTHONDONTWRITEBYTECODE="1")
    python = _venv_bin("python")
    second, missing = _second_leg(extra, env)
    if second is not None:
        second.start()
    side = None
    if not extra:
        side = SideLeg(
            "the churn soak, the NAT lab, the training processes and the DHT swarms",
            [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-q", *SIDE_TESTS],
            VENV / "tests-side.log",
            env,
        )
        side.start()
        extra = [f"--ignore={test}" for test in SIDE_TESTS]
    # mypy (half a minute from a cold cache) runs beside the others; its output comes after them
    typing = "mypy (strict, core/ and app/)"
    mypy = subprocess.Popen(
        [str(python), "-m", "mypy"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    checks: list[tuple[str, list[str | Path]]] = [
        ("ruff lint", [python, "-m", "ruff", "check", "."]),
        ("ruff format", [python, "-m", "ruff", "format", "--check", "."]),
        ("import contracts", [_venv_bin("lint-imports")]),
        ("docs (mkdocs --strict)", docs_command()),
        # the slowest tests listed at the end: where the 15-minute budget goes
        ("pytest", [python, "-m", "pytest", "--durations=25", *extra]),
    ]
    failed = []
    for name, cmd in checks:
        print(f"\n=== {name} ===", flush=True)
        if _run(cmd, env=env) != 0:
            failed.append(name)
    typed, _ = mypy.communicate()
    print(f"\n=== {typing} ===\n$ {python} -m mypy\n{typed.rstrip()}", flush=True)
    if mypy.returncode != 0:
        failed.append(typing)
    if side is not None:
        print(f"\n=== {side.title} ({' '.join(SIDE_TESTS)}) ===", flush=True)
        if side.finish() != 0:
            failed.append(side.title)
    leg = f"pytest on Python {second_python.VERSION}"
    if second is not None:
        print(f"\n=== {leg} ({' '.join(second_python.TEST_PATHS)}) ===", flush=True)
        if second.finish() != 0:
            failed.append(leg)
    elif missing is not None and os.environ.get("CI"):
        print(f"\n=== {leg} ===\n{missing}: CI needs it.", flush=True)
        failed.append(leg)
    elif missing is not None:
        print(f"\nNote: {missing}; that leg did not run.", flush=True)
    print()
    if failed:
        print(f"FAILED: {', '.join(failed)}")
        return 1
    print("All checks passed.")
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in VERBS:
        print(__doc__)
        return 2
    command, extra = argv[0], argv[1:]
    if command == "gpu-check":  # no set-up: a GPU machine runs it with the PyTorch it has
        return gpu_check.main(extra)
    setup()
    if command == "run":
        return run_main(extra)
    if command == "test":
        return run_tests(extra)
    if command == "docs":
        return build_docs()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
