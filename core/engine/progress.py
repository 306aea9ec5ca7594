"""ProgressMeter: the active peer's totals metered, and its progress published when it changes.

Every ``progress_interval`` seconds the engine's loop takes what the peer's running totals grew
by (``Metering``), publishes ``progress`` and ``peers`` events when they differ from the last ones,
and every ``flush_interval`` writes the meters to the ledger; a ledger that cannot be written is
reported (the meters keep what they could not write, for the next try).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from core.api.events import ErrorRaised, PeersSeen, ProgressUpdated
from core.api.schema import Progress
from core.engine.config import EngineConfig
from core.engine.events import EventBus
from core.engine.metering import Metering
from core.engine.projects import ProjectRunner
from core.engine.views import progress_view

log = logging.getLogger(__name__)


class ProgressMeter:
    def __init__(
        self,
        config: EngineConfig,
        metering: Metering,
        events: EventBus,
        runner: Callable[[], ProjectRunner | None],
    ) -> None:
        self._config = config
        self._metering = metering
        self._events = events
        self._runner = runner
        self._last: Progress | None = None
        self._peers_seen = -1

    async def run(self) -> None:
        flushed = time.monotonic()
        while True:
            await asyncio.sleep(self._config.progress_interval)
            self.meter()
            self._report()
            if time.monotonic() - flushed >= self._config.flush_interval:
                flushed = time.monotonic()
                try:
                    self._metering.flush_all()
                except Exception as exc:  # the meter keeps what it could not write
                    log.error("writing the ledger failed: %s", exc)
                    self._events.publish(ErrorRaised("ledger", str(exc)))

    def meter(self, runner: ProjectRunner | None = None) -> None:
        """Count what the totals of ``runner`` (the active one by default) grew by."""
        runner = runner or self._runner()
        if runner is not None:
            self._metering.observe(runner.slot.name, runner.peer, runner.progress())

    def progress(self) -> Progress:
        runner = self._runner()
        if runner is None:
            return Progress()
        return progress_view(runner.progress(), self._metering.session_samples)

    def _report(self) -> None:
        runner = self._runner()
        if runner is None or runner.peer is None:
            return
        progress = self.progress()
        if progress != self._last:
            self._last = progress
            self._events.publish(ProgressUpdated(runner.slot.name, progress))
        if progress.peers != self._peers_seen:
            self._peers_seen = progress.peers
            self._events.publish(PeersSeen(runner.slot.name, progress.peers))
