"""ManifestFollower: each look at a URL-joined project's signed manifest, and what follows from it.

A look (the poll's, ``manifest_updates.ManifestPoll``, or one asked for with
``EngineApi.check_project``) fetches what the project's URL serves and judges it (``joining``);
the verdict is recorded on the project's slot (the reason a version was refused, until it is no
longer served) and told once as ``ManifestUpdated``. An update taken is the slot's from now on: the
running peer takes it at its next start, or at once, rebuilt, when it changes what the peer runs
on (``manifest_updates.needs_restart``); the account follows, since the coordinator may have moved.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from core.api.events import ManifestUpdated
from core.engine.attached import AttachedProjects
from core.engine.events import EventBus
from core.engine.join.joining import Verdict, look_for_update
from core.engine.join.manifest_updates import needs_restart
from core.engine.projects import ProjectSlot
from core.util.blocking import BlockingPool

log = logging.getLogger(__name__)


class ManifestFollower:
    def __init__(
        self, attached: AttachedProjects, events: EventBus, blocking: BlockingPool
    ) -> None:
        self._attached = attached
        self._events = events
        self._blocking = blocking
        self._looking = asyncio.Lock()
        """One look at a time (the poll's, or one asked for)."""

    async def look(self, slot: ProjectSlot) -> float:
        """Fetch what ``slot``'s URL serves and act on the verdict; the seconds until the next
        look (``ManifestUnreachable`` when the URL does not answer)."""
        async with self._looking:
            current = self._attached.slot(slot.name)
            if current is None or current.source_url is None:
                return 0.0  # detached meanwhile: the poll forgets it
            verdict = await look_for_update(current, self._blocking)
            if self._attached.slot(slot.name) is not current:
                return verdict.interval  # detached (or replaced) while the answer came
            await self._take(current, verdict)
            return verdict.interval

    async def _take(self, slot: ProjectSlot, verdict: Verdict) -> None:
        """Record ``verdict`` on ``slot``, tell it, and follow an applied update."""
        if verdict.outcome == "same":
            if slot.update_refused is not None:  # the refused version is no longer served
                self._attached.replace(dataclasses.replace(slot, update_refused=None))
            return
        if verdict.outcome == "refused":
            if slot.update_refused == verdict.reason:
                return  # told already
            log.warning("%s: %s", slot.name, verdict.reason)
            self._attached.replace(dataclasses.replace(slot, update_refused=verdict.reason))
            self._events.publish(
                ManifestUpdated(slot.name, verdict.version, applied=False, reason=verdict.reason)
            )
            return
        assert verdict.fetched is not None
        updated = dataclasses.replace(
            slot,
            description=verdict.fetched.manifest.project.description,
            manifest_version=verdict.version,
            update_refused=None,
        )
        log.info("%s: %s", slot.name, verdict.reason)
        self._attached.replace(updated)
        self._events.publish(
            ManifestUpdated(slot.name, verdict.version, applied=True, reason=verdict.reason)
        )
        runner = self._attached.runner
        if runner is None or runner.slot.name != slot.name:
            return
        runner.slot = updated
        await self._attached.follow_active()  # the coordinator may have moved
        if needs_restart(verdict.changed) and runner.state in ("starting", "ready"):
            await self._attached.rebuild(runner)
