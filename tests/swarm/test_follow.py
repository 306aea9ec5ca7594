"""SwarmFollower on its own (callbacks, no engine): the account follows each new run of the followed
project's swarm, a peer on a run that stopped or was replaced is rebuilt, and one failing look does
not end the following. The swarms are records naming this test process (which is alive)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.config.paths import UserDirs
from core.swarm import LocalSwarm, LocalSwarms, SwarmFollower, SwarmProcess, write_swarm
from core.swarm.record import remove_swarm
from tests.support.leaks import wait_until


@dataclass
class Peer:
    project: str
    swarm: LocalSwarm | None


class Recorder:
    """The engine's side: what is followed, which peer runs, and what the follower asked for."""

    def __init__(self) -> None:
        self.followed: str | None = "demo"
        self.peer: Peer | None = None
        self.accounts = 0
        self.rebuilt: list[Peer] = []

    async def follow_account(self) -> None:
        self.accounts += 1

    async def rebuild(self, peer: Peer) -> None:
        self.rebuilt.append(peer)


def run_of(project: str = "demo", *, started: float = 1_700_000_000.0) -> LocalSwarm:
    return LocalSwarm(
        project=project,
        description="a demo",
        manifest=Path("/somewhere/project.toml"),
        initial_peers=("/ip4/127.0.0.1/tcp/4100/p2p/12D3KooWExample",),
        data_base="http://127.0.0.1:4101/",
        pids=(SwarmProcess.of(os.getpid()),),
        moderated=True,
        started=started,
    )


def follower(swarms: LocalSwarms, engine: Recorder, interval: float = 60.0) -> SwarmFollower[Peer]:
    return SwarmFollower(
        swarms,
        interval=interval,
        followed=lambda: engine.followed,
        peer=lambda: engine.peer,
        joined=lambda peer: (peer.project, peer.swarm),
        follow_account=engine.follow_account,
        rebuild=engine.rebuild,
    )


@pytest.fixture
def dirs(tmp_path: Path) -> UserDirs:
    return UserDirs.under(tmp_path / "home")


async def test_the_account_follows_each_new_run_of_the_followed_swarm(dirs: UserDirs) -> None:
    engine = Recorder()
    look = follower(LocalSwarms(dirs), engine).look
    await look()
    assert engine.accounts == 0  # no swarm runs
    first = run_of()
    write_swarm(dirs, first)
    await look()
    assert engine.accounts == 1
    await look()
    assert engine.accounts == 1  # the same run: its coordinator has not moved
    write_swarm(dirs, dataclasses.replace(first, started=first.started + 60))
    await look()
    assert engine.accounts == 2  # a new run, a new coordinator
    write_swarm(dirs, run_of("other"))
    engine.followed = None  # the active project joins no local swarm
    await look()
    assert engine.accounts == 2
    assert engine.rebuilt == []  # no peer runs


async def test_a_peer_on_a_run_that_was_replaced_or_stopped_is_rebuilt(dirs: UserDirs) -> None:
    engine = Recorder()
    look = follower(LocalSwarms(dirs), engine).look
    first = run_of()
    write_swarm(dirs, first)
    engine.peer = Peer("demo", first)
    await look()
    assert engine.rebuilt == []  # it runs on the current run
    second = dataclasses.replace(first, started=first.started + 60)
    write_swarm(dirs, second)
    await look()
    assert engine.rebuilt == [Peer("demo", first)]
    engine.peer = Peer("demo", second)  # rebuilt against the new run
    await look()
    assert len(engine.rebuilt) == 1
    remove_swarm(dirs, second)  # the swarm stops
    await look()
    assert engine.rebuilt[1:] == [Peer("demo", second)]
    engine.peer = Peer("demo", None)  # a peer that joined no local swarm is left alone
    await look()
    assert len(engine.rebuilt) == 2


async def test_one_failing_look_does_not_end_the_following(
    dirs: UserDirs, caplog: pytest.LogCaptureFixture
) -> None:
    engine = Recorder()
    failures = 0

    async def failing_account() -> None:
        nonlocal failures
        failures += 1
        raise RuntimeError("the coordinator is not there yet")

    write_swarm(dirs, run_of())
    swarms = LocalSwarms(dirs)
    following = SwarmFollower(
        swarms,
        interval=0.01,
        followed=lambda: engine.followed,
        peer=lambda: engine.peer,
        joined=lambda peer: (peer.project, peer.swarm),
        follow_account=failing_account,
        rebuild=engine.rebuild,
    )
    task = asyncio.create_task(following.run(), name="test/follower")
    try:
        with caplog.at_level(logging.ERROR, logger="core.swarm.follow"):
            await wait_until(lambda: failures >= 2, timeout=30)  # the run is retried every look
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert any("following the local demo swarms failed" in r.getMessage() for r in caplog.records)
