"""Waiting for what a test started to settle: no asyncio tasks or open file descriptors left behind,
and conditions that other tasks, threads or processes make true.

Every wait has a deadline, and it is generous on purpose: it only guards against a hang. A busy
machine (CI, a volunteer's laptop installing packages) is slow, not broken, so no test may depend on
how quickly something happens; the waits return as soon as the condition holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import psutil

T = TypeVar("T")

HANG_GUARD = 30.0
"""Seconds a wait may take before the test fails: far above any expected wait, even under load."""


def open_fd_count() -> int | None:
    if sys.platform.startswith("linux"):
        return len(os.listdir("/proc/self/fd"))
    return None


async def assert_no_leaks(fd_baseline: int | None, *, within: float = HANG_GUARD) -> None:
    """Wait up to ``within`` seconds for tasks and descriptors to drain, then assert they did."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    collected_at = loop.time()
    while True:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
        fds = open_fd_count()
        fds_ok = fd_baseline is None or fds is None or fds <= fd_baseline
        if (not tasks and fds_ok) or loop.time() > deadline:
            break
        if not fds_ok and loop.time() - collected_at > 0.5:
            # a descriptor held by garbage is freed by the next collection, not leaked: e.g. the
            # shared-memory epoch counter of each ``datasets`` stream a closed data pipeline opened
            gc.collect()
            collected_at = loop.time()
        await asyncio.sleep(0.02)
    assert not tasks, f"tasks left running: {[t.get_name() for t in tasks]}"
    assert fds_ok, f"file descriptors leaked: {fd_baseline} before, {fds} after"


async def wait_until(condition: Callable[[], bool], timeout: float = HANG_GUARD) -> None:
    """Poll ``condition`` (state outside our control, such as log records) until it holds."""
    async with asyncio.timeout(timeout):
        while not condition():  # noqa: ASYNC110 - nothing to wait on but the condition itself
            await asyncio.sleep(0.02)


def wait_until_blocking(condition: Callable[[], bool], timeout: float = HANG_GUARD) -> None:
    """``wait_until`` for a test that is not a coroutine (it waits on a child process, say)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting after {timeout:g} s")
        time.sleep(0.02)


async def poll_until(
    read: Callable[[], Awaitable[T]], check: Callable[[T], bool], timeout: float = HANG_GUARD
) -> T:
    """Call ``read`` (an asynchronous query, such as an engine's state over its API) until ``check``
    holds for what it returns, and return that; on timeout, fail showing the last answer."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check(value := await read()):
        if loop.time() > deadline:
            raise AssertionError(f"gave up waiting after {timeout:g} s; the last answer: {value!r}")
        await asyncio.sleep(0.05)
    return value


def leftover(marker: str) -> list[psutil.Process]:
    """Processes whose command line mentions ``marker`` (a test's folder): what it left running."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if any(marker in part for part in proc.info["cmdline"] or []):
                found.append(proc)
    return found
