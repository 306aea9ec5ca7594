"""A paused engine's CPU use: it must stay quiet (goal: under 1% of one core on average).

    python -m benchmarks.app.engine_idle --seconds 60 --json out.json

Starts a demo swarm backbone (``barnraise swarm --peers 0``: a backbone and a shard server)
and a real ``barnraise engine`` process (desktop mode: it polls the keyboard/mouse sensor), both in a
temporary home. Two phases, each measured over ``--seconds`` from the engine process's CPU time:

- ``never_started``: a project attached, contribution not turned on (the first-run state);
- ``paused_after_training``: the engine trained with the swarm for a while, then the user paused it
  (its peer stays in memory, connected to the swarm, ready to resume).

``cpu_percent`` is the larger of the two, in percent of one core. ``sensor_read_ms`` is what one
reading of the system sensor (CPU, memory, battery) costs in this process; the engine takes one every
scheduler tick (goal: under 5 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from benchmarks.kit.harness import ROOT, emit
from core.api import AttachRequest, EngineClient
from core.config.paths import UserDirs
from core.scheduler import SystemSensor


async def spawn(args: list[str], env: dict[str, str], log: Path) -> asyncio.subprocess.Process:
    with log.open("ab") as stderr:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "core.cli.main", *args,
            stdout=asyncio.subprocess.PIPE, stderr=stderr, cwd=ROOT, env=env,
        )  # fmt: skip


async def line_starting(proc: asyncio.subprocess.Process, prefix: str) -> str:
    assert proc.stdout is not None
    while line := await asyncio.wait_for(proc.stdout.readline(), 180):
        text = line.decode().strip()
        if text.startswith(prefix):
            return text
    raise RuntimeError(f"the process ended before printing {prefix!r}")


def cpu_percent(pid: int, seconds: float) -> float:
    proc = psutil.Process(pid)
    before, started = proc.cpu_times(), time.monotonic()
    time.sleep(seconds)
    after, wall = proc.cpu_times(), time.monotonic() - started
    used = (after.user - before.user) + (after.system - before.system)
    return 100.0 * used / wall


def sensor_read_ms(reads: int = 50) -> float:
    sensor = SystemSensor()
    sensor.read()  # the first reading sets up the counters
    started = time.perf_counter()
    for _ in range(reads):
        sensor.read()
    return 1000.0 * (time.perf_counter() - started) / reads


async def stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def measure(seconds: float, home: Path, data: Path | None = None) -> dict[str, Any]:
    env = os.environ | {"BARNRAISE_HOME": str(home), "BARNRAISE_SWARM_LOG_LEVEL": "warning"}
    where: list[str] = []
    if data is not None:  # the demo's data made already: the swarm checks and keeps it
        work = home / "swarm-work"
        work.mkdir(parents=True)
        (work / "data").symlink_to(data, target_is_directory=True)
        where = ["--work-dir", str(work)]
    swarm = await spawn(["swarm", "--peers", "0", *where], env, home / "swarm.log")
    engine = None
    try:
        join = (await line_starting(swarm, "join with:")).split()
        address = join[join.index("--initial-peers") + 1]
        base = join[join.index("--data-base") + 1]
        engine = await spawn(["engine"], env, home / "engine.log")
        await line_starting(engine, "engine ready")
        async with EngineClient.discover(UserDirs.under(home)) as client:
            manifest = str(ROOT / "resources" / "demo" / "project.toml")
            await client.attach(AttachRequest(manifest, [address], base))
            await asyncio.sleep(2)
            never = await asyncio.to_thread(cpu_percent, engine.pid, seconds)
            print(f"never started: {never:.2f}% of one core", flush=True)
            await client.set_settings({"max_other_cpu_percent": 100})
            await client.start()
            deadline = time.monotonic() + 180
            while (await client.state()).progress.session_samples < 500:
                if time.monotonic() > deadline:
                    raise RuntimeError("the engine did not train")
                await asyncio.sleep(0.5)
            paused = await client.pause()
            assert paused.state == "paused", paused
            # let the last round, the progress record and the meter (read every 2 s) settle
            await asyncio.sleep(3)
            trained = (await client.state()).progress.session_samples
            after = await asyncio.to_thread(cpu_percent, engine.pid, seconds)
            print(f"paused after training: {after:.2f}% of one core", flush=True)
            samples_while_paused = (await client.state()).progress.session_samples - trained
            await client.shutdown()
        await asyncio.wait_for(engine.wait(), 20)
    finally:
        if engine is not None:
            await stop(engine)
        await stop(swarm)
    return {
        "benchmark": "engine_idle",
        "seconds": seconds,
        "cpu_percent": round(max(never, after), 3),
        "phases": {
            "never_started": round(never, 3),
            "paused_after_training": round(after, 3),
        },
        "samples_trained_before_pause": trained,
        "samples_while_paused": samples_while_paused,
        "unit": "percent of one core",
        "goal_percent": 1.0,
        "sensor_read_ms": round(sensor_read_ms(), 3),
        "sensor_read_goal_ms": 5.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--data", type=Path, help="the demo's shards and tokenizer, made already")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="barnraise-idle-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        data = args.data.resolve() if args.data is not None else None
        result = asyncio.run(measure(args.seconds, home, data))
    emit(result, args.json)


if __name__ == "__main__":
    main()
