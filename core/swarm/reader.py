"""LocalSwarms: the local swarms running on this computer, as the engine last read their records.

A running ``barnraise swarm`` announces itself in the user's runtime folder (``record``). The engine
reads those records every ``swarm_interval`` seconds, off the loop, and uses the last reading to
offer the swarms, to show where a ``local_swarm`` project joins now, and to name the processes the
CPU sensor must not count as other programs' (the sensor asks only every few seconds). The runner
reads the record afresh when it starts its peer: the swarm's ports change every run.

``outdated`` tells the engine that the swarm a peer joined has stopped or was started again (a new
run, new addresses): that peer is then rebuilt against the run that is there now, or fails with a
message saying how to start one. A damaged record is warned about once per version of the file, not
at every reading.
"""

from __future__ import annotations

import asyncio

from core.config.paths import UserDirs
from core.swarm.record import LocalSwarm, Warned, running_swarms, swarm_pids
from core.util.blocking import BlockingPool


class LocalSwarms:
    def __init__(self, dirs: UserDirs, *, pool: BlockingPool | None = None) -> None:
        """``pool``: where the records are read (the engine's); without one, a thread of the
        loop's default executor."""
        self._dirs = dirs
        self._pool = pool
        self._warned: Warned = set()
        self.records: list[LocalSwarm] = []
        """The last reading, oldest swarm first."""

    async def refresh(self) -> list[LocalSwarm]:
        """Read the records now (in a thread: stale ones are deleted, processes looked up)."""
        if self._pool is not None:
            records = await self._pool.run(running_swarms, self._dirs, warned=self._warned)
        else:
            records = await asyncio.to_thread(running_swarms, self._dirs, warned=self._warned)
        self.records = records
        return self.records

    def find(self, project: str) -> LocalSwarm | None:
        """The running swarm of ``project`` as last read."""
        return next((s for s in self.records if s.project == project), None)

    async def find_fresh(self, project: str) -> LocalSwarm | None:
        """The running swarm of ``project``, read now."""
        await self.refresh()
        return self.find(project)

    def pids(self) -> list[int]:
        """The swarms' processes that still run (for the CPU sensor, which adds their children)."""
        return swarm_pids(self.records)

    def outdated(self, joined: LocalSwarm | None, project: str) -> bool:
        """The run ``joined`` (the one a peer was started against) is no longer the one running."""
        if joined is None:
            return False
        current = self.find(project)
        return current is None or current.key != joined.key
