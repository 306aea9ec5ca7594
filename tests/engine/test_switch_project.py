"""Switching the active project (``activate_project``, ``barnraise ctl activate``), as a BOINC
volunteer switches projects: the old project's peer stops as a detach stops it and what it
contributed stays in the ledger; the new one starts under the scheduler and the account follows to
its coordinator, where the volunteer can log in. The peers are stand-ins, the coordinator is real.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from core.api import AttachRequest, NotFound, ProjectsChanged
from tests.account.coordinator import PASSWORD, PROJECT, Coordinator, running_coordinator
from tests.engine.standin import StandInPeer
from tests.support.engine import CtlRun, Running, until
from tests.support.leaks import poll_until

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo" / "project.toml"
DEMO_NAME = "barnraise-demo"


@pytest.fixture
async def coordinator(tmp_path: Path) -> AsyncIterator[Coordinator]:
    async with running_coordinator(tmp_path) as running:
        running.add_user("alice")
        yield running


async def test_activate_stops_the_old_peer_and_the_new_project_logs_in_and_runs(
    engine: Running,
    coordinator: Coordinator,
    tmp_path: Path,
    peers: list[StandInPeer],
    ctl_run: CtlRun,
) -> None:
    client = engine.client
    await client.attach(AttachRequest(str(DEMO), ["/ip4/127.0.0.1/tcp/1"]))
    beside = await client.attach(AttachRequest(str(coordinator.manifest_file(tmp_path))))
    assert not beside.active  # attached beside: the demo stays active
    await client.set_settings({"max_other_cpu_percent": 100, "cpu_when_in_use": "pause"})
    await client.start()
    await until(client, lambda s: s.state == "running")
    (demo_peer,) = peers
    demo_peer.totals = {"samples": 40, "compute_seconds": 2.0}
    await poll_until(
        lambda: client.statistics(DEMO_NAME, 3), lambda stats: stats.totals.samples == 40
    )
    before = engine.daemon.engine.events.recent()[-1].seq

    info = await client.activate_project(PROJECT)
    assert (info.name, info.active) == (PROJECT, True)
    assert demo_peer.closed  # stopped as a detach stops it
    listed = (await client.projects()).projects
    assert [(p.name, p.active) for p in listed] == [(DEMO_NAME, False), (PROJECT, True)]
    changes = [
        e.data
        for e in engine.daemon.engine.events.recent(before)
        if isinstance(e.data, ProjectsChanged)
    ]
    assert changes == [ProjectsChanged([DEMO_NAME, PROJECT], PROJECT)]
    # the account follows the active project: the moderated one waits for a login there
    account = await client.account()
    assert (account.project, account.coordinator, account.logged_in) == (
        PROJECT,
        coordinator.url,
        False,
    )
    waiting = await until(client, lambda s: s.code == "login_required")
    assert waiting.project is not None
    assert waiting.project.name == PROJECT
    await client.login("alice", PASSWORD)
    await until(client, lambda s: s.state == "running")
    demo_again, moderated_peer = peers
    assert demo_again is demo_peer  # no new demo peer was built
    gate = moderated_peer.settings.access
    assert gate is not None
    assert gate.own_pass is not None
    assert gate.own_pass.username == "alice"
    # the demo's contribution is still in the ledger, and the choice in the settings file
    assert (await client.statistics(DEMO_NAME, 3)).totals.samples == 40
    assert f'active = "{PROJECT}"' in (engine.dirs.config / "engine.toml").read_text()

    # already active: nothing changes
    again = await client.activate_project(PROJECT)
    assert again.active
    assert not moderated_peer.closed
    assert len(peers) == 2

    # and back, from the command line
    out = await ctl_run("activate", DEMO_NAME)
    assert out.strip() == f"attached {DEMO_NAME} (active)"
    assert moderated_peer.closed
    await until(client, lambda s: s.state == "running" and len(peers) == 3)
    assert (await client.account()).coordinator is None  # the demo has none


async def test_activating_an_unknown_project_is_refused_as_detach_refuses_it(
    engine: Running,
) -> None:
    await engine.client.attach(AttachRequest(str(DEMO), ["/ip4/127.0.0.1/tcp/1"]))
    with pytest.raises(NotFound, match="no attached project is called 'nope'") as activating:
        await engine.client.activate_project("nope")
    with pytest.raises(NotFound) as detaching:
        await engine.client.detach("nope")
    assert activating.value.message == detaching.value.message
    listed = (await engine.client.projects()).projects
    assert [(p.name, p.active) for p in listed] == [(DEMO_NAME, True)]
