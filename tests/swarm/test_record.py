"""Records of demo swarms running on this computer: written privately and atomically, found while
their swarm runs, deleted once it does not (a reused pid included), damaged ones skipped."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from core.config.paths import UserDirs
from core.swarm import (
    LocalSwarm,
    LocalSwarmError,
    SwarmProcess,
    find_swarm,
    new_record,
    remove_swarm,
    running_swarms,
    swarm_file,
    swarm_pids,
    write_swarm,
)


@pytest.fixture
def dirs(tmp_path: Path) -> UserDirs:
    return UserDirs.under(tmp_path / "home")


def dead_process() -> SwarmProcess:
    """A process that ran and has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    created = psutil.Process(proc.pid).create_time()
    proc.wait()
    return SwarmProcess(proc.pid, created)


def record(project: str = "demo", *, pids: tuple[SwarmProcess, ...] | None = None) -> LocalSwarm:
    return LocalSwarm(
        project=project,
        description="a demo",
        manifest=Path("/somewhere/project.toml"),
        initial_peers=("/ip4/127.0.0.1/tcp/4100/p2p/12D3KooWExample",),
        data_base="http://127.0.0.1:4101/",
        pids=pids or (SwarmProcess.of(os.getpid()),),
        moderated=False,
        started=1_700_000_000.0,
        trainers=2,
    )


def test_a_record_is_written_privately_and_found_while_its_swarm_runs(dirs: UserDirs) -> None:
    mine = new_record(
        project="demo",
        description="a demo",
        manifest=Path("project.toml"),
        initial_peers=["/ip4/127.0.0.1/tcp/4100/p2p/12D3KooWExample"],
        data_base="http://127.0.0.1:4101/",
        children=[],
        moderated=True,
        trainers=1,
    )
    assert mine.manifest.is_absolute()
    path = write_swarm(dirs, mine)
    assert path == dirs.runtime / "swarms" / "demo.json"
    if os.name == "posix":
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert [p.name for p in path.parent.iterdir()] == ["demo.json"]  # no temporary file left
    assert running_swarms(dirs) == [mine]
    assert find_swarm(dirs, "demo") == mine
    assert find_swarm(dirs, "other") is None

    remove_swarm(dirs, mine)
    assert not path.exists()
    assert running_swarms(dirs) == []
    remove_swarm(dirs, mine)  # twice is harmless


def test_records_of_swarms_that_stopped_are_deleted(dirs: UserDirs) -> None:
    gone = record("gone", pids=(dead_process(),))
    alive = record("alive")
    write_swarm(dirs, gone)
    write_swarm(dirs, alive)
    assert running_swarms(dirs) == [alive]
    assert not swarm_file(dirs, "gone").exists()
    assert swarm_file(dirs, "alive").exists()


def test_a_pid_reused_by_another_process_is_not_the_swarm(dirs: UserDirs) -> None:
    # our own pid, but a start time an hour before this process began: what a record of an
    # earlier process looks like once the system gives its pid to a new one
    me = psutil.Process(os.getpid())
    reused = SwarmProcess(os.getpid(), me.create_time() - 3600.0)
    assert not reused.alive()
    assert SwarmProcess(os.getpid(), me.create_time()).alive()
    write_swarm(dirs, record(pids=(reused,)))
    assert running_swarms(dirs) == []
    assert not swarm_file(dirs, "demo").exists()


def test_only_processes_that_still_run_are_named_for_exclusion(dirs: UserDirs) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        running = SwarmProcess.of(child.pid)
        swarm = record(pids=(SwarmProcess.of(os.getpid()), running, dead_process()))
        assert swarm.live_pids() == [os.getpid(), child.pid]
        assert swarm_pids([swarm, record("b")]) == [os.getpid(), child.pid, os.getpid()]
    finally:
        child.kill()
        child.wait()
    assert swarm.live_pids() == [os.getpid()]


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[1, 2]",
        json.dumps({"project": "demo"}),
        json.dumps(json.loads(record().to_json()) | {"pids": []}),
        json.dumps(json.loads(record().to_json()) | {"pids": [[True, 1.0]]}),
        json.dumps(json.loads(record().to_json()) | {"pids": [os.getpid()]}),
        json.dumps(json.loads(record().to_json()) | {"started": "yesterday"}),
        json.dumps(json.loads(record().to_json()) | {"moderated": 1}),
        json.dumps(json.loads(record().to_json()) | {"initial_peers": "/ip4/127.0.0.1"}),
        json.dumps(json.loads(record().to_json()) | {"trainers": -1}),
        json.dumps(json.loads(record().to_json()) | {"project": "../escape"}),
        json.dumps(json.loads(record().to_json()) | {"project": "another"}),  # not its file name
    ],
)
def test_a_damaged_record_is_skipped_with_a_warning_and_left_alone(
    dirs: UserDirs, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    good = record("good")
    write_swarm(dirs, good)
    damaged = swarm_file(dirs, "demo")
    damaged.write_text(text, encoding="utf-8")
    warned: set[tuple[str, int]] = set()  # what a reader that looks again and again keeps
    with caplog.at_level(logging.WARNING, logger="core.swarm.record"):
        assert running_swarms(dirs, warned=warned) == [good]
        assert running_swarms(dirs, warned=warned) == [good]
    warnings = [r for r in caplog.records if "damaged swarm record" in r.getMessage()]
    assert len(warnings) == 1  # once per version of the file, not at every look
    assert str(damaged) in warnings[0].getMessage()
    assert damaged.read_text(encoding="utf-8") == text
    remove_swarm(dirs, record())  # not ours: it cannot even be read
    assert damaged.exists()


def test_no_folder_means_no_swarms(dirs: UserDirs) -> None:
    assert running_swarms(dirs) == []


def test_a_newer_run_of_the_same_project_is_not_removed_by_the_older(dirs: UserDirs) -> None:
    older = record()
    newer = dataclasses.replace(older, started=older.started + 60, initial_peers=("/ip4/x",))
    write_swarm(dirs, older)
    write_swarm(dirs, newer)  # the newer run replaced the record
    remove_swarm(dirs, older)  # the older one stops late
    assert find_swarm(dirs, "demo") == newer


def test_bad_records_cannot_be_made() -> None:
    with pytest.raises(LocalSwarmError, match="project name"):
        record("Not A Name")
    with pytest.raises(LocalSwarmError, match="own process"):
        dataclasses.replace(record(), pids=())
    with pytest.raises(LocalSwarmError, match="project name"):
        swarm_file(UserDirs.under(Path("/tmp")), "../x")
    assert LocalSwarm.from_json(record().to_json()) == record()
