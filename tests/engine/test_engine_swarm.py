"""An engine attached to a demo swarm, driven only through the control API.

The swarm is a backbone (the backbone) in this process, with the demo's shards served over
local HTTP; the engine's own peer is the only trainer. Pause stops the counting, resume continues it,
the collaboration's completed epochs arrive as ``CollaborationEpoch`` events and in ``history()``,
a snooze ends by itself, and the user touching the keyboard pauses training at the next scheduler
tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from core.api import (
    AttachRequest,
    CollaborationEpoch,
    EngineClient,
    EpochPoint,
    TrainingHistory,
)
from core.data import ShardServer
from core.project import load_manifest
from core.swarm.demo_data import DEMO_MANIFEST
from core.training.peer.project_peer import PeerSettings, ProjectPeer
from core.worker.events import PeerEvent, PeerReady
from tests.support.engine import Running, until
from tests.support.leaks import poll_until, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
async def backbone(demo_data: Path, tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    """(backbone address, shard server URL)"""
    server = ShardServer(demo_data)
    base = await server.start()
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def on_event(event: PeerEvent) -> None:
        if isinstance(event, PeerReady) and not ready.done():
            ready.set_result(event.address)

    settings = PeerSettings(
        load_manifest(DEMO_MANIFEST), work_dir=tmp_path / "aux", role="backbone", data_base=base
    )
    aux = ProjectPeer(settings, on_event)
    stop = asyncio.Event()
    task = asyncio.create_task(aux.run(stop), name="test/aux")
    try:
        address = await asyncio.wait_for(asyncio.shield(ready), 60)
        yield address, base
    finally:
        stop.set()
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        await aux.close()
        await server.close()


async def test_engine_under_api_control_counts_only_while_running(
    engine: Running, backbone: tuple[str, str]
) -> None:
    address, base = backbone
    client = engine.client
    curve: list[CollaborationEpoch] = []

    async def follow() -> None:
        async for event in client.events(since=0):
            if isinstance(event.data, CollaborationEpoch):
                curve.append(event.data)

    follower = asyncio.create_task(follow(), name="test/events")
    try:
        await _drive(engine, address, base, curve)
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower


async def _drive(engine: Running, address: str, base: str, curve: list[CollaborationEpoch]) -> None:
    client = engine.client
    await client.attach(AttachRequest(str(DEMO_MANIFEST), [address], base))
    await client.set_settings({"max_other_cpu_percent": 100, "cpu_when_in_use": "pause"})
    assert (await client.state()).state == "paused"  # not opted in yet: nothing runs

    await client.start()
    running = await until(client, lambda s: s.progress.session_samples > 0, timeout=120)
    assert running.state == "running"
    assert running.code == "running"

    # pause: training stops, no more samples are counted
    paused = await client.pause()
    assert (paused.state, paused.code) == ("paused", "user_paused")
    frozen = (await client.statistics(days=1)).totals.samples
    session = (await client.state()).progress.session_samples
    assert frozen == session > 0
    # an observation window, not a wait: a trainer that went on would count samples during it (a
    # busy machine can only make this check less sharp, never make it fail)
    await asyncio.sleep(1.5)
    assert (await client.statistics(days=1)).totals.samples == frozen
    assert (await client.state()).progress.session_samples == session

    # resume: counting continues where it stopped
    await client.resume()
    await until(client, lambda s: s.progress.session_samples > session + 16)

    # the collaboration completes epochs (256 samples each): each is a point of the loss curve,
    # published as an event and kept in the history
    point = await _first_finite_point(client)
    assert point.samples >= 256  # the engine's peer is the only trainer: it did them all
    await wait_until(lambda: any(e.point == point for e in curve))
    assert all(e.project == "barnraise-demo" for e in curve)

    # a snooze ends by itself
    snoozed = await client.snooze(0.03)
    assert snoozed.code == "snoozed"
    during = (await client.statistics(days=1)).totals.samples
    await until(client, lambda s: s.state == "running")
    assert (await client.statistics(days=1)).totals.samples >= during
    await until(client, lambda s: s.progress.session_samples > during + 16)

    # the user returns: the first scheduler tick that sees the input pauses training (counted in
    # ticks, not seconds: how long a pause takes is benchmarks/gpu/pause_latency.py's to measure)
    ticks: list[tuple[float | None, str]] = []  # (idle seconds sampled, state before that tick)
    sense = engine.idle.idle_seconds

    def sensing() -> float | None:
        idle = sense()
        ticks.append((idle, engine.daemon.engine.state().state))
        return idle

    engine.idle.idle_seconds = sensing  # type: ignore[method-assign]
    engine.idle.user_input()
    waiting = await until(client, lambda s: s.state == "waiting")
    assert waiting.reason == "Waiting: you are using the computer"

    def after_input() -> list[str]:
        return [state for idle, state in ticks if idle is not None and idle < 60]

    await wait_until(lambda: len(after_input()) >= 2)
    assert after_input()[1] == "waiting", ticks  # the first tick after the input left it waiting

    stats = await client.statistics(days=1)
    assert stats.totals.samples > 0
    assert stats.totals.compute_seconds > 0
    assert stats.totals.bytes_sent > 0
    assert stats.totals.bytes_received > 0
    assert stats.today.samples == stats.totals.samples


async def _first_finite_point(client: EngineClient) -> EpochPoint:
    def finite(history: TrainingHistory) -> list[EpochPoint]:
        assert history.project == "barnraise-demo"
        return [p for p in history.points if p.loss is not None and math.isfinite(p.loss)]

    history = await poll_until(client.history, lambda h: bool(finite(h)), timeout=150)
    return finite(history)[0]
