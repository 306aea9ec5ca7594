"""BlockingPool: bounded, refusing when full, and never waiting for a stuck thread once closed."""

from __future__ import annotations

import asyncio
import threading

import pytest

from core.util.blocking import BlockingPool, PoolBusy, PoolClosed
from tests.support.leaks import wait_until


async def test_calls_run_on_daemon_threads_and_errors_come_back() -> None:
    pool = BlockingPool("test", workers=2, backlog=1)
    assert await pool.run(sum, [1, 2, 3]) == 6
    assert await pool.run(lambda: threading.current_thread().daemon) is True
    with pytest.raises(ZeroDivisionError):
        await pool.run(lambda: 1 / 0)
    pool.close()


async def test_a_full_pool_refuses_and_a_closed_one_fails_what_is_pending() -> None:
    pool = BlockingPool("test", workers=2, backlog=1)
    release = threading.Event()
    held = [asyncio.ensure_future(pool.run(release.wait)) for _ in range(3)]  # 2 run, 1 waits
    await wait_until(lambda: pool.busy == 2 and len(pool._queue) == 1)
    with pytest.raises(PoolBusy, match="2 blocking calls are running and 1 are waiting"):
        await pool.run(release.wait)
    held[2].cancel()  # a caller that gives up frees its place in the queue
    await asyncio.wait([held[2]])
    fourth = asyncio.ensure_future(pool.run(release.wait))
    await wait_until(lambda: len(pool._queue) == 1)
    pool.close()  # the threads are still stuck: nobody waits for them
    for call in (held[0], held[1], fourth):
        with pytest.raises(PoolClosed):
            await call
    with pytest.raises(PoolClosed):
        await pool.run(sum, [])
    release.set()
