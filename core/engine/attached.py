"""AttachedProjects: the attached projects, the active one, its runner, and the account following it.

The engine contributes to one project at a time (``memory.active``); the active project has a
``ProjectRunner`` (whose peer starts on the scheduler's first "run"). The first project attached
becomes active. Detaching the active project, or switching to another (``switch_to``), stops its
peer as a shutdown does (its last contribution counted) before another becomes active; a peer is
rebuilt from scratch when what it runs on changed (a signed update, a demo swarm's new run, a
logout in a moderated project). Whenever the active project changes, or its coordinator may have
moved, the ``Account`` follows it. Each change of the list or of the active project is published
(``ProjectsChanged``); commands change ``memory`` here, and the engine saves it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from core.api.events import ProjectsChanged
from core.api.schema import ProjectInfo
from core.engine.account import Account
from core.engine.config import EngineConfig
from core.engine.errors import AlreadyAttached
from core.engine.events import EventBus
from core.engine.parts import Closing
from core.engine.projects import NetworkChoice, ProjectRunner, ProjectSlot
from core.engine.store import EngineMemory
from core.engine.views import project_info
from core.net import Identity
from core.swarm import LocalSwarms
from core.util.blocking import BlockingPool
from core.worker.events import PeerEvent


class AttachedProjects:
    def __init__(
        self,
        config: EngineConfig,
        memory: EngineMemory,
        *,
        identity: Identity,
        account: Account,
        swarms: LocalSwarms,
        blocking: BlockingPool,
        events: EventBus,
        on_peer_event: Callable[[str, PeerEvent], None],
        meter: Callable[[ProjectRunner], None],
        wake: asyncio.Event,
        save: Callable[[], None],
    ) -> None:
        """``on_peer_event``: a peer's event, with its project's name; ``meter``: count what a
        stopped peer contributed since last metered; ``wake``: the scheduler's next tick now;
        ``save``: write ``memory`` (a failure is told, not raised)."""
        self._config = config
        self._memory = memory
        self._identity = identity
        self._account = account
        self._swarms = swarms
        self._blocking = blocking
        self._events = events
        self._on_peer_event = on_peer_event
        self._meter = meter
        self._wake = wake
        self._save = save
        self.runner: ProjectRunner | None = None
        """The active project's peer; None while no project is active."""
        self._switching = asyncio.Lock()
        """One switch of the active project at a time (``switch_to``)."""

    # ---- reading ---------------------------------------------------------------------------------

    def slot(self, name: str | None) -> ProjectSlot | None:
        return next((s for s in self._memory.projects if s.name == name), None)

    def active_slot(self) -> ProjectSlot | None:
        return self.slot(self._memory.active) if self._memory.active else None

    def info(self, slot: ProjectSlot) -> ProjectInfo:
        swarm = self._swarms.find(slot.name) if slot.local_swarm else None
        return project_info(slot, active=slot.name == self._memory.active, swarm=swarm)

    def infos(self) -> list[ProjectInfo]:
        return [self.info(s) for s in self._memory.projects]

    def followed_swarm(self) -> str | None:
        """The active project, when it joins the local swarm of that name."""
        slot = self.slot(self._memory.active)
        return slot.name if slot is not None and slot.local_swarm else None

    # ---- the lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        """Follow the active project the settings file names: its runner, its account."""
        slot = self.slot(self._memory.active)
        if slot is not None:
            self._open_runner(slot)
        await self.follow_active()

    async def close(self, closing: Closing) -> None:
        """Stop the active peer (dropping at most the current microbatch) and count its last
        contribution, each attempted."""
        runner = self.runner
        if runner is not None:
            with closing.attempt(f"stopping the peer of {runner.slot.name}"):
                await runner.stop(self._config.stop_budget)
            with closing.attempt(f"counting the last contribution to {runner.slot.name}"):
                self._meter(runner)

    # ---- changes ---------------------------------------------------------------------------------

    async def attach(self, slot: ProjectSlot) -> None:
        """Add ``slot``, active if it is the first (``AlreadyAttached`` if its name is taken)."""
        if any(s.name == slot.name for s in self._memory.projects):
            raise AlreadyAttached(f"project {slot.name!r} is already attached; detach it first")
        if slot.local_swarm:
            await self._swarms.refresh()  # so that the answer says where it joins now
        self._memory.projects.append(slot)
        if self._memory.active is None:
            self._make_active(slot)
            await self.follow_active()
        self._changed()

    async def detach(self, name: str) -> None:
        """Remove the project ``name`` (attached); the first left becomes active if it was."""
        if self._memory.active == name:
            await self._stop_active()
        # by name: a signed update may have replaced the slot while the peer stopped
        self._memory.projects = [s for s in self._memory.projects if s.name != name]
        if self._memory.active is None and self._memory.projects:
            self._make_active(self._memory.projects[0])
        await self.follow_active()
        self._changed()

    async def switch_to(self, name: str) -> ProjectSlot | None:
        """Make the attached project ``name`` (not active now) the active one; None if it was
        detached meanwhile (the first left is active then, as a detach leaves it)."""
        async with self._switching:
            # an attach while the peer stops may make another project active: stop that one too
            while self._memory.active is not None or self.runner is not None:
                await self._stop_active()
            # by name: detached, or replaced by a signed update, while the peer stopped
            current = self.slot(name)
            if current is None and self._memory.projects:
                self._make_active(self._memory.projects[0])
            elif current is not None:
                self._make_active(current)
            await self.follow_active()
        self._changed()
        return current

    def replace(self, slot: ProjectSlot) -> None:
        """Put ``slot`` in the place of the slot of its name (a signed update's), and save."""
        self._memory.projects = [slot if s.name == slot.name else s for s in self._memory.projects]
        self._save()

    async def rebuild(self, runner: ProjectRunner) -> None:
        """Stop the peer; the next "run" builds a new one from scratch."""
        await runner.stop(self._config.stop_budget)
        self._meter(runner)
        if self.runner is runner:
            self._open_runner(runner.slot)
        self._wake.set()

    async def logged_out(self) -> None:
        """A moderated project's peer stops: its pass is no longer ours to renew."""
        runner = self.runner
        if runner is not None and self._account.moderated and runner.state != "stopped":
            await self.rebuild(runner)

    async def follow_active(self) -> None:
        """Point the account at the active project's coordinator (if any)."""
        slot = self.slot(self._memory.active)
        manifest = slot.manifest if slot is not None else None
        swarm = self._swarms.find(slot.name) if slot is not None and slot.local_swarm else None
        # a demo swarm's manifest names its coordinator, which listens on a new port every run
        await self._account.select(swarm.manifest if swarm is not None else manifest)

    def _open_runner(self, slot: ProjectSlot) -> None:
        memory = self._memory  # its preferences are read at each start of the peer
        self.runner = ProjectRunner(
            slot,
            work_dir=self._config.work_dir(slot.name),
            identity=self._identity,
            on_event=lambda event: self._on_peer_event(slot.name, event),
            account=self._account,
            swarms=self._swarms,
            blocking=self._blocking,
            network=lambda: NetworkChoice(
                memory.preferences.listen_port, memory.preferences.offer_relay
            ),
        )

    async def _stop_active(self) -> None:
        """Stop the active project's peer and count its last contribution; none is active after."""
        runner, self.runner = self.runner, None
        # before the stop, which takes a while (a last checkpoint): a scheduler tick meanwhile
        # must see no project, not a project without its runner
        self._memory.active = None
        if runner is not None:
            await runner.stop(self._config.stop_budget)
            self._meter(runner)

    def _make_active(self, slot: ProjectSlot) -> None:
        """``slot`` becomes the active project, its peer built on the scheduler's next "run"."""
        self._memory.active = slot.name
        self._open_runner(slot)

    def _changed(self) -> None:
        self._events.publish(
            ProjectsChanged([s.name for s in self._memory.projects], self._memory.active)
        )
