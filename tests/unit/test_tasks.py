import asyncio
import logging

import pytest

from core.util.tasks import BackgroundTasks


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
    await asyncio.sleep(0)
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
