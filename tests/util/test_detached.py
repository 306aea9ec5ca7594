"""A detached child: its own session, stdin closed, its output in the log after the header (or
nowhere), the async form's stdout piped; killing it takes down what it started in its session."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from core.util.process.detached import (
    STOP_SIGNAL,
    creation_flags,
    kill_detached,
    start_detached,
    start_detached_async,
)
from tests.support.leaks import wait_until

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(os.name == "nt", reason="checks POSIX sessions")

# what the child reports: its session, and what reading its stdin gives
REPORT = (
    "import json, os, sys; "
    "print(json.dumps({'sid': os.getsid(0), 'pid': os.getpid(), 'stdin': sys.stdin.read()}), "
    "flush=True); "
    "print('to stderr', file=sys.stderr, flush=True)"
)


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            kill_detached(process)
        process.wait(30)


def test_the_child_has_its_own_session_no_stdin_and_its_output_after_the_header(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    log = tmp_path / "logs" / "child.log"
    log.parent.mkdir()
    log.write_bytes(b"an earlier run\n")
    process = start_detached([sys.executable, "-c", REPORT], output=log, header="--- started")
    started.append(process)
    assert process.wait(60) == 0
    lines = log.read_text(encoding="utf-8").splitlines()
    assert lines[:2] == ["an earlier run", "--- started"]  # appended, the header first
    report = json.loads(lines[2])
    assert report == {"sid": process.pid, "pid": process.pid, "stdin": ""}
    assert report["sid"] != os.getsid(0)
    assert lines[3:] == ["to stderr"]


def test_nothing_typed_to_the_parent_reaches_the_child(tmp_path: Path) -> None:
    # the parent's stdin holds text (this test's own may be empty anyway): the child must read none
    log = tmp_path / "child.log"
    start = (
        "import sys; from pathlib import Path; from core.util.process.detached import start_detached; "
        f"sys.exit(start_detached([sys.executable, '-c', {REPORT!r}], output=Path({str(log)!r}))"
        ".wait(60))"
    )
    subprocess.run(
        [sys.executable, "-c", start],
        input=b"typed by someone\n",
        cwd=ROOT,
        timeout=120,
        check=True,
    )
    assert json.loads(log.read_text(encoding="utf-8").splitlines()[0])["stdin"] == ""


def test_a_folder_is_made_for_the_log_and_without_one_the_output_goes_nowhere(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    log = tmp_path / "new" / "child.log"
    process = start_detached([sys.executable, "-c", REPORT], output=log)
    started.append(process)
    assert process.wait(60) == 0
    assert (log.parent.stat().st_mode & 0o777) == 0o700
    assert json.loads(log.read_text(encoding="utf-8").splitlines()[0])["stdin"] == ""

    quiet = start_detached([sys.executable, "-c", REPORT], cwd=tmp_path)
    started.append(quiet)
    assert quiet.wait(60) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new"]  # nothing written anywhere


def test_a_program_that_cannot_start_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        start_detached([str(tmp_path / "no-such-program")], output=tmp_path / "log")


def test_posix_takes_no_creation_flags() -> None:
    assert creation_flags() == 0
    assert creation_flags(no_window=True) == 0
    assert STOP_SIGNAL == signal.SIGTERM


def gone(process: psutil.Process) -> bool:
    """Exited (a zombie waiting for whoever adopted it to reap it counts)."""
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def test_killing_it_takes_down_what_it_started_in_its_session(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    pid_file = tmp_path / "grandchild.pid"
    code = (
        "import os, subprocess, sys, time; "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
        f"open({str(pid_file) + '.part'!r}, 'w').write(str(child.pid)); "
        f"os.replace({str(pid_file) + '.part'!r}, {str(pid_file)!r}); "
        "time.sleep(120)"
    )
    process = start_detached([sys.executable, "-c", code])
    started.append(process)
    await wait_until(pid_file.exists, timeout=60)
    grandchild = psutil.Process(int(pid_file.read_text()))
    try:
        assert not gone(grandchild)
        kill_detached(process)
        assert await asyncio.to_thread(process.wait, 30) == -signal.SIGKILL
        await wait_until(lambda: gone(grandchild), timeout=30)
    finally:
        with contextlib.suppress(psutil.Error):
            grandchild.kill()


async def test_the_async_form_pipes_stdout_and_logs_stderr(tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    process = await start_detached_async([sys.executable, "-c", REPORT], output=log)
    try:
        assert process.stdout is not None
        report = json.loads(await asyncio.wait_for(process.stdout.readline(), 60))
        assert report == {"sid": process.pid, "pid": process.pid, "stdin": ""}
        assert await asyncio.wait_for(process.wait(), 60) == 0
        assert log.read_text(encoding="utf-8") == "to stderr\n"
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
