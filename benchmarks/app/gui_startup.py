"""Launch to window shown, for the desktop app with the engine already running (goal: under 2 s).

    python -m benchmarks.app.gui_startup --json out.json [--trials 5] [--via python|barnraise]

Starts a real ``barnraise engine`` in a temporary home with the demo project attached (as after the
first run), then launches the app ``--trials`` times, each a fresh process: ``python -m app``, or
the ``barnraise`` command with no arguments (which hands over to the app). The app appends the
moments its window was first shown and the engine's state was first on screen to a probe file
(``BARNRAISE_STARTUP_PROBE``); the clock starts just before the process is created. Each app is
killed after that, so the engine keeps running for the next trial, as on a real desktop.

``window_shown_s`` is the median over trials (``max`` beside it); the first trial runs with colder
caches than the rest. Offscreen unless ``QT_QPA_PLATFORM``/``DISPLAY`` point somewhere else.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from app.instance import remove_stale
from benchmarks.kit.harness import ROOT, emit
from core.api import AttachRequest, EngineClient, endpoint_path
from core.config.paths import UserDirs


def launch_command(via: str) -> list[str]:
    if via == "barnraise":
        script = shutil.which("barnraise", path=str(Path(sys.executable).parent))
        if script is None:
            raise SystemExit(
                "no 'barnraise' command beside this Python; run packaging/dev.py setup"
            )
        return [script]
    return [sys.executable, "-m", "app"]


def one_launch(
    command: list[str], env: dict[str, str], probe: Path, timeout: float
) -> dict[str, Any]:
    probe.unlink(missing_ok=True)
    started = time.time()
    proc = subprocess.Popen(
        command, env=env | {"BARNRAISE_STARTUP_PROBE": str(probe)}, cwd=ROOT,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    moments: dict[str, float] = {}
    deadline = started + timeout
    try:
        while time.time() < deadline and len(moments) < 2:
            if proc.poll() is not None:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise RuntimeError(f"the app exited with {proc.returncode}: {err[-800:]}")
            if probe.exists():
                for line in probe.read_text().splitlines():
                    entry = json.loads(line)
                    moments[entry["event"]] = entry["time"] - started
            time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL if hasattr(signal, "SIGKILL") else signal.SIGTERM)
        proc.wait()
    if "window_shown" not in moments:
        raise RuntimeError(f"the window was not shown within {timeout:.0f} s")
    return {
        "window_shown_s": round(moments["window_shown"], 3),
        "state_shown_s": round(moments["state_shown"], 3) if "state_shown" in moments else None,
    }


def start_engine(env: dict[str, str], home: Path) -> subprocess.Popen[bytes]:
    """A real engine in ``home``, with the demo project attached (as after the first run)."""
    home.mkdir(parents=True, exist_ok=True)
    with (home / "engine-console.log").open("ab") as log:
        engine = subprocess.Popen(
            [sys.executable, "-m", "core.cli.main", "engine"], env=env, cwd=ROOT,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        asyncio.run(attach_demo(home, engine))
    except BaseException:
        engine.kill()
        engine.wait()
        raise
    return engine


async def attach_demo(home: Path, engine: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    manifest = str(ROOT / "resources" / "demo" / "project.toml")
    while True:
        try:
            async with EngineClient.discover(UserDirs.under(home)) as client:
                await client.state()
                await client.attach(AttachRequest(manifest))
                return
        except Exception:
            if time.monotonic() > deadline or engine.poll() is not None:
                raise
            await asyncio.sleep(0.2)


async def stop_engine(home: Path, engine: subprocess.Popen[bytes]) -> None:
    try:
        async with EngineClient.discover(UserDirs.under(home)) as client:
            await client.shutdown()
        await asyncio.to_thread(engine.wait, 20)
    except Exception:
        engine.kill()
        engine.wait()


def measure(trials: int, via: str, timeout: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="barnraise-gui-") as tmp:
        home = Path(tmp) / "home"
        env = dict(os.environ, BARNRAISE_HOME=str(home))
        if not env.get("DISPLAY") and not env.get("WAYLAND_DISPLAY"):
            env.setdefault("QT_QPA_PLATFORM", "offscreen")
        engine = start_engine(env, home)
        try:
            runs = [
                one_launch(launch_command(via), env, Path(tmp) / "probe.jsonl", timeout)
                for _ in range(trials)
            ]
        finally:
            asyncio.run(stop_engine(home, engine))
            # each app was killed, so the last one's single-instance socket is still there
            remove_stale(str(endpoint_path(UserDirs.under(home))))
    shown = [r["window_shown_s"] for r in runs]
    states = [r["state_shown_s"] for r in runs if r["state_shown_s"] is not None]
    return {
        "benchmark": "gui_startup",
        "via": via,
        "platform": env.get("QT_QPA_PLATFORM") or "display",
        "trials": runs,
        "window_shown_s": round(statistics.median(shown), 3),
        "window_shown_max_s": round(max(shown), 3),
        "state_shown_s": round(statistics.median(states), 3) if states else None,
        "goal_s": 2.0,
        "goal_met": max(shown) < 2.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--via", choices=("python", "barnraise"), default="barnraise")
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    emit(measure(args.trials, args.via, args.timeout), args.json)


if __name__ == "__main__":
    main()
