"""TrainingControl: how the engine steers a running trainer (run, throttle, pause).

The scheduler decides; this object carries the decision to the training loop. ``pause`` takes effect
within one layer's compute (it interrupts the worker thread through the bridge, dropping the current
microbatch), ``resume`` lets the loop take the next batch, and ``duty`` below 1 makes the loop rest
after each microbatch so that it computes only that share of the time (BOINC's CPU throttling).
"""

from __future__ import annotations

import asyncio

from core.worker.bridge import TrainingBridge


class TrainingControl:
    def __init__(self, bridge: TrainingBridge, *, running: bool = True) -> None:
        self.bridge = bridge
        self._running = asyncio.Event()
        self._parked = asyncio.Event()
        self._duty = 1.0
        if running:
            self._running.set()
        else:
            bridge.interrupt()

    @property
    def running(self) -> bool:
        return self._running.is_set()

    @property
    def duty(self) -> float:
        return self._duty

    def set_duty(self, duty: float) -> None:
        if not 0.0 < duty <= 1.0:
            raise ValueError(f"duty must be in (0, 1], not {duty}")
        self._duty = duty

    def pause(self) -> None:
        """Stop computing now; the current microbatch is dropped."""
        self._running.clear()
        self.bridge.interrupt()

    def resume(self, duty: float = 1.0) -> None:
        self.set_duty(duty)
        self.bridge.clear_interrupt()
        self._running.set()

    def close(self) -> None:
        """For a stop: drop the current microbatch and wake a paused loop so it sees the stop."""
        self.bridge.interrupt()
        self._running.set()

    async def wait_running(self) -> None:
        """Called by the loop between microbatches: returns at once unless paused."""
        if self._running.is_set():
            return
        self._parked.set()
        try:
            await self._running.wait()
        finally:
            self._parked.clear()

    async def parked(self) -> None:
        """Wait until the loop is waiting at the gate (its last microbatch finished or dropped)."""
        await self._parked.wait()

    async def rest(self, computed: float) -> None:
        """After ``computed`` seconds of work, rest so that work is ``duty`` of the time."""
        if self._duty >= 1.0 or computed <= 0:
            return
        # capped: a slow microbatch must not leave the peer silent for long
        await asyncio.sleep(min(5.0, computed * (1.0 - self._duty) / self._duty))
