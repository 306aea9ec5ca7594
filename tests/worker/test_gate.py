"""The gate at which background work waits while the event loop does what must not be slowed."""

from __future__ import annotations

import asyncio
import time

import pytest

from core.worker.gate import Gate


async def test_a_thread_waits_while_the_gate_is_held_and_goes_on_once_it_opens() -> None:
    gate = Gate()
    assert gate.is_open
    assert gate.wait(5.0) == 0.0  # open: no wait
    with gate.held():
        assert not gate.is_open
        waiting = asyncio.create_task(asyncio.to_thread(gate.wait, 30.0))
        await asyncio.sleep(0.3)
        assert not waiting.done()
    waited = await asyncio.wait_for(waiting, 30.0)
    assert waited >= 0.25
    assert gate.is_open


def test_holds_nest_and_the_gate_opens_when_the_last_ends() -> None:
    gate = Gate()
    with gate.held():
        with gate.held():
            assert not gate.is_open
        assert not gate.is_open  # the outer hold is still in force
    assert gate.is_open


def test_a_hold_that_ends_by_an_error_opens_the_gate() -> None:
    gate = Gate()
    with pytest.raises(RuntimeError), gate.held():
        raise RuntimeError("the exchange failed")
    assert gate.is_open


def test_a_wait_ends_at_its_limit_while_the_gate_stays_held() -> None:
    gate = Gate()
    with gate.held():
        began = time.monotonic()
        waited = gate.wait(0.2)
        assert 0.15 <= waited <= time.monotonic() - began
        assert gate.wait(0.0) >= 0.0
    with pytest.raises(ValueError, match="0 seconds or more"):
        gate.wait(-1.0)
