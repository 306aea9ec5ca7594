"""Scheduling: the scheduler loop, which carries the policy's decisions out on the active peer.

Every tick (at once when woken: a command, a login, the peer's news) it samples the conditions
(``core.scheduler``: the user at the computer, battery, other programs' CPU and GPU use, the
month's network), asks the pure policy (``core.policy.decide``) what to do under the user's
preferences, and carries it out on the active project's runner: a pause within one layer's
compute, or the peer started and resumed at the decided duty and threads. The outcome
(``core.policy.outcome``: the engine's state, its code and reason) is published as
``StateChanged`` whenever it changes. A snooze whose time is up ends here.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Callable

from core.api.events import ErrorRaised, StateChanged
from core.engine.attached import AttachedProjects
from core.engine.config import EngineConfig
from core.engine.device import DeviceChoice
from core.engine.events import EventBus
from core.engine.metering import Metering
from core.engine.store import EngineMemory
from core.policy import STARTING, Decision, decide, outcome
from core.scheduler import ConditionSampler
from core.util.clock import Clock

log = logging.getLogger(__name__)


class Scheduling:
    def __init__(
        self,
        config: EngineConfig,
        memory: EngineMemory,
        *,
        attached: AttachedProjects,
        sampler: ConditionSampler,
        device: DeviceChoice,
        metering: Metering,
        events: EventBus,
        wake: asyncio.Event,
        save: Callable[[], None],
        clock: Clock,
    ) -> None:
        """``wake``: set by anyone for a tick now; ``save``: write ``memory`` (a failure is told,
        not raised)."""
        self._config = config
        self._memory = memory
        self._attached = attached
        self._sampler = sampler
        self._device = device
        self._metering = metering
        self._events = events
        self._wake = wake
        self._save = save
        self._clock = clock
        self._lock = asyncio.Lock()  # a command's tick and the loop's never interleave
        self.decision: Decision | None = None
        """The policy's last decision; None before the first tick."""
        self.outcome = STARTING
        self.since = clock.time()
        """When ``outcome`` last changed."""
        self.notes: tuple[str, ...] = ()
        """What the last sample of the conditions noted (a sensor missing, ...)."""

    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception as exc:  # the loop must outlive one bad tick; say what happened
                log.exception("scheduler tick failed")
                self._events.publish(ErrorRaised("scheduler", str(exc) or type(exc).__name__))
            runner = self._attached.runner
            computing = runner is not None and runner.computing
            interval = self._config.tick_computing if computing else self._config.tick_resting
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._wake.wait()
            self._wake.clear()

    async def tick(self) -> None:
        """Sample, decide and carry the decision out, now."""
        async with self._lock:
            memory = self._memory
            now = self._clock.time()
            if memory.snoozed_until is not None and memory.snoozed_until <= now:
                memory.snoozed_until = None  # the snooze ended by itself
                self._save()
            slot = self._attached.active_slot()
            conditions = self._sampler.sample(
                uses_gpu=self._device.uses_gpu(slot.device if slot is not None else None),
                has_project=slot is not None,
                user_paused=memory.user_paused,
                snoozed_until=memory.snoozed_until,
                network_mb_this_month=self._metering.month_bytes(now) / 1e6,
            )
            self.notes = conditions.notes
            decision = decide(conditions, memory.preferences, _local(now))
            await self._carry_out(decision)

    async def _carry_out(self, decision: Decision) -> None:
        runner = self._attached.runner
        if decision.action == "pause":
            if runner is not None:
                await runner.pause()
        else:
            assert runner is not None  # the policy never runs without a project
            runner.ensure_started()
            if decision.threads != runner.threads and runner.state == "ready":
                await runner.set_threads(decision.threads)
            await runner.resume(decision.duty)
        self.decision = decision
        result = outcome(decision, runner.status() if runner is not None else None)
        if result != self.outcome:
            previous, self.outcome = self.outcome, result
            self.since = self._clock.time()
            log.info("%s: %s", result.state, result.reason)
            self._events.publish(
                StateChanged(result.state, previous.state, result.code, result.reason)
            )


def _local(now: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(now).astimezone()
