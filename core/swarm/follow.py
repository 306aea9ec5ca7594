"""SwarmFollower: keeps the active project on the current run of its local swarm.

A ``barnraise swarm`` listens on new ports every run, and a moderated one starts a new coordinator
on a new port too. Every ``interval`` seconds the follower reads the swarm records again; when the
swarm of the project being followed is a new run, the account is pointed at that run's coordinator
(``follow_account``), and when the run the peer joined has stopped or been replaced, the peer is
rebuilt (``rebuild``; the engine's runner then joins the new run, or says that no swarm runs and
how to start one).

The follower knows nothing of the engine: it asks through callbacks which project is followed and
which peer runs (any object: the engine's ``ProjectRunner``), and acts through callbacks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from core.swarm.reader import LocalSwarms
from core.swarm.record import LocalSwarm

log = logging.getLogger(__name__)

Peer = TypeVar("Peer")


class SwarmFollower(Generic[Peer]):
    def __init__(
        self,
        swarms: LocalSwarms,
        *,
        interval: float,
        followed: Callable[[], str | None],
        peer: Callable[[], Peer | None],
        joined: Callable[[Peer], tuple[str, LocalSwarm | None]],
        follow_account: Callable[[], Awaitable[None]],
        rebuild: Callable[[Peer], Awaitable[None]],
    ) -> None:
        """``followed``: the active project, when it joins its local swarm (else None);
        ``peer``: the running peer, if any; ``joined``: that peer's project and the swarm run it
        was started against (None when it joined no local swarm)."""
        self._swarms = swarms
        self._interval = interval
        self._followed = followed
        self._peer = peer
        self._joined = joined
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
        project = self._followed()
        swarm = self._swarms.find(project) if project is not None else None
        key = swarm.key if swarm is not None else None
        if key is not None and key != self._seen:
            await self._follow_account()  # a new run has its coordinator elsewhere
        self._seen = key
        peer = self._peer()
        if peer is None:
            return
        name, joined = self._joined(peer)
        if self._swarms.outdated(joined, name):
            log.info("the demo swarm of %s stopped or started again: rejoining", name)
            await self._rebuild(peer)
