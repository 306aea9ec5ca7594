"""The GPU check: every check that needs an accelerator, run by one command, into one JSON file and
a short Markdown summary.

    python3 packaging/dev.py gpu-check                      # on a machine with a CUDA GPU
    python3 packaging/dev.py gpu-check --device cpu         # the dry run: every path, tiny sizes
    python3 packaging/dev.py gpu-check --only trainer,memory --out DIR
    python3 packaging/dev.py gpu-check --combine A.json B.json --out docs/benchmarks/gpu-check

The checks (``--only`` takes their names): ``tests`` runs the tests marked ``cuda`` (they skip
without a GPU); the others are the benchmarks of ``benchmarks/gpu/`` (``python -m
benchmarks.gpu.<name>`` from the repository root), each against its own baseline in the same run,
each in its own process with a time limit: ``trainer`` (the trainer against a
plain PyTorch loop), ``memory`` (bytes per parameter of 32-bit, 8-bit and offloaded states),
``pause`` (pause latency, memory given back, resume), ``precision`` (bf16 and fp16 against fp32),
``collab`` (two trainers sharing the GPU with a CPU backbone), ``experts`` (the expert host
against a plain expert loop) and ``diloco`` (DiLoCo's inner steps against a plain loop, then a
round's host copies). A check that crashes or runs out of time is recorded with the end of
its output and the run goes on; the exit status is 1 if any did. A missed goal is a finding, not
an error: the summary says which.

It runs the benchmarks with this interpreter if it has torch (a GPU machine's own PyTorch),
otherwise with the project's ``.venv`` (``--python`` picks another). Only the standard library
is used here. The results go to ``--out`` (by default ``docs/benchmarks/gpu-check`` on a GPU and
``build/gpu-check`` for the dry run) as ``gpu-check-<gpu>-<date>.json``, ``.md`` and ``.log``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "resources" / "demo" / "project.toml"
DEFAULT_OUT = ROOT / "docs" / "benchmarks" / "gpu-check"
DRY_OUT = ROOT / "build" / "gpu-check"
CUDA_MARK = "pytest.mark.cuda"


@dataclass(frozen=True)
class Check:
    name: str
    what: str
    argv: Callable[[str, bool, Path], list[str]]
    """(device, dry run, JSON path) -> the command after the interpreter."""
    timeout: float
    """Seconds on a GPU; the dry run has a fifth of it."""


def _bench(name: str, full: list[str], dry: list[str]) -> Callable[[str, bool, Path], list[str]]:
    """``python -m benchmarks.gpu.<name>``, run from the repository root."""

    def argv(device: str, dry_run: bool, json_path: Path) -> list[str]:
        return [
            "-m",
            f"benchmarks.gpu.{name}",
            "--device",
            device,
            *(dry if dry_run else full),
            "--json",
            str(json_path),
        ]

    return argv


def _tests(device: str, dry_run: bool, json_path: Path) -> list[str]:
    files = [str(p.relative_to(ROOT)) for p in cuda_test_files()]
    return [
        "-m",
        "pytest",
        "-m",
        "cuda",
        "-q",
        "-p",
        "no:cacheprovider",
        "-rs",
        *files,
        f"--junitxml={json_path.with_suffix('.xml')}",
    ]


CHECKS = (
    Check("tests", "the tests marked cuda", _tests, 600),
    Check(
        "trainer",
        "the trainer against a plain PyTorch loop (demo, albert-large, albert-xxlarge 8-bit "
        "offloaded)",
        _bench("trainer_throughput", ["--reference"], ["--dry-run"]),
        900,
    ),
    Check(
        "memory",
        "bytes per parameter: 32-bit, 8-bit, offloaded (albert-xxlarge)",
        _bench("memory", [], ["--manifest", str(DEMO), "--steps", "2"]),
        900,
    ),
    Check(
        "pause",
        "pause latency, GPU memory given back, resume",
        _bench("pause_latency", ["--trials", "20"], ["--trials", "2"]),
        600,
    ),
    Check(
        "precision",
        "bf16 and fp16 autocast against fp32 (loss after 60 steps)",
        _bench("precision", ["--steps", "60"], ["--steps", "3", "--microbatch", "8"]),
        600,
    ),
    Check(
        "collab",
        "two trainers sharing the GPU, a CPU backbone: the backbone's distance per epoch",
        _bench("collab", [], ["--dry-run"]),
        900,
    ),
    Check(
        "experts",
        "the expert host on the device against a plain expert loop",
        _bench("experts", [], ["--dry-run"]),
        600,
    ),
    Check(
        "diloco",
        "diloco's inner steps against a plain PyTorch loop (same parameters, speed), then one "
        "round's end and landing alone (host copies, host bytes per parameter)",
        _bench("diloco_inner", [], ["--dry-run"]),
        600,
    ),
)
NAMES = tuple(c.name for c in CHECKS)


def cuda_test_files() -> list[Path]:
    """Test files with a test marked ``cuda`` (found by reading them: collecting the whole suite
    would import the app, which a GPU machine without Qt cannot)."""
    found = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if CUDA_MARK in path.read_text(encoding="utf-8"):
            found.append(path)
    return found


def choose_python(asked: str | None) -> str:
    if asked:
        return asked
    if importlib.util.find_spec("torch") is not None:
        return sys.executable
    venv = ROOT / ".venv" / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    if venv.exists():
        return str(venv)
    raise SystemExit(
        "gpu-check: this Python has no torch and there is no .venv: run "
        "`python3 packaging/dev.py setup` first, or name an interpreter with --python"
    )


PROBE = """
import importlib, json, platform, sys, torch
cuda = torch.cuda.is_available()
missing = []
for name in ("core.training.peer.project_peer", "core.moe.server.runtime", "core.engine", "pytest_asyncio"):
    try:
        importlib.import_module(name)
    except ImportError as exc:
        missing.append(f"{name}: {exc}")
print(json.dumps({
    "missing": missing,
    "python": platform.python_version(),
    "torch": torch.__version__,
    "cuda": torch.version.cuda,
    "hip": getattr(torch.version, "hip", None),
    "gpu": torch.cuda.get_device_name(0) if cuda else None,
    "gpu_memory_bytes": torch.cuda.get_device_properties(0).total_memory if cuda else None,
    "gpus": torch.cuda.device_count() if cuda else 0,
    "platform": platform.platform(),
}))
"""


def probe(python: str) -> dict[str, Any]:
    done = subprocess.run(
        [python, "-c", PROBE], capture_output=True, text=True, check=False, timeout=300, cwd=ROOT
    )
    if done.returncode != 0:
        raise SystemExit(f"gpu-check: {python} cannot import torch:\n{done.stderr[-2000:]}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    missing = found.pop("missing")
    if missing:
        raise SystemExit(
            f"gpu-check: {python} lacks what the checks import:\n  "
            + "\n  ".join(missing)
            + "\nwhere no package index can be reached, carry the wheels that "
            "packaging/gpu_wheels.py fetches (its docstring says how)"
        )
    return found


def run_check(check: Check, python: str, device: str, dry: bool, work: Path) -> dict[str, Any]:
    """One check in its own process; its JSON, or what went wrong."""
    json_path = work / f"{check.name}.json"
    argv = [python, *check.argv(device, dry, json_path)]
    timeout = check.timeout / 5 if dry else check.timeout
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    started = time.monotonic()
    entry: dict[str, Any] = {"what": check.what, "command": _shown(argv)}
    try:
        done = subprocess.run(
            argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
        returncode, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        returncode, output = None, _text(exc.stdout) + _text(exc.stderr)
        entry["error"] = f"ran past its {timeout:.0f} s"
    entry["seconds"] = round(time.monotonic() - started, 1)
    entry["returncode"] = returncode
    entry["output_tail"] = output[-3000:]
    if check.name == "tests":
        entry["result"] = junit(json_path.with_suffix(".xml"), device)
        if returncode not in (0, 5) and "error" not in entry:  # 5: nothing collected
            entry["error"] = f"pytest exited with {returncode}"
        return entry
    if json_path.exists():
        entry["result"] = json.loads(json_path.read_text(encoding="utf-8"))
    if returncode != 0 and "error" not in entry:
        entry["error"] = f"exited with {returncode}"
    elif "result" not in entry and "error" not in entry:
        entry["error"] = "wrote no JSON"
    return entry


def junit(path: Path, device: str) -> dict[str, Any] | None:
    """Counts from pytest's JUnit XML, and the goal: every CUDA test passes on a GPU."""
    if not path.exists():
        return None
    suite = ET.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    counts = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    failed = [
        f"{case.get('classname')}.{case.get('name')}"
        for case in suite.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    ]
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    on_gpu = device.startswith("cuda")
    return {
        "passed": passed,
        "failed": failed,
        "skipped": counts["skipped"],
        "goals": {
            "cuda_tests": {
                "value": f"{passed} passed, {len(failed)} failed, {counts['skipped']} skipped",
                "goal": "all pass",
                "met": (not failed and passed > 0) if on_gpu else None,
                "note": "" if on_gpu else "skipped without a GPU",
            }
        },
    }


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")


def _shown(argv: list[str]) -> str:
    return " ".join(str(Path(a).relative_to(ROOT)) if a.startswith(str(ROOT)) else a for a in argv)


def goals(checks: dict[str, dict[str, Any]], dry: bool) -> list[dict[str, Any]]:
    """Every goal the checks report, flat: check, name, value, goal, met, note. A dry run judges
    none: its sizes are chosen to take seconds, not to mean anything."""
    out = []
    for name, entry in checks.items():
        result = entry.get("result") or {}
        for goal_name, goal in (result.get("goals") or {}).items():
            out.append(
                {
                    "check": name,
                    "name": goal_name,
                    "value": goal.get("value"),
                    "goal": goal.get("goal"),
                    "met": None if dry else goal.get("met"),
                    "note": "dry run: not judged" if dry else goal.get("note", ""),
                }
            )
    return out


def report(environment: dict[str, Any], checks: dict[str, dict[str, Any]]) -> dict[str, Any]:
    flat = goals(checks, bool(environment.get("dry_run")))
    return {
        "gpu_check": 1,
        **environment,
        "checks": checks,
        "goals": flat,
        "crashed": [n for n, e in checks.items() if "error" in e],
        "missed": [f"{g['check']}.{g['name']}" for g in flat if g["met"] is False],
    }


def markdown(result: dict[str, Any]) -> str:
    title = result.get("gpu") or "no GPU (dry run)"
    lines = [
        f"# GPU check: {title}, {result['date']}",
        "",
        (
            f"torch {result['torch']} (CUDA {result.get('cuda') or '-'}), Python {result['python']}, "
            f"device `{result['device']}`{', dry run' if result['dry_run'] else ''}."
        ),
        "",
        "| check | goal | measured | target | met |",
        "| --- | --- | --- | --- | --- |",
    ]
    for g in result["goals"]:
        met = {True: "yes", False: "**no**", None: "-"}[g["met"]]
        lines.append(
            f"| {g['check']} | {g['name']} | {_cell(g['value'])} | {_cell(g['goal'])} | {met} |"
        )
    lines += ["", "| check | what | seconds | outcome |", "| --- | --- | --- | --- |"]
    for name, entry in result["checks"].items():
        outcome = entry.get("error", "ran")
        lines.append(f"| {name} | {entry['what']} | {entry['seconds']} | {outcome} |")
    lines += ["", "Commands:", ""]
    lines += [f"- `{entry['command']}`" for entry in result["checks"].values()]
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return "-" if value is None else str(value).replace("|", "/")


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def write(result: dict[str, Any], out: Path, log: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    who = slug(result["gpu"]) if result.get("gpu") else f"{slug(result['device'])}-dry-run"
    stem = out / f"gpu-check-{who}-{result['date']}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    stem.with_suffix(".md").write_text(markdown(result), encoding="utf-8")
    if log:
        stem.with_suffix(".log").write_text(log, encoding="utf-8")
    return stem.with_suffix(".json")


def combine(paths: list[Path], out: Path) -> int:
    """Several partial runs (``--only``, one per device call) into one result."""
    merged: dict[str, Any] | None = None
    checks: dict[str, dict[str, Any]] = {}
    for path in paths:
        part = json.loads(path.read_text(encoding="utf-8"))
        if merged is not None and (part.get("gpu"), part["device"]) != (
            merged.get("gpu"),
            merged["device"],
        ):
            raise SystemExit(f"gpu-check: {path} was measured on another device than {paths[0]}")
        merged = merged or part
        checks.update(part["checks"])
    assert merged is not None
    environment = {k: v for k, v in merged.items() if k not in ("checks", "goals", "crashed")}
    environment.pop("missed", None)
    result = report(environment, checks)
    print(f"wrote {write(result, out, '')}")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="dev.py gpu-check", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu for the dry run")
    parser.add_argument("--only", default="", help=f"comma-separated, of: {', '.join(NAMES)}")
    parser.add_argument("--out", type=Path, help="where the JSON, Markdown and log go")
    parser.add_argument("--python", help="the interpreter that runs the checks")
    parser.add_argument("--combine", type=Path, nargs="+", help="merge these results' checks")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"cpu|cuda(:\d+)?", args.device):
        parser.error(f"--device must be cuda, cuda:N or cpu, not {args.device!r}")
    dry = args.device == "cpu"
    out = args.out or (DRY_OUT if dry else DEFAULT_OUT)
    if args.combine:
        missing = [str(p) for p in args.combine if not p.is_file()]
        if missing:
            parser.error(f"no such file: {', '.join(missing)}")
        return combine(args.combine, out)
    names = [n for n in args.only.split(",") if n] or list(NAMES)
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        parser.error(f"unknown check(s) {', '.join(unknown)}: choose from {', '.join(NAMES)}")
    python = choose_python(args.python)
    environment = probe(python)
    if not dry and environment["gpu"] is None:
        parser.error(
            f"torch {environment['torch']} sees no CUDA GPU here: run with --device cpu for the "
            "dry run"
        )
    environment.update(
        date=datetime.date.today().isoformat(), device=args.device, dry_run=dry, checks_run=names
    )
    checks: dict[str, dict[str, Any]] = {}
    log: list[str] = []
    with tempfile.TemporaryDirectory(prefix="barnraise-gpu-check-") as tmp:
        for check in CHECKS:
            if check.name not in names:
                continue
            print(f"gpu-check: {check.name}: {check.what} ...", flush=True)
            entry = run_check(check, python, args.device, dry, Path(tmp))
            checks[check.name] = entry
            print(f"gpu-check: {check.name}: {entry.get('error', 'done')} ({entry['seconds']} s)")
            tail = entry.pop("output_tail")
            log.append(f"===== {check.name}: {entry['command']}\n{tail}\n")
            if "error" in entry:
                entry["output_tail"] = tail[-1500:]
    result = report(environment, checks)
    path = write(result, out, "".join(log))
    print(markdown(result))
    print(f"wrote {path}")
    return 1 if result["crashed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
