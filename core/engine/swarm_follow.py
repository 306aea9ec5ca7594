"""SwarmFollower: keeps the active project on the current run of its demo swarm.

A ``barnraise swarm`` listens on new ports every run, and a moderated one starts a new coordinator
on a new port too. Every ``interval`` seconds the follower reads the swarm records again; when the
active ``local_swarm`` project's swarm is a new run, the account is pointed at that run's
coordinator, and when the run the peer joined has stopped or been replaced, the peer is rebuilt
(the runner then joins the new run, or says that no swarm runs and how to start one).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from core.engine.local_swarms import LocalSwarms
from core.engine.projects import ProjectRunner, ProjectSlot

log = logging.getLogger(__name__)


class SwarmFollower:
    def __init__(
        self,
        swarms: LocalSwarms,
        *,
        interval: float,
        active: Callable[[], ProjectSlot | None],
        runner: Callable[[], ProjectRunner | None],
        follow_account: Callable[[], Awaitable[None]],
        rebuild: Callable[[ProjectRunner], Awaitable[None]],
    ) -> None:
        self._swarms = swarms
        self._interval = interval
        self._active = active
        self._runner = runner
        self._follow_account = follow_account
        self._rebuild = rebuild
        self._seen: tuple[str, int, float, float] | None = None

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.look()
            except Exception:  # the loop must outlive one bad look
                log.exception("following the local demo swarms failed")

    async def look(self) -> None:
        await self._swarms.refresh()
        slot = self._active()
        swarm = self._swarms.find(slot.name) if slot is not None and slot.local_swarm else None
        key = swarm.key if swarm is not None else None
        if key is not None and key != self._seen:
            await self._follow_account()  # a new run has its coordinator elsewhere
        self._seen = key
        runner = self._runner()
        if runner is not None and self._swarms.outdated(runner.swarm, runner.slot.name):
            log.info("the demo swarm of %s stopped or started again: rejoining", runner.slot.name)
            await self._rebuild(runner)
