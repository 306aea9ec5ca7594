import asyncio
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.util.tasks import BackgroundTasks

REPO_ROOT = Path(__file__).resolve().parents[2]


async def test_close_cancels_and_awaits_every_task() -> None:
    tasks = BackgroundTasks("owner")
    stopped: list[str] = []

    async def forever(name: str) -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            stopped.append(name)

    first = tasks.spawn("a", forever("a"))
    tasks.spawn("b", forever("b"))
    await asyncio.sleep(0)  # one turn: both start (one cancelled before it starts has no finally)
    assert first.get_name() == "owner/a"
    assert len(tasks) == 2
    await tasks.close()
    assert sorted(stopped) == ["a", "b"]
    assert len(tasks) == 0
    with pytest.raises(RuntimeError, match="closed"):
        tasks.spawn("late", forever("late"))


async def test_a_failing_task_is_logged_with_its_name(caplog: pytest.LogCaptureFixture) -> None:
    tasks = BackgroundTasks("svc")

    async def boom() -> None:
        raise ValueError("kaput")

    with caplog.at_level(logging.ERROR):
        task = tasks.spawn("boom", boom())
        await asyncio.wait([task])
    assert "svc/boom failed" in caplog.text
    assert "kaput" in caplog.text
    await tasks.close()


# A finished task whose done-callback has not run yet: the state Transfer.exchange's ``finally`` meets
# when its last worker has just returned. Run in a child process, so that a close() that spins (as
# it did on Python 3.12 and 3.13, where gather() over finished tasks returns without yielding to
# the loop) fails this test by its timeout instead of hanging the suite.
CLOSE_RIGHT_AFTER_A_TASK_ENDED = """
import asyncio
from core.util.tasks import BackgroundTasks

async def main() -> None:
    tasks = BackgroundTasks("owner")
    ended = []

    async def quick() -> None:
        ended.append(True)

    async def failing() -> None:
        raise ValueError("kaput")

    tasks.spawn("quick", quick())
    tasks.spawn("failing", failing())
    await asyncio.sleep(0)  # both run to their end; their done-callbacks queue up behind us
    assert ended and len(tasks) == 2, "the scenario needs ended tasks still in the set"
    await tasks.close()
    assert len(tasks) == 0
    await asyncio.sleep(0)  # the callbacks run later and still report the failure

asyncio.run(main())
print("closed")
"""


def test_close_right_after_tasks_ended_returns() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", CLOSE_RIGHT_AFTER_A_TASK_ENDED],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,  # the child returns in well under a second unless close() spins
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "closed"
    assert "owner/failing failed" in done.stderr  # the done-callback still logged it


async def test_close_waits_for_a_task_that_finishes_its_cleanup() -> None:
    tasks = BackgroundTasks("owner")
    cleaned = asyncio.Event()

    async def slow_to_stop() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0)  # cleanup that itself awaits
            cleaned.set()

    tasks.spawn("slow", slow_to_stop())
    await asyncio.sleep(0)  # one turn: it starts, so that its cleanup runs when cancelled
    await tasks.close()
    assert cleaned.is_set()
    assert len(tasks) == 0
