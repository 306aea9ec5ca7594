"""Demo swarms running on this computer, seen through the control API: offered first (with a
note), joined by a ``local_swarm`` project wherever the swarm listens this run, left when it stops,
and rejoined when it runs again. The swarms here are records written as ``barnraise swarm`` writes
them (naming this test process, which is alive); the engine's peer is a stand-in."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import os
import sys
import time
from pathlib import Path

import pytest

from core.api import AttachRequest, BadRequest, ProjectOffer
from core.engine import Engine
from core.engine.projects import SWARM_NOT_RUNNING
from core.engine.store import EngineFile
from core.net import Identity
from core.swarm import LocalSwarm, SwarmProcess, remove_swarm, write_swarm
from core.util.errors import ConfigError
from tests.account.coordinator import manifest_text
from tests.engine.standin import StandInPeer
from tests.support.engine import CtlRun, Running, fast_config, until
from tests.support.leaks import poll_until

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo" / "project.toml"
STARTED = time.time() - 120


def swarm(
    project: str = "barnraise-demo",
    *,
    port: int = 4100,
    manifest: Path = DEMO,
    moderated: bool = False,
    trainers: int = 2,
    started: float = STARTED,
) -> LocalSwarm:
    return LocalSwarm(
        project=project,
        description=f"{project} for the tests",
        manifest=manifest,
        initial_peers=(f"/ip4/127.0.0.1/tcp/{port}/p2p/12D3KooWExample",),
        data_base=f"http://127.0.0.1:{port + 1}/",
        pids=(SwarmProcess.of(os.getpid()),),
        moderated=moderated,
        started=started,
        trainers=trainers,
    )


def moderated_manifest(folder: Path, url: str) -> Path:
    path = folder / "moderated.toml"
    path.write_text(manifest_text(str(Identity.generate().peer_id), url), encoding="utf-8")
    return path


async def test_running_swarms_are_offered_first_then_attached_projects(
    engine: Running, tmp_path: Path
) -> None:
    client = engine.client
    assert (await client.offers()).offers == []
    demo = swarm(trainers=2)
    moderated = swarm(
        "account-test",
        port=4200,
        manifest=moderated_manifest(tmp_path, "http://127.0.0.1:1"),
        moderated=True,
        trainers=1,
        started=STARTED - 60,
    )
    write_swarm(engine.dirs, demo)
    write_swarm(engine.dirs, moderated)
    since = f"{datetime.datetime.fromtimestamp(STARTED):%H:%M}"
    earlier = f"{datetime.datetime.fromtimestamp(STARTED - 60):%H:%M}"
    if datetime.datetime.fromtimestamp(STARTED - 60).date() != datetime.date.today():
        pytest.skip("the swarms' start times fall on another day (just after midnight)")

    offers = (await client.offers()).offers
    assert offers == [
        ProjectOffer(
            name="account-test",
            description="account-test for the tests",
            manifest=str(moderated.manifest),
            source="local_swarm",
            initial_peers=list(moderated.initial_peers),
            data_base="http://127.0.0.1:4201/",
            note=f"1 trainer and a backbone on this computer since {earlier}; needs an account",
            moderated=True,
        ),
        ProjectOffer(
            name="barnraise-demo",
            description="barnraise-demo for the tests",
            manifest=str(DEMO),
            source="local_swarm",
            initial_peers=list(demo.initial_peers),
            data_base="http://127.0.0.1:4101/",
            note=f"2 trainers and a backbone on this computer since {since}",
            moderated=False,
        ),
    ]

    # attached (not through the swarm): offered once, as attached, after the running swarms
    await client.attach(AttachRequest(str(DEMO)))
    offers = (await client.offers()).offers
    assert [(o.name, o.source) for o in offers] == [
        ("account-test", "local_swarm"),
        ("barnraise-demo", "attached"),
    ]
    assert offers[1].note == "attached, contributing to it"
    assert offers[1].initial_peers == []  # the slot's own: it was attached without the swarm

    # a swarm that stops is no longer offered
    remove_swarm(engine.dirs, moderated)
    assert [o.source for o in (await client.offers()).offers] == ["attached"]


async def test_ctl_offers_and_attach_local_swarm(engine: Running, ctl_run: CtlRun) -> None:
    assert "nothing to offer" in await ctl_run("offers")
    with pytest.raises(BadRequest, match="no demo swarm runs on this computer"):
        await ctl_run("attach", "--local-swarm")
    write_swarm(engine.dirs, swarm())
    out = await ctl_run("offers")
    assert out.startswith("barnraise-demo (running here): 2 trainers and a backbone")
    attached = await ctl_run("attach", "--local-swarm")
    assert (
        attached.strip()
        == "attached barnraise-demo (active) (joins the demo swarm on this computer)"
    )
    (slot,) = EngineFile(engine.dirs.config / "engine.toml").load().projects
    assert slot.local_swarm
    assert "attached, contributing to it; joins the demo swarm" in await ctl_run("offers")


async def test_a_local_swarm_project_follows_the_swarm_from_run_to_run(
    engine: Running, peers: list[StandInPeer]
) -> None:
    client = engine.client
    first = swarm(port=4100)
    write_swarm(engine.dirs, first)
    info = await client.attach(
        AttachRequest(str(DEMO), ["/ip4/ignored"], "http://ignored", local_swarm=True)
    )
    assert info.local_swarm
    assert (info.initial_peers, info.data_base) == (list(first.initial_peers), first.data_base)
    # what is remembered is "the swarm on this computer", not this run's addresses
    (slot,) = EngineFile(engine.dirs.config / "engine.toml").load().projects
    assert (slot.local_swarm, slot.initial_peers, slot.data_base) == (True, (), None)

    await client.set_settings({"max_other_cpu_percent": 100, "cpu_when_in_use": "pause"})
    await client.start()
    await until(engine.client, lambda s: s.state == "running")
    assert peers[0].settings.initial_peers == first.initial_peers
    assert peers[0].settings.data_base == first.data_base

    # the swarm is started again: new ports; the engine's peer moves to the new run
    second = dataclasses.replace(first, started=first.started + 60, initial_peers=("/ip4/new",))
    second = dataclasses.replace(second, data_base="http://127.0.0.1:4301/")
    write_swarm(engine.dirs, second)
    await until(engine.client, lambda s: len(peers) == 2 and s.state == "running")
    assert peers[0].closed
    assert (peers[1].settings.initial_peers, peers[1].settings.data_base) == (
        ("/ip4/new",),
        "http://127.0.0.1:4301/",
    )
    assert (await client.projects()).projects[0].initial_peers == ["/ip4/new"]

    # the swarm stops: the peer leaves, and the state says how to start one
    remove_swarm(engine.dirs, second)
    stopped = await until(engine.client, lambda s: s.state == "error")
    assert peers[1].closed
    assert SWARM_NOT_RUNNING in stopped.reason
    assert stopped.last_error == SWARM_NOT_RUNNING

    # it runs again: joined as soon as it is seen (not after the 30 s back-off of other failures)
    third = dataclasses.replace(first, started=first.started + 120, initial_peers=("/ip4/third",))
    write_swarm(engine.dirs, third)
    await until(engine.client, lambda s: len(peers) == 3 and s.state == "running")
    assert peers[2].settings.initial_peers == ("/ip4/third",)


async def test_a_moderated_swarm_run_points_the_account_at_its_coordinator(
    engine: Running, tmp_path: Path
) -> None:
    manifest = moderated_manifest(tmp_path, "http://127.0.0.1:1")
    key = manifest.read_text(encoding="utf-8")
    first = swarm("account-test", manifest=manifest, moderated=True)
    write_swarm(engine.dirs, first)
    await engine.client.attach(AttachRequest(str(manifest), local_swarm=True))
    assert (await engine.client.account()).coordinator == "http://127.0.0.1:1"

    # the next run writes its copy of the manifest again, naming its new coordinator
    manifest.write_text(key.replace("http://127.0.0.1:1", "http://127.0.0.1:2"), encoding="utf-8")
    write_swarm(engine.dirs, dataclasses.replace(first, started=first.started + 60))
    await poll_until(engine.client.account, lambda a: a.coordinator == "http://127.0.0.1:2")


def test_a_damaged_local_swarm_flag_in_the_settings_file_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "engine.toml"
    text = f'[[projects]]\nname = "barnraise-demo"\nmanifest = "{DEMO}"\nlocal_swarm = "yes"\n'
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match="local_swarm"):
        EngineFile(path).load()
    assert path.read_text(encoding="utf-8") == text  # never overwritten


async def test_the_engine_leaves_local_swarms_out_of_other_programs_cpu(tmp_path: Path) -> None:
    # the engine's own sensors (no scripted sampler): its CPU sensor asks the engine's reading of
    # the swarm records which processes to leave out
    sleeper = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import time; time.sleep(60)"
    )
    config = fast_config(tmp_path / "home", headless=True)
    try:
        record = dataclasses.replace(
            swarm(), pids=(SwarmProcess.of(os.getpid()), SwarmProcess.of(sleeper.pid))
        )
        write_swarm(config.dirs, record)
        engine = await Engine.open(config)
        try:
            # white-box: the wiring is under test
            excluded = engine._parts.sampler._system._excluded
            assert excluded is not None
            assert sorted(excluded._provider()) == sorted([os.getpid(), sleeper.pid])
        finally:
            await engine.close()
    finally:
        sleeper.kill()
        await sleeper.wait()
