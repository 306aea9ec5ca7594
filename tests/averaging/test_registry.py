"""RoundRegistry under a fake clock: rounds nobody starts do not stay forever."""

from __future__ import annotations

import asyncio
import os
from typing import Any, cast

import pytest

from core.averaging.registry import UNSTARTED_TTL, RoundRegistry
from core.net.errors import NotFoundError
from core.util.clock import FakeClock


async def test_streams_for_unknown_groups_leave_nothing_behind_when_cancelled() -> None:
    """Any peer may name any group id and then cancel its call: 10 000 of those stay bounded."""
    clock = FakeClock()
    registry = RoundRegistry(clock)
    waits = [
        asyncio.create_task(registry.wait(os.urandom(16), timeout=10.0)) for _ in range(10_000)
    ]
    await asyncio.sleep(0)  # one turn of the loop: every wait starts, naming its group
    for task in waits:
        task.cancel()
    await asyncio.gather(*waits, return_exceptions=True)
    clock.advance(11.5)  # past every wait's timeout
    ours = os.urandom(16)
    registry.expect(ours)
    assert len(registry) == 1
    registry.start(ours, cast(Any, "runner"))
    assert await registry.wait(ours, timeout=1.0) == "runner"


async def test_a_round_nobody_starts_is_forgotten_and_a_started_one_is_kept() -> None:
    clock = FakeClock()
    registry = RoundRegistry(clock)
    dropped, running = os.urandom(16), os.urandom(16)
    registry.expect(dropped)  # prepared, then dropped without cancel()
    registry.expect(running)
    registry.start(running, cast(Any, "runner"))
    waiting = asyncio.create_task(registry.wait(dropped, timeout=30.0))
    await asyncio.sleep(0)  # one turn of the loop: the stream starts waiting for the round
    clock.advance(UNSTARTED_TTL - 1)
    registry.expect(os.urandom(16))
    assert len(registry) == 3
    clock.advance(2)
    for _ in range(1000):  # a long run of rounds that end normally
        group = os.urandom(16)
        registry.expect(group)
        registry.start(group, cast(Any, "runner"))
        registry.end(group)
    assert len(registry) == 2  # the running round, and the one expected at UNSTARTED_TTL - 1
    with pytest.raises(NotFoundError, match="over"):
        await waiting  # its waiter is told at once, not at its own timeout
    assert await registry.wait(running, timeout=1.0) == "runner"
