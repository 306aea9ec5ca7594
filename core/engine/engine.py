"""Engine: the long-running service that contributes for one user.

Builds its parts from one ``EngineConfig`` and starts them in dependency order — settings file,
ledger, sensors, the active project's account and runner, the scheduler loop — and stops them in
reverse.
The scheduler loop reads the conditions, asks the pure policy what to do and carries the decision
out (pause within one layer's compute, resume, throttle, threads). Commands (start, pause, resume,
snooze, preferences, attach, detach, logout; logins go to ``account``) come from the control server;
every change is published as a typed event, and contribution is metered into the ledger.
The collaboration's completed epochs become the loss curve (``history``); demo swarms running on
this computer are followed (``local_swarms``) to offer them (``offers``), to join them wherever
they listen, and to keep their CPU use out of "other programs'"; ``diagnostics`` answers bug reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from core import __version__
from core.account import CredentialStore
from core.api.errors import BadRequest, Conflict, NotFound
from core.api.events import (
    AccountChanged,
    ErrorRaised,
    PeersSeen,
    ProgressUpdated,
    ProjectsChanged,
    StateChanged,
)
from core.api.schema import (
    API_VERSION,
    AccountInfo,
    AttachRequest,
    Diagnostics,
    EngineState,
    Progress,
    ProjectInfo,
    ProjectOffer,
    Settings,
    SettingValue,
    Statistics,
    TrainingHistory,
)
from core.api.settings import settings_view
from core.engine.account import Account
from core.engine.config import EngineConfig
from core.engine.diagnostics import diagnostics
from core.engine.events import EventBus
from core.engine.history import History
from core.engine.local_swarms import LocalSwarms
from core.engine.metering import Metering
from core.engine.offers import project_offers
from core.engine.peer_events import PeerEvents
from core.engine.projects import ProjectRunner, ProjectSlot
from core.engine.store import EngineFile, EngineMemory
from core.engine.swarm_follow import SwarmFollower
from core.engine.views import progress_view, project_info, statistics_view
from core.net import Identity
from core.policy import STARTING, Decision, PreferencesError, decide, outcome
from core.project.errors import ManifestError
from core.scheduler import ConditionSampler, GpuSensor, SystemSensor, default_idle_sensor
from core.stats import Ledger
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)


class Engine:
    def __init__(
        self,
        config: EngineConfig,
        *,
        sampler: ConditionSampler | None = None,
        clock: Callable[[], float] = time.time,
        credentials: CredentialStore | None = None,
    ) -> None:
        self.config = config
        self.events = EventBus(clock=clock)
        self.account = Account(credentials or CredentialStore(), on_change=self._account_changed)
        self._clock = clock
        self._sampler = sampler
        self._file = EngineFile(config.settings_file)
        self.memory = EngineMemory()
        self.ledger: Ledger | None = None
        self.metering: Metering | None = None
        self.curve: History | None = None
        self.swarms = LocalSwarms(config.dirs)
        self.runner: ProjectRunner | None = None
        self.started = clock()
        self._identity: Identity | None = None
        self._tasks = BackgroundTasks("engine")
        self._wake = asyncio.Event()
        self._peer_events = PeerEvents(self.events, self._wake)
        self._apply_lock = asyncio.Lock()
        self._decision: Decision | None = None
        self._outcome = STARTING
        self._since = clock()
        self._notes: tuple[str, ...] = ()
        self._threads = 0
        self._peers_seen = -1
        self._last_progress: Progress | None = None
        self.stopped = asyncio.Event()

    # ---- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        dirs = self.config.dirs
        for folder in (dirs.config, dirs.data, dirs.cache, dirs.runtime):
            dirs.ensure(folder)
        self.started = self._clock()
        self.memory = self._file.load()
        self.ledger = Ledger(self.config.ledger_file)
        self.metering = Metering(self.ledger, clock=self._clock)
        self.curve = History(self.ledger, on_error=self._ledger_failed)
        self._peer_events.metering, self._peer_events.curve = self.metering, self.curve
        self._identity = Identity.load_or_create(dirs.identity_file)
        await self.swarms.refresh()
        if self._sampler is None:
            # a demo swarm on this computer is the collaboration we join, not a program to yield to
            system = SystemSensor(
                exclude=self.swarms.pids, exclude_every=self.config.swarm_interval
            )
            self._sampler = ConditionSampler(
                default_idle_sensor(), system, GpuSensor(), headless=self.config.headless
            )
        if self.memory.active is not None:
            self._open_runner(self.memory.active)
        await self._follow_active()
        self._tasks.spawn("scheduler", self._schedule_loop())
        self._tasks.spawn("metering", self._metering_loop())
        follower = SwarmFollower(
            self.swarms,
            interval=self.config.swarm_interval,
            active=lambda: self._slot(self.memory.active),
            runner=lambda: self.runner,
            follow_account=self._follow_active,
            rebuild=self._rebuild_runner,
        )
        self._tasks.spawn("local-swarms", follower.run())

    async def close(self) -> None:
        """Stop training (dropping at most the current microbatch), write the ledger and settings."""
        await self._tasks.close()
        if self.runner is not None:
            await self.runner.stop(self.config.stop_budget)
            self._meter_runner()
        await self.account.close()
        if self.metering is not None:
            with contextlib.suppress(Exception):
                self.metering.flush_all()
        if self.ledger is not None:
            self.ledger.close()
        if self._sampler is not None:
            self._sampler.close()
        with contextlib.suppress(Exception):
            self._file.save(self.memory)
        self.events.close()
        self.stopped.set()

    # ---- commands (from the control API) ---------------------------------------------------------

    async def start_contributing(self) -> EngineState:
        self.memory.preferences = self.memory.preferences.updated({"contribute": True})
        self.memory.user_paused = False
        self.memory.snoozed_until = None
        return await self._changed()

    async def pause(self) -> EngineState:
        self.memory.user_paused = True
        return await self._changed()

    async def resume(self) -> EngineState:
        self.memory.user_paused = False
        self.memory.snoozed_until = None
        return await self._changed()

    async def snooze(self, minutes: float) -> EngineState:
        self.memory.snoozed_until = self._clock() + minutes * 60.0
        return await self._changed()

    async def set_preferences(self, values: Mapping[str, SettingValue]) -> Settings:
        try:
            self.memory.preferences = self.memory.preferences.updated(values)
        except PreferencesError as exc:
            raise BadRequest(str(exc)) from None
        await self._changed()
        return self.settings()

    async def attach(self, request: AttachRequest) -> ProjectInfo:
        try:
            slot = await asyncio.to_thread(
                ProjectSlot.from_manifest,
                _manifest_path(request.manifest),
                initial_peers=tuple(request.initial_peers),
                data_base=request.data_base,
                device=request.device,
                local_swarm=request.local_swarm,
            )
        except ManifestError as exc:
            raise BadRequest(str(exc)) from None
        if any(s.name == slot.name for s in self.memory.projects):
            raise Conflict(f"project {slot.name!r} is already attached; detach it first")
        if slot.local_swarm:
            await self.swarms.refresh()  # so that the answer says where it joins now
        self.memory.projects.append(slot)
        if self.memory.active is None:
            self.memory.active = slot.name
            self._open_runner(slot.name)
            await self._follow_active()
        self._projects_changed()
        await self._changed()
        return self._project_info(slot)

    async def detach(self, name: str) -> list[ProjectInfo]:
        slot = self._slot(name)
        if slot is None:
            raise NotFound(f"no attached project is called {name!r}")
        if self.memory.active == name:
            runner, self.runner = self.runner, None
            if runner is not None:
                await runner.stop(self.config.stop_budget)
                self._meter_runner(runner)
            self.memory.active = None
        self.memory.projects.remove(slot)
        if self.memory.active is None and self.memory.projects:
            self.memory.active = self.memory.projects[0].name
            self._open_runner(self.memory.active)
        await self._follow_active()
        self._projects_changed()
        await self._changed()
        return self.projects()

    async def logout(self) -> AccountInfo:
        info = await self.account.logout()
        runner = self.runner
        if runner is not None and self.account.moderated and runner.state != "stopped":
            await self._rebuild_runner(runner)  # its pass is no longer ours to renew
        return info

    # ---- views -----------------------------------------------------------------------------------

    def state(self) -> EngineState:
        decision = self._decision
        slot = self._slot(self.memory.active) if self.memory.active else None
        return EngineState(
            api_version=API_VERSION,
            engine_version=__version__,
            pid=os.getpid(),
            state=self._outcome.state,
            code=self._outcome.code,
            reason=self._outcome.reason,
            since=self._since,
            contribute=self.memory.preferences.contribute,
            user_paused=self.memory.user_paused,
            snoozed_until=self.memory.snoozed_until,
            project=self._project_info(slot) if slot is not None else None,
            progress=self._progress(),
            threads=decision.threads if decision else 0,
            duty=decision.duty if decision else 0.0,
            notes=list(self._notes),
            last_error=self.runner.error if self.runner is not None else None,
        )

    def settings(self) -> Settings:
        return settings_view(self.memory.preferences)

    def projects(self) -> list[ProjectInfo]:
        return [self._project_info(s) for s in self.memory.projects]

    async def offers(self) -> list[ProjectOffer]:
        """Demo swarms running on this computer first, then the attached projects."""
        swarms = await self.swarms.refresh()
        return await project_offers(
            swarms, list(self.memory.projects), self.memory.active, now=self._clock()
        )

    def history(self) -> TrainingHistory:
        """The active project's loss curve, oldest first."""
        name = self.memory.active
        if name is None or self.curve is None:
            return TrainingHistory(None, [])
        return TrainingHistory(name, self.curve.points(name))

    async def diagnostics(self, secrets: list[str]) -> Diagnostics:
        """For a bug report; ``secrets`` (the control token) and the login's are blotted out."""
        hidden = [*secrets, *self.account.secrets()]
        return await diagnostics(self.config, started=self.started, secrets=hidden)

    def statistics(self, project: str | None, days: int) -> Statistics:
        if not 1 <= days <= 3660:
            raise BadRequest("days must be between 1 and 3660")
        if project is not None and project not in self._known_projects():
            raise NotFound(f"no statistics for a project called {project!r}")
        assert self.ledger is not None
        assert self.metering is not None
        self._meter_runner()
        self.metering.flush_all()  # the answer comes from the ledger itself
        return statistics_view(self.ledger, project, days, now=self._clock())

    # ---- the scheduler loop ----------------------------------------------------------------------

    async def _schedule_loop(self) -> None:
        while True:
            try:
                await self._apply()
            except Exception as exc:  # the loop must outlive one bad tick; say what happened
                log.exception("scheduler tick failed")
                self.events.publish(ErrorRaised("scheduler", str(exc) or type(exc).__name__))
            computing = self.runner is not None and self.runner.computing
            interval = self.config.tick_computing if computing else self.config.tick_resting
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._wake.wait()
            self._wake.clear()

    async def _changed(self) -> EngineState:
        """After a command: remember it, act on it now, and answer with the new state."""
        self._file.save(self.memory)
        await self._apply()
        return self.state()

    async def _apply(self) -> None:
        async with self._apply_lock:
            assert self._sampler is not None
            assert self.metering is not None
            now = self._clock()
            if self.memory.snoozed_until is not None and self.memory.snoozed_until <= now:
                self.memory.snoozed_until = None  # the snooze ended by itself
                self._file.save(self.memory)
            slot = self._slot(self.memory.active) if self.memory.active else None
            conditions = self._sampler.sample(
                uses_gpu=slot is not None and not slot.device.startswith("cpu"),
                has_project=slot is not None,
                user_paused=self.memory.user_paused,
                snoozed_until=self.memory.snoozed_until,
                network_mb_this_month=self.metering.month_bytes(now) / 1e6,
            )
            self._notes = conditions.notes
            decision = decide(conditions, self.memory.preferences, _local(now))
            await self._carry_out(decision)

    async def _carry_out(self, decision: Decision) -> None:
        runner = self.runner
        if decision.action == "pause":
            if runner is not None:
                await runner.pause()
        else:
            assert runner is not None  # the policy never runs without a project
            runner.ensure_started()
            if decision.threads != self._threads and runner.state == "ready":
                await runner.set_threads(decision.threads)
                self._threads = decision.threads
            await runner.resume(decision.duty)
        self._decision = decision
        result = outcome(decision, runner.status() if runner is not None else None)
        if result != self._outcome:
            previous, self._outcome = self._outcome, result
            self._since = self._clock()
            log.info("%s: %s", result.state, result.reason)
            self.events.publish(
                StateChanged(result.state, previous.state, result.code, result.reason)
            )

    # ---- metering and progress -------------------------------------------------------------------

    async def _metering_loop(self) -> None:
        assert self.metering is not None
        flushed = time.monotonic()
        while True:
            await asyncio.sleep(self.config.progress_interval)
            self._meter_runner()
            self._report_progress()
            if time.monotonic() - flushed >= self.config.flush_interval:
                flushed = time.monotonic()
                try:
                    self.metering.flush_all()
                except Exception as exc:  # the meter keeps what it could not write
                    log.error("writing the ledger failed: %s", exc)
                    self._ledger_failed(str(exc))

    def _meter_runner(self, runner: ProjectRunner | None = None) -> None:
        runner = runner or self.runner
        if runner is not None and self.metering is not None:
            self.metering.observe(runner.slot.name, runner.peer, runner.progress())

    def _report_progress(self) -> None:
        if self.runner is None or self.runner.peer is None:
            return
        progress = self._progress()
        if progress != self._last_progress:
            self._last_progress = progress
            self.events.publish(ProgressUpdated(self.runner.slot.name, progress))
        if progress.peers != self._peers_seen:
            self._peers_seen = progress.peers
            self.events.publish(PeersSeen(self.runner.slot.name, progress.peers))

    def _progress(self) -> Progress:
        if self.runner is None:
            return Progress()
        session = self.metering.session_samples if self.metering is not None else 0
        return progress_view(self.runner.progress(), session)

    # ---- helpers ---------------------------------------------------------------------------------

    def _open_runner(self, name: str) -> None:
        slot = self._slot(name)
        assert slot is not None
        assert self._identity is not None
        self.runner = ProjectRunner(
            slot,
            work_dir=self.config.work_dir(slot.name),
            identity=self._identity,
            on_event=lambda event: self._peer_events.handle(slot.name, event),
            account=self.account,
            swarms=self.swarms,
        )
        self._threads = 0

    async def _follow_active(self) -> None:
        """Point the account at the active project's coordinator (if any)."""
        slot = self._slot(self.memory.active)
        manifest = slot.manifest if slot is not None else None
        swarm = self.swarms.find(slot.name) if slot is not None and slot.local_swarm else None
        # a demo swarm's manifest names its coordinator, which listens on a new port every run
        await self.account.select(swarm.manifest if swarm is not None else manifest)

    async def _rebuild_runner(self, runner: ProjectRunner) -> None:
        """Stop the peer; the next "run" builds a new one from scratch."""
        await runner.stop(self.config.stop_budget)
        self._meter_runner(runner)
        if self.runner is runner:
            self._open_runner(runner.slot.name)
        self._wake.set()

    def _slot(self, name: str | None) -> ProjectSlot | None:
        return next((s for s in self.memory.projects if s.name == name), None)

    def _known_projects(self) -> set[str]:
        known = {s.name for s in self.memory.projects}
        if self.ledger is not None:
            known.update(self.ledger.projects())
        return known

    def _project_info(self, slot: ProjectSlot) -> ProjectInfo:
        swarm = self.swarms.find(slot.name) if slot.local_swarm else None
        return project_info(slot, active=slot.name == self.memory.active, swarm=swarm)

    def _ledger_failed(self, message: str) -> None:
        self.events.publish(ErrorRaised("ledger", message))

    def _account_changed(self, info: AccountInfo) -> None:
        self.events.publish(AccountChanged(info))
        self._wake.set()  # a peer waiting for a login may start now

    def _projects_changed(self) -> None:
        self.events.publish(
            ProjectsChanged([s.name for s in self.memory.projects], self.memory.active)
        )


def _local(now: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(now).astimezone()


def _manifest_path(text: str) -> Path:
    if not text.strip():
        raise BadRequest("the manifest path is empty")
    return Path(text)
