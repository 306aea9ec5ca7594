"""The collaboration's loss curve through the control API: the peer's ``PeerMetrics`` events become
``CollaborationEpoch`` events and ``history()`` points, its ``PeerEvaluation`` events (the backbone's
held-out figures) ``HeldOutMeasured`` events and ``history().held_out``, both kept in the ledger
across restarts, and ``barnraise ctl history`` prints them. (A real peer producing them:
``test_engine_swarm``.)"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from core.account import CredentialStore
from core.api import (
    AttachRequest,
    CollaborationEpoch,
    EngineClient,
    EpochPoint,
    ErrorRaised,
    HeldOutMeasured,
    HeldOutPoint,
    TrainingHistory,
)
from core.control import EngineDaemon
from core.engine import EngineConfig
from core.scheduler import ScriptedIdleSensor
from core.stats import Ledger
from core.worker.events import PeerEvaluation, PeerEvent, PeerMetrics
from tests.account.memory_keyring import MemoryKeyring
from tests.support.engine import CtlRun, Running, fast_config, scripted_sampler

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo" / "project.toml"
PROJECT = "barnraise-demo"
T0 = 1_700_000_000.0


def metrics(epoch: int, loss: float | None = 5.0, **changes: Any) -> PeerMetrics:
    """A trainer peer's metrics event, as ``core.training.curve`` emits it."""
    event = PeerMetrics(
        epoch=epoch,
        loss=loss,
        samples=256 + epoch,
        samples_per_second=80.5,
        alive_peers=2,
        time=T0 + epoch,
    )
    return dataclasses.replace(event, **changes)


def evaluation(epoch: int, loss: float | None = 3.5, **changes: Any) -> PeerEvaluation:
    """The backbone's evaluation as a trainer tells it (``core.training.curve``)."""
    event = PeerEvaluation(epoch, loss, 0.4, 256, tokens=0, seconds=0.0, time=T0 + epoch)
    return dataclasses.replace(event, **changes)


def peer_events(engine: Running | EngineDaemon) -> Callable[[PeerEvent], None]:
    """Where the active project's peer hands its events (the runner's callback)."""
    daemon = engine.daemon if isinstance(engine, Running) else engine
    runner = daemon.engine.runner
    assert runner is not None
    return runner.on_event


@contextlib.asynccontextmanager
async def daemon_at(config: EngineConfig) -> AsyncIterator[tuple[EngineDaemon, EngineClient]]:
    daemon = await EngineDaemon.open(
        config,
        sampler=scripted_sampler(ScriptedIdleSensor(idle_seconds=3600.0)),
        credentials=CredentialStore(MemoryKeyring()),
    )
    client = EngineClient(daemon.endpoint)
    try:
        yield daemon, client
    finally:
        await client.close()
        await daemon.stop()


async def test_metrics_become_points_and_events_oldest_first(engine: Running) -> None:
    client = engine.client
    assert await client.history() == TrainingHistory(None, [])
    received: list[CollaborationEpoch] = []

    async def follow() -> None:
        async for event in client.events(since=0):
            if isinstance(event.data, CollaborationEpoch):
                received.append(event.data)
                if len(received) == 3:
                    return

    follower = asyncio.create_task(follow())
    await client.attach(AttachRequest(str(DEMO)))
    assert await client.history() == TrainingHistory(PROJECT, [])
    feed = peer_events(engine)
    feed(metrics(0, 8.5))
    feed(metrics(1, math.nan))  # a diverged epoch: its loss is unknown, the epoch still counts
    feed(metrics(1, 7.0))  # the same epoch again (a rebuilt peer): dropped
    feed(metrics(2, 6.0, samples_per_second=-1.0))  # impossible: ignored, nothing else breaks
    feed(metrics(2, 6.0, time=math.inf))
    feed(metrics(2, 6.0, alive_peers=-1))
    feed(metrics(2, 6.25))
    await asyncio.wait_for(follower, 10)

    history = await client.history()
    assert history.project == PROJECT
    assert [(p.epoch, p.loss) for p in history.points] == [(0, 8.5), (1, None), (2, 6.25)]
    assert history.points[0] == EpochPoint(0, T0, 8.5, 256, 80.5, 2)
    assert [e.point for e in received] == history.points
    assert {e.project for e in received} == {PROJECT}

    await client.detach(PROJECT)
    assert await client.history() == TrainingHistory(None, [])


async def test_evaluations_become_held_out_points_and_events(engine: Running) -> None:
    client = engine.client
    await client.attach(AttachRequest(str(DEMO)))
    feed = peer_events(engine)
    feed(metrics(0, 8.5))
    feed(evaluation(1, 7.25))  # seen before its epoch completes
    feed(evaluation(1, 7.0))  # the same epoch again (a rebuilt peer): dropped
    feed(evaluation(2, 6.0, accuracy=1.5))  # impossible: ignored
    feed(evaluation(2, 6.0, time=math.nan))
    feed(evaluation(3, math.inf, accuracy=0.25))  # a diverged model: its loss is unknown
    history = await client.history()
    assert history.points == [EpochPoint(0, T0, 8.5, 256, 80.5, 2)]
    assert history.held_out == [
        HeldOutPoint(1, T0 + 1, 7.25, 0.4, 256),
        HeldOutPoint(3, T0 + 3, None, 0.25, 256),
    ]
    events = engine.daemon.engine.events.recent()
    published = [e.data for e in events if isinstance(e.data, HeldOutMeasured)]
    assert published == [HeldOutMeasured(PROJECT, p) for p in history.held_out]


async def test_an_evaluations_floor_is_kept_across_a_restart(tmp_path: Path) -> None:
    config = fast_config(tmp_path / "home")
    async with daemon_at(config) as (daemon, client):
        await client.attach(AttachRequest(str(DEMO)))
        feed = peer_events(daemon)
        feed(evaluation(1, 6.5, floor=6.25))
        feed(evaluation(2, 6.0, floor=math.inf))  # not finite: as unknown as none
        feed(evaluation(3, 5.5))  # an older backbone reports none
        expected = [
            HeldOutPoint(1, T0 + 1, 6.5, 0.4, 256, 6.25),
            HeldOutPoint(2, T0 + 2, 6.0, 0.4, 256, None),
            HeldOutPoint(3, T0 + 3, 5.5, 0.4, 256, None),
        ]
        assert (await client.history()).held_out == expected
        events = daemon.engine.events.recent()
        told = [e.data.point for e in events if isinstance(e.data, HeldOutMeasured)]
        assert told == expected
    async with daemon_at(config) as (daemon, client):
        assert (await client.history()).held_out == expected


async def test_the_curve_survives_a_restart_and_a_repeated_epoch_is_dropped(
    tmp_path: Path,
) -> None:
    config = fast_config(tmp_path / "home")
    async with daemon_at(config) as (daemon, client):
        await client.attach(AttachRequest(str(DEMO)))
        feed = peer_events(daemon)
        feed(metrics(4, 6.0))
        feed(metrics(5, 5.5))
        feed(evaluation(5, 5.0))
        assert [p.epoch for p in (await client.history()).points] == [4, 5]

    async with daemon_at(config) as (daemon, client):
        assert [p.epoch for p in (await client.history()).points] == [4, 5]
        assert (await client.history()).held_out == [HeldOutPoint(5, T0 + 5, 5.0, 0.4, 256)]
        feed = peer_events(daemon)
        feed(evaluation(5, 5.0))  # and the newest evaluation it sees: known too
        feed(metrics(5, 5.5))  # the new peer reports the last epoch it finds complete: known
        feed(metrics(6, 5.25))
        feed(metrics(0, 8.0))  # the collaboration was started afresh: a new run of the curve
        points = (await client.history()).points
        assert [(p.epoch, p.loss) for p in points] == [(4, 6.0), (5, 5.5), (6, 5.25), (0, 8.0)]
        events = daemon.engine.events.recent()
        published = [e.data.point.epoch for e in events if isinstance(e.data, CollaborationEpoch)]
        assert published == [6, 0]

    with Ledger(config.ledger_file) as ledger:
        assert [r.epoch for r in ledger.epochs(PROJECT)] == [4, 5, 6, 0]
        assert [r.epoch for r in ledger.held_out(PROJECT)] == [5]


async def test_a_ledger_that_cannot_be_written_loses_no_point_and_says_so(
    engine: Running,
) -> None:
    await engine.client.attach(AttachRequest(str(DEMO)))
    engine.daemon.engine.ledger.close()  # stands in for a disk that refuses writes
    peer_events(engine)(metrics(3, 4.0))
    assert [p.epoch for p in (await engine.client.history()).points] == [3]
    errors = [
        e.data for e in engine.daemon.engine.events.recent() if isinstance(e.data, ErrorRaised)
    ]
    assert errors
    assert errors[-1].where == "ledger"
    assert "closed" in errors[-1].message


async def test_ctl_history_prints_the_curve(engine: Running, ctl_run: CtlRun) -> None:
    assert "no project is attached" in await ctl_run("history")
    await engine.client.attach(AttachRequest(str(DEMO)))
    assert f"{PROJECT}: no completed epoch seen yet" in await ctl_run("history")
    feed = peer_events(engine)
    for epoch in range(25):
        feed(metrics(epoch, None if epoch == 24 else 9.0 - epoch / 10))
    out = (await ctl_run("history")).splitlines()
    assert out[0] == f"{PROJECT}: 25 epoch(s) seen, the last 20 shown (--json for all)"
    rows = [line.split() for line in out[2:]]
    assert [int(r[0]) for r in rows] == list(range(5, 25))
    assert rows[0][1] == "8.5000"
    assert rows[-1][1] == "-"  # no loss known
    as_json = json.loads(await ctl_run("--json", "history"))
    assert as_json["project"] == PROJECT
    assert len(as_json["points"]) == 25
    assert as_json["points"][-1]["loss"] is None
    assert as_json["held_out"] == []


async def test_ctl_history_prints_the_held_out_figures_where_measured(
    engine: Running, ctl_run: CtlRun
) -> None:
    await engine.client.attach(AttachRequest(str(DEMO)))
    feed = peer_events(engine)
    feed(evaluation(0, 9.5, accuracy=0.05))  # measured before any epoch completed
    assert (await ctl_run("history")).splitlines() == [
        f"{PROJECT}: no completed epoch seen yet",
        (
            "held-out text, measured by the backbone at epoch 0: loss 9.5000, accuracy 5.0 % "
            "(256 sequences)"
        ),
    ]
    for epoch in range(4):
        feed(metrics(epoch, 8.0 - epoch))
    feed(evaluation(2, 6.5, accuracy=0.125))
    feed(evaluation(4, None, accuracy=0.25))
    out = (await ctl_run("history")).splitlines()
    assert out[1].split() == [
        "epoch", "loss", "held-out", "accuracy", "samples", "samples/s", "peers", "time",
    ]  # fmt: skip
    rows = {int(line.split()[0]): line for line in out[2:6]}
    assert rows[0].split()[1:4] == ["8.0000", "9.5000", "5.0"]
    assert rows[1].split()[1:3] == ["7.0000", "257"]  # not evaluated: blank
    assert rows[2].split()[1:4] == ["6.0000", "6.5000", "12.5"]
    assert len(rows[1]) == len(rows[2])  # the blank keeps the columns in place
    assert out[6] == (
        "held-out text, measured by the backbone at epoch 4: loss -, accuracy 25.0 % "
        "(256 sequences)"
    )
    as_json = json.loads(await ctl_run("--json", "history"))
    assert [e["epoch"] for e in as_json["held_out"]] == [0, 2, 4]
    assert as_json["held_out"][-1]["loss"] is None


async def test_ctl_history_prints_the_floor_beside_the_held_out_loss(
    engine: Running, ctl_run: CtlRun
) -> None:
    await engine.client.attach(AttachRequest(str(DEMO)))
    feed = peer_events(engine)
    for epoch in range(3):
        feed(metrics(epoch, 8.0 - epoch))
    feed(evaluation(0, 8.25, accuracy=0.05))  # an older backbone's: no floor
    feed(evaluation(2, 5.7312, accuracy=0.125, floor=6.2412))
    out = (await ctl_run("history")).splitlines()
    assert out[1].split() == [
        "epoch", "loss", "held-out", "accuracy", "floor", "samples", "samples/s", "peers", "time",
    ]  # fmt: skip
    rows = {int(line.split()[0]): line for line in out[2:5]}
    assert rows[2].split()[1:5] == ["6.0000", "5.7312", "12.5", "%"]
    assert rows[2].split()[5] == "6.24"
    assert rows[0].split()[1:5] == ["8.0000", "8.2500", "5.0", "%"]
    assert rows[0].split()[5] == "256"  # no floor: blank, the samples next
    assert len(rows[0]) == len(rows[1]) == len(rows[2])  # blanks keep the columns in place
    assert out[5:] == [
        (
            "held-out text, measured by the backbone at epoch 2: loss 5.7312 nats, 0.51 below "
            "the unigram floor (6.24), accuracy 12.5 % (256 sequences)"
        ),
        "(the unigram floor: the loss of a model that only counts words)",
    ]
    as_json = json.loads(await ctl_run("--json", "history"))
    assert [e["floor"] for e in as_json["held_out"]] == [None, 6.2412]
