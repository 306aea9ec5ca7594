"""Pause latency: from the user's input to training stopped and the device's memory released.

    python -m benchmarks.gpu.pause_latency --trials 20 --json out.json [--device cuda]

Runs a real engine (scheduler, control server, project peer) in this process, attached to a demo
swarm whose backbone (a backbone and a shard server) also runs here; the engine's peer is the
only trainer. The keyboard/mouse sensor is scripted: each trial lets the engine train for a random
0.3 to 1.2 s, then "the user touches the mouse". The time measured ends when the engine reports the
pause, which it does only after the current microbatch was dropped, gradients freed, tensors moved
off an accelerator and its cache emptied. Each trial also checks that no microbatch finished after
that moment and that no gradient is left. The typical microbatch time is printed for scale. On a
GPU it also reads what torch's allocator still holds once the pause is reported (the goal is
nothing: the volunteer's own programs get the memory back), and every trial but the first times the
resume, from "the user went away" to the first microbatch computed again.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.kit.harness import emit
from core.api import AttachRequest, StateChanged
from core.config.paths import UserDirs
from core.control import EngineDaemon
from core.data import ShardServer
from core.engine import EngineConfig
from core.project import load_manifest
from core.scheduler import ConditionSampler, GpuSensor, ScriptedIdleSensor, SystemSensor
from core.swarm.demo_data import DEMO_MANIFEST, prepare_demo_data
from core.training.peer.project_peer import PeerSettings, ProjectPeer
from core.worker.events import PeerReady

GOAL_MS = 1000.0


async def _until(check: Any, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("the engine did not get there in time")
        await asyncio.sleep(0.01)


async def measure(trials: int, device: str, root: Path) -> dict[str, Any]:
    data = root / "data"
    await asyncio.to_thread(prepare_demo_data, load_manifest(DEMO_MANIFEST), data)
    server = ShardServer(data)
    base = await server.start()
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    aux = ProjectPeer(
        PeerSettings(
            load_manifest(DEMO_MANIFEST),
            work_dir=root / "backbone",
            role="backbone",
            data_base=base,
        ),
        lambda e: ready.done() or not isinstance(e, PeerReady) or ready.set_result(e.address),
    )
    stop = asyncio.Event()
    aux_task = asyncio.create_task(aux.run(stop), name="bench/aux")
    idle = ScriptedIdleSensor(idle_seconds=3600.0)
    sampler = ConditionSampler(idle, SystemSensor(), GpuSensor(), headless=False)
    config = EngineConfig(UserDirs.under(root / "home"))
    daemon: EngineDaemon | None = None
    latencies: list[float] = []
    microbatch: list[float] = []
    late_microbatches = 0
    resumes: list[float] = []
    held: list[int] = []
    reserved: list[int] = []
    cuda = device.startswith("cuda")
    grads_left = 0
    try:
        address = await asyncio.wait_for(asyncio.shield(ready), 120)
        daemon = await EngineDaemon.open(config, sampler=sampler)
        engine = daemon.engine
        await engine.attach(AttachRequest(str(DEMO_MANIFEST), [address], base, device))
        await engine.set_settings(
            {"max_other_cpu_percent": 100, "cpu_when_in_use": "pause", "contribute": True}
        )
        subscription = engine.events.subscribe()

        def trainer() -> Any:
            runner = engine.runner
            peer = runner.peer if runner is not None else None
            return peer.trainer if peer is not None else None

        for trial in range(trials):
            idle.set_idle(3600.0)  # the user is away: training resumes
            away = time.monotonic()
            await _until(lambda: engine.state().state == "running" and trainer() is not None)
            t = trainer()
            before = t.microbatches
            await _until(lambda t=t, before=before: t.microbatches >= before + 1)
            if trial > 0:  # the first start builds the peer: not a resume
                resumes.append((time.monotonic() - away) * 1000)
            await _until(lambda t=t, before=before: t.microbatches >= before + 2)
            computed = t.compute_seconds / max(1, t.microbatches)
            await asyncio.sleep(random.uniform(0.3, 1.2))
            while not subscription.queue.empty():
                subscription.queue.get_nowait()
            idle.user_input()
            touched = time.time()
            while True:
                event = await asyncio.wait_for(subscription.next(), 10)
                assert event is not None
                if isinstance(event.data, StateChanged) and event.data.state == "waiting":
                    break
            latency = event.time - touched
            if cuda:  # what this process still holds on the GPU once the pause is reported
                held.append(torch.cuda.memory_allocated())
                reserved.append(torch.cuda.memory_reserved())
            count = t.microbatches
            await asyncio.sleep(0.3)
            late_microbatches += t.microbatches - count
            grads_left += sum(1 for p in t.model.parameters() if p.grad is not None)
            latencies.append(latency * 1000)
            microbatch.append(computed * 1000)
            print(
                f"trial {trial + 1}: {latency * 1000:.1f} ms (microbatch ~{computed * 1000:.0f} ms)"
            )
        subscription.close()
    finally:
        if daemon is not None:
            await daemon.stop()
        stop.set()
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(aux_task, 10)
        await aux.close()
        await server.close()
    ordered = sorted(latencies)
    p99 = percentile(ordered, 0.99)
    most_reserved = max(reserved) if reserved else None
    return {
        "benchmark": "pause_latency",
        "device": device,
        "gpu": torch.cuda.get_device_name(torch.device(device)) if cuda else None,
        "torch": torch.__version__,
        "trials": trials,
        "pause_latency_ms": {
            "p50": round(statistics.median(ordered), 1),
            "p90": round(percentile(ordered, 0.9), 1),
            "p99": round(p99, 1),
            "max": round(ordered[-1], 1),
            "all": [round(x, 1) for x in latencies],
        },
        "resume_to_first_microbatch_ms": {
            "p50": round(statistics.median(resumes), 1) if resumes else None,
            "max": round(max(resumes), 1) if resumes else None,
            "all": [round(x, 1) for x in resumes],
        },
        "gpu_bytes_after_pause": {
            "allocated_max": max(held) if held else None,
            "reserved_max": most_reserved,
        },
        "goals": {
            "pause_p99_ms": {"value": round(p99, 1), "goal": GOAL_MS, "met": p99 < GOAL_MS},
            "gpu_memory_returned": {
                "value": most_reserved,
                "goal": 0,
                "met": None if most_reserved is None else most_reserved == 0,
                "note": "bytes torch's allocator still reserved in this process after a pause "
                "(the CUDA context itself stays, as long as the engine runs)",
            },
        },
        "microbatch_ms_median": round(statistics.median(microbatch), 1),
        "scheduler_tick_ms": round(config.tick_computing * 1000, 1),
        "microbatches_finished_after_pause": late_microbatches,
        "gradients_left_after_pause": grads_left,
    }


def percentile(ordered: list[float], q: float) -> float:
    """The nearest-rank ``q`` percentile of an ascending list (with 20 trials, p99 is the worst)."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="barnraise-pause-") as tmp:
        result = asyncio.run(measure(args.trials, args.device, Path(tmp)))
    emit(result, args.json)


if __name__ == "__main__":
    main()
