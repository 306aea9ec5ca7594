"""Checks that a test left no asyncio tasks or open file descriptors behind."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable


def open_fd_count() -> int | None:
    if sys.platform.startswith("linux"):
        return len(os.listdir("/proc/self/fd"))
    return None


async def assert_no_leaks(fd_baseline: int | None, *, within: float = 2.0) -> None:
    """Wait up to ``within`` seconds for tasks and descriptors to drain, then assert they did."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
        fds = open_fd_count()
        fds_ok = fd_baseline is None or fds is None or fds <= fd_baseline
        if (not tasks and fds_ok) or loop.time() > deadline:
            break
        await asyncio.sleep(0.02)
    assert not tasks, f"tasks left running: {[t.get_name() for t in tasks]}"
    assert fds_ok, f"file descriptors leaked: {fd_baseline} before, {fds} after"


async def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll ``condition`` (state outside our control, such as log records) until it holds."""
    async with asyncio.timeout(timeout):
        while not condition():  # noqa: ASYNC110 - nothing to wait on but the condition itself
            await asyncio.sleep(0.02)
