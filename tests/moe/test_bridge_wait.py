"""TrainingBridge.wait: a worker thread runs a coroutine on the loop and blocks until it ends;
refused on a loop's thread, cancelled by an interrupt or a timeout; and several workers at once."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import pytest

from core.worker.bridge import TrainingBridge
from core.worker.errors import Interrupted
from tests.support.leaks import wait_until


@pytest.fixture
async def bridge() -> AsyncIterator[TrainingBridge]:
    bridge = TrainingBridge("wait-test", workers=2)
    yield bridge
    await bridge.aclose()


async def test_a_worker_gets_the_result_or_the_error_of_a_coroutine_run_on_the_loop(
    bridge: TrainingBridge,
) -> None:
    loop = asyncio.get_running_loop()
    seen: list[object] = []

    async def on_the_loop(value: int) -> int:
        seen.append(asyncio.get_running_loop())
        await asyncio.sleep(0)  # a coroutine that really suspends once before it answers
        return value * 2

    async def failing() -> None:
        raise KeyError("from the loop")

    def on_a_worker() -> tuple[int, str]:
        result = bridge.wait(lambda: on_the_loop(21))
        try:
            bridge.wait(failing)
        except KeyError as exc:
            return result, str(exc)
        raise AssertionError("the coroutine's error did not reach the worker")

    assert await bridge.run(on_a_worker) == (42, "'from the loop'")
    assert seen == [loop]


async def test_wait_refuses_on_the_loop_thread_and_without_a_loop() -> None:
    made: list[bool] = []

    async def nothing() -> None:
        made.append(True)

    unbound = TrainingBridge("unbound")
    with pytest.raises(RuntimeError, match="no event loop yet"):
        await asyncio.to_thread(unbound.wait, nothing)
    unbound.bind(asyncio.get_running_loop())
    # on the loop's own thread: blocking would deadlock, so it refuses before making the coroutine
    with pytest.raises(RuntimeError, match="from a worker thread"):
        unbound.wait(nothing, timeout=1)  # the timeout turns a deadlock into a failure
    assert made == []
    await asyncio.to_thread(unbound.wait, nothing)  # bound explicitly: a plain thread may wait
    assert made == [True]
    await unbound.aclose()


async def test_interrupt_cancels_the_coroutine_and_raises_interrupted(
    bridge: TrainingBridge,
) -> None:
    started = threading.Event()
    cancelled = asyncio.Event()

    async def forever() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    def worker() -> str:
        try:
            bridge.wait(forever)
        except Interrupted:
            return "interrupted"
        return "returned"

    job = asyncio.ensure_future(bridge.run(worker))
    await wait_until(started.is_set)
    bridge.interrupt()
    assert await asyncio.wait_for(job, 10) == "interrupted"
    await asyncio.wait_for(cancelled.wait(), 10)
    # while the flag is up, a new wait refuses at once; cleared, waiting works again
    with pytest.raises(Interrupted):
        await bridge.run(bridge.wait, forever)
    bridge.clear_interrupt()

    async def five() -> int:
        return 5

    assert await bridge.run(bridge.wait, five) == 5


async def test_a_wait_past_its_timeout_cancels_the_coroutine(bridge: TrainingBridge) -> None:
    cancelled = asyncio.Event()

    async def slow() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            cancelled.set()

    with pytest.raises(TimeoutError, match=r"within 0\.05 s"):
        await bridge.run(bridge.wait, slow, 0.05)
    await asyncio.wait_for(cancelled.wait(), 10)


async def test_several_workers_block_at_the_same_time() -> None:
    """Three jobs that each wait for the other two can only finish on three threads."""
    with pytest.raises(ValueError, match="at least one worker"):
        TrainingBridge("none", workers=0)
    bridge = TrainingBridge("three", workers=3)
    assert bridge.workers == 3
    barrier = threading.Barrier(3, timeout=30)
    together = await asyncio.gather(*(bridge.run(barrier.wait) for _ in range(3)))
    assert sorted(together) == [0, 1, 2]
    await bridge.aclose()
