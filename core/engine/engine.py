"""Engine: the long-running service that contributes for one user.

``await Engine.open(config)`` opens its parts (``parts``: settings file, ledger, identity, sensors)
and then starts the active project's account and runner and the loops, so an engine never has a
missing part; ``close`` stops them in reverse, each even if another fails, and raises
``ShutdownIncomplete`` listing what failed.
The scheduler loop reads the conditions, asks the pure policy what to do and carries the decision
out (pause within one layer's compute, resume, throttle, threads). Commands come from the control
server under the names of the API's calls (``EngineApi``: start, pause, resume, snooze,
set_settings, attach, activate_project, detach, login, logout, ...) and fail with the engine's own
errors (``errors``), which the server maps onto the API's; every change is published as a typed
event, and contribution is metered into the ledger.
The collaboration's completed epochs become the loss curve (``history``); demo swarms running on
this computer are followed (``core.swarm``) to offer them (``offers``), to join them wherever
they listen, and to keep their CPU use out of "other programs'"; ``diagnostics`` answers bug reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
import os
from collections.abc import Mapping
from pathlib import Path

from core import __version__
from core.account import CredentialStore
from core.api.events import (
    AccountChanged,
    ErrorRaised,
    ManifestUpdated,
    ProjectsChanged,
    StateChanged,
)
from core.api.schema import (
    API_VERSION,
    AccountInfo,
    AttachRequest,
    Diagnostics,
    EngineState,
    Leaderboard,
    MyRank,
    Network,
    ProjectInfo,
    ProjectOffer,
    ProjectPreview,
    Settings,
    SettingValue,
    Statistics,
    TrainingHistory,
)
from core.api.settings import settings_view
from core.engine.account import Account
from core.engine.config import EngineConfig
from core.engine.device import DeviceChoice
from core.engine.diagnostics import diagnostics
from core.engine.errors import (
    AlreadyAttached,
    InvalidArgument,
    NotJoinedByUrl,
    SettingsNotSaved,
    ShutdownIncomplete,
    UnknownProject,
)
from core.engine.events import EventBus
from core.engine.joining import Verdict, attach_slot, look_for_update, preview
from core.engine.manifest_updates import ManifestPoll, needs_restart
from core.engine.offers import project_offers
from core.engine.parts import Closing, EngineParts
from core.engine.peer_events import PeerEvents
from core.engine.progress import ProgressMeter
from core.engine.projects import NetworkChoice, ProjectRunner, ProjectSlot
from core.engine.views import network_lines, network_view, project_info, statistics_view
from core.policy import STARTING, Decision, decide, outcome
from core.scheduler import ConditionSampler
from core.swarm import SwarmFollower
from core.util.clock import SYSTEM_CLOCK, Clock
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)


class Engine:
    """Made by ``Engine.open`` (the constructor takes parts already opened)."""

    def __init__(
        self,
        config: EngineConfig,
        parts: EngineParts,
        *,
        events: EventBus,
        credentials: CredentialStore,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.config = config
        self.events = events
        self._parts = parts
        self._blocking = parts.blocking
        self._account = Account(
            credentials, on_change=self._account_changed, blocking=parts.blocking
        )
        self._clock = clock
        self._sampler = parts.sampler
        self._file = parts.file
        self._identity = parts.identity
        self.memory = parts.memory
        self.ledger = parts.ledger
        self.metering = parts.metering
        self.curve = parts.curve
        self.swarms = parts.swarms
        self.runner: ProjectRunner | None = None
        """The active project's peer; None while no project is attached."""
        self.started = clock.time()
        self._tasks = BackgroundTasks("engine")
        self._wake = asyncio.Event()
        self._peer_events = PeerEvents(self.events, self._wake, parts.metering, parts.curve)
        self._progress = ProgressMeter(config, parts.metering, events, lambda: self.runner)
        self._apply_lock = asyncio.Lock()
        self._decision: Decision | None = None
        """The policy's last decision; None before the first tick."""
        self._outcome = STARTING
        self._since = clock.time()
        self._notes: tuple[str, ...] = ()
        self._threads = 0
        self.device = DeviceChoice()
        self.stopped = asyncio.Event()
        self._updating = asyncio.Lock()
        """One look for a manifest update at a time (the poll's, or one asked for)."""
        self._switching = asyncio.Lock()
        """One switch of the active project at a time (``activate_project``)."""
        self._poll = ManifestPoll(lambda: list(self.memory.projects), self._look_for_update)

    # ---- lifecycle -------------------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        config: EngineConfig,
        *,
        sampler: ConditionSampler | None = None,
        clock: Clock = SYSTEM_CLOCK,
        credentials: CredentialStore | None = None,
    ) -> Engine:
        """Open the parts, follow the active project and start the loops.

        If a step fails, what was opened is closed again and the step's error is raised."""
        events = EventBus(clock=clock)

        def ledger_failed(message: str) -> None:
            events.publish(ErrorRaised("ledger", message))

        parts = await EngineParts.open(
            config, sampler=sampler, clock=clock, on_ledger_error=ledger_failed
        )
        engine = cls(
            config, parts, events=events, credentials=credentials or CredentialStore(), clock=clock
        )
        try:
            await engine._begin()
        except BaseException:
            # each part that fails to close is logged; the error that stopped the opening is the news
            with contextlib.suppress(ShutdownIncomplete):
                await engine.close()
            raise
        return engine

    async def _begin(self) -> None:
        await self.device.look(self._blocking)  # before the first state and scheduler tick
        slot = self._slot(self.memory.active)
        if slot is not None:
            self._open_runner(slot)
        await self._follow_active()
        self._tasks.spawn("scheduler", self._schedule_loop())
        self._tasks.spawn("metering", self._progress.run())
        follower = SwarmFollower(
            self.swarms,
            interval=self.config.swarm_interval,
            followed=self._followed_swarm,
            peer=lambda: self.runner,
            joined=lambda runner: (runner.slot.name, runner.swarm),
            follow_account=self._follow_active,
            rebuild=self._rebuild_runner,
        )
        self._tasks.spawn("local-swarms", follower.run())
        self._tasks.spawn("manifest-updates", self._poll.run())

    async def close(self) -> None:
        """Stop training (dropping at most the current microbatch), write the ledger and settings.

        Every part is stopped even if another fails; each failure is logged with its traceback,
        and ``ShutdownIncomplete`` lists them all once everything has stopped."""
        closing = Closing()
        with closing.attempt("stopping the engine's loops"):
            await self._tasks.close()
        runner = self.runner
        if runner is not None:
            with closing.attempt(f"stopping the peer of {runner.slot.name}"):
                await runner.stop(self.config.stop_budget)
            with closing.attempt(f"counting the last contribution to {runner.slot.name}"):
                self._progress.meter(runner)
        with closing.attempt("closing the account"):
            await self._account.close()
        self._parts.close(closing)
        self.events.close()
        self.stopped.set()
        closing.raise_if_failed()

    # ---- commands (from the control API) ---------------------------------------------------------

    async def start(self) -> EngineState:
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
        self.memory.snoozed_until = self._clock.time() + minutes * 60.0
        return await self._changed()

    async def set_settings(self, values: Mapping[str, SettingValue]) -> Settings:
        self.memory.preferences = self.memory.preferences.updated(values)  # or PreferencesError
        await self._changed()
        return self.settings()

    async def attach(self, request: AttachRequest) -> ProjectInfo:
        if request.is_url:  # fetched, checked, pinned and copied; or refused saying why
            slot = await attach_slot(
                request, self.memory.projects, self.config.manifest_copy, self._blocking
            )
        else:
            slot = await self._blocking.run(  # a manifest that cannot be used: ManifestError
                ProjectSlot.from_manifest,
                _manifest_path(request.manifest),
                initial_peers=tuple(request.initial_peers),
                data_base=request.data_base,
                device=request.device,
                local_swarm=request.local_swarm,
            )
        if any(s.name == slot.name for s in self.memory.projects):
            raise AlreadyAttached(f"project {slot.name!r} is already attached; detach it first")
        if slot.local_swarm:
            await self.swarms.refresh()  # so that the answer says where it joins now
        self.memory.projects.append(slot)
        if self.memory.active is None:
            self._make_active(slot)
            await self._follow_active()
        self._projects_changed()
        self._poll.wake()
        await self._changed()
        return self._project_info(slot)

    async def preview_project(self, url: str) -> ProjectPreview:
        """What the project at ``url`` is and would use here, its signed manifest checked."""
        return await preview(url, self.memory.projects, self.device)

    async def check_project(self, name: str) -> ProjectInfo:
        """Look now for a signed update of project ``name`` (joined by URL)."""
        slot = self._slot(name)
        if slot is None:
            raise UnknownProject(f"no attached project is called {name!r}")
        if slot.source_url is None:
            raise NotJoinedByUrl(
                f"{name} was attached from a manifest file: there is no project URL to look at"
            )
        await self._look_for_update(slot)  # ManifestUnreachable when it does not answer
        current = self._slot(name)
        if current is None:
            raise UnknownProject(f"{name} was detached meanwhile")
        return self._project_info(current)

    async def detach(self, name: str) -> list[ProjectInfo]:
        slot = self._slot(name)
        if slot is None:
            raise UnknownProject(f"no attached project is called {name!r}")
        if self.memory.active == name:
            await self._stop_active()
        # by name: a signed update may have replaced the slot while the peer stopped
        self.memory.projects = [s for s in self.memory.projects if s.name != name]
        if self.memory.active is None and self.memory.projects:
            self._make_active(self.memory.projects[0])
        await self._follow_active()
        self._projects_changed()
        await self._changed()
        return self.projects()

    async def activate_project(self, name: str) -> ProjectInfo:
        """Contribute to the attached project ``name`` instead of the active one.

        The active peer stops as a detach stops it (its contribution is counted; the ledger keeps
        every project's rows), ``name`` becomes active and its peer starts on the scheduler's next
        "run", as after an attach; the account follows to its coordinator. Already active: nothing
        changes."""
        slot = self._slot(name)
        if slot is None:
            raise UnknownProject(f"no attached project is called {name!r}")
        if self.memory.active == name:
            return self._project_info(slot)
        async with self._switching:
            # an attach while the peer stops may make another project active: stop that one too
            while self.memory.active is not None or self.runner is not None:
                await self._stop_active()
            # by name: detached, or replaced by a signed update, while the peer stopped
            current = self._slot(name)
            if current is None and self.memory.projects:
                self._make_active(self.memory.projects[0])  # as a detach leaves it
            elif current is not None:
                self._make_active(current)
            await self._follow_active()
        self._projects_changed()
        await self._changed()
        if current is None:
            raise UnknownProject(f"{name} was detached meanwhile")
        return self._project_info(current)

    async def login(self, username: str, password: str, *, signup: bool = False) -> AccountInfo:
        """Log in at the active project's coordinator (signing up first with ``signup``)."""
        return await self._account.login(username, password, signup=signup)

    async def logout(self) -> AccountInfo:
        info = await self._account.logout()
        runner = self.runner
        if runner is not None and self._account.moderated and runner.state != "stopped":
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
            progress=self._progress.progress(),
            threads=decision.threads if decision else 0,
            duty=decision.duty if decision else 0.0,
            notes=list(self._notes),
            last_error=self.runner.error if self.runner is not None else None,
            network=self._network(),
            device=self.device.view(slot.device if slot is not None else None),
        )

    def _network(self) -> Network | None:
        network = self.runner.network() if self.runner is not None else None
        return network_view(network) if network is not None else None

    def settings(self) -> Settings:
        return settings_view(self.memory.preferences)

    def account(self) -> AccountInfo:
        """The login at the active project's coordinator, as the engine holds it."""
        return self._account.info()

    async def leaderboard(self, limit: int = 10) -> Leaderboard:
        return await self._account.leaderboard(limit)

    async def my_rank(self) -> MyRank:
        return await self._account.my_rank()

    def projects(self) -> list[ProjectInfo]:
        return [self._project_info(s) for s in self.memory.projects]

    async def offers(self) -> list[ProjectOffer]:
        """Demo swarms running on this computer first, then the attached projects."""
        swarms = await self.swarms.refresh()
        return await project_offers(
            swarms,
            list(self.memory.projects),
            self.memory.active,
            now=self._clock.time(),
            blocking=self._blocking,
        )

    def history(self) -> TrainingHistory:
        """The active project's loss curve, oldest first."""
        name = self.memory.active
        if name is None:
            return TrainingHistory(None, [])
        return TrainingHistory(name, self.curve.points(name))

    async def diagnostics(self, secrets: list[str]) -> Diagnostics:
        """For a bug report; ``secrets`` (the control token) and the login's are blotted out."""
        hidden = [*secrets, *self._account.secrets()]
        details = self.runner.network_diagnostics() if self.runner is not None else None
        found = await self.device.look(self._blocking)  # temperatures and others' use change
        return await diagnostics(
            self.config,
            blocking=self._blocking,
            started=self.started,
            secrets=hidden,
            network=network_lines(details) if details is not None else [],
            accelerator=found.details(),
        )

    def statistics(self, project: str | None, days: int) -> Statistics:
        if not 1 <= days <= 3660:
            raise InvalidArgument("days must be between 1 and 3660")
        if project is not None and project not in self._known_projects():
            raise UnknownProject(f"no statistics for a project called {project!r}")
        self._progress.meter()
        self.metering.flush_all()  # the answer comes from the ledger itself
        return statistics_view(self.ledger, project, days, now=self._clock.time())

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
        """After a command: remember it, act on it now, and answer with the new state.

        A settings file that cannot be written does not undo the command: it is carried out and
        holds until the engine stops, and the caller learns that it was not saved."""
        try:
            self._file.save(self.memory)
        except SettingsNotSaved as exc:
            await self._apply()
            raise SettingsNotSaved(f"{exc}; the change holds until the engine stops") from exc
        await self._apply()
        return self.state()

    async def _apply(self) -> None:
        async with self._apply_lock:
            now = self._clock.time()
            if self.memory.snoozed_until is not None and self.memory.snoozed_until <= now:
                self.memory.snoozed_until = None  # the snooze ended by itself
                self._save_quietly()
            slot = self._slot(self.memory.active) if self.memory.active else None
            conditions = self._sampler.sample(
                uses_gpu=self.device.uses_gpu(slot.device if slot is not None else None),
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
            self._since = self._clock.time()
            log.info("%s: %s", result.state, result.reason)
            self.events.publish(
                StateChanged(result.state, previous.state, result.code, result.reason)
            )

    # ---- helpers ---------------------------------------------------------------------------------

    def _open_runner(self, slot: ProjectSlot) -> None:
        self.runner = ProjectRunner(
            slot,
            work_dir=self.config.work_dir(slot.name),
            identity=self._identity,
            on_event=lambda event: self._peer_events.handle(slot.name, event),
            account=self._account,
            swarms=self.swarms,
            blocking=self._blocking,
            network=lambda: NetworkChoice(
                self.memory.preferences.listen_port, self.memory.preferences.offer_relay
            ),
        )
        self._threads = 0

    async def _stop_active(self) -> None:
        """Stop the active project's peer and count its last contribution; none is active after."""
        runner, self.runner = self.runner, None
        # before the stop, which takes a while (a last checkpoint): a scheduler tick meanwhile
        # must see no project, not a project without its runner
        self.memory.active = None
        if runner is not None:
            await runner.stop(self.config.stop_budget)
            self._progress.meter(runner)

    def _make_active(self, slot: ProjectSlot) -> None:
        """``slot`` becomes the active project, its peer built on the scheduler's next "run"."""
        self.memory.active = slot.name
        self._open_runner(slot)

    async def _follow_active(self) -> None:
        """Point the account at the active project's coordinator (if any)."""
        slot = self._slot(self.memory.active)
        manifest = slot.manifest if slot is not None else None
        swarm = self.swarms.find(slot.name) if slot is not None and slot.local_swarm else None
        # a demo swarm's manifest names its coordinator, which listens on a new port every run
        await self._account.select(swarm.manifest if swarm is not None else manifest)

    def _followed_swarm(self) -> str | None:
        """The active project, when it joins the local swarm of that name."""
        slot = self._slot(self.memory.active)
        return slot.name if slot is not None and slot.local_swarm else None

    async def _rebuild_runner(self, runner: ProjectRunner) -> None:
        """Stop the peer; the next "run" builds a new one from scratch."""
        await runner.stop(self.config.stop_budget)
        self._progress.meter(runner)
        if self.runner is runner:
            self._open_runner(runner.slot)
        self._wake.set()

    async def _look_for_update(self, slot: ProjectSlot) -> float:
        """Fetch what ``slot``'s URL serves and act on the verdict; the seconds until the next
        look. An update taken restarts the running peer when it changes what the peer runs on
        (``manifest_updates.needs_restart``); else the peer takes it at its next start."""
        async with self._updating:
            current = self._slot(slot.name)
            if current is None or current.source_url is None:
                return 0.0  # detached meanwhile: the poll forgets it
            verdict = await look_for_update(current, self._blocking)
            if self._slot(slot.name) is not current:
                return verdict.interval  # detached (or replaced) while the answer came
            await self._take(current, verdict)
            return verdict.interval

    async def _take(self, slot: ProjectSlot, verdict: Verdict) -> None:
        """Record ``verdict`` on ``slot``, tell it, and follow an applied update."""
        if verdict.outcome == "same":
            if slot.update_refused is not None:  # the refused version is no longer served
                self._replace_slot(dataclasses.replace(slot, update_refused=None))
            return
        if verdict.outcome == "refused":
            if slot.update_refused == verdict.reason:
                return  # told already
            log.warning("%s: %s", slot.name, verdict.reason)
            self._replace_slot(dataclasses.replace(slot, update_refused=verdict.reason))
            self.events.publish(
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
        self._replace_slot(updated)
        self.events.publish(
            ManifestUpdated(slot.name, verdict.version, applied=True, reason=verdict.reason)
        )
        runner = self.runner
        if runner is None or runner.slot.name != slot.name:
            return
        runner.slot = updated
        await self._follow_active()  # the coordinator may have moved
        if needs_restart(verdict.changed) and runner.state in ("starting", "ready"):
            await self._rebuild_runner(runner)

    def _replace_slot(self, slot: ProjectSlot) -> None:
        self.memory.projects = [slot if s.name == slot.name else s for s in self.memory.projects]
        self._save_quietly()

    def _slot(self, name: str | None) -> ProjectSlot | None:
        return next((s for s in self.memory.projects if s.name == name), None)

    def _known_projects(self) -> set[str]:
        return {s.name for s in self.memory.projects} | set(self.ledger.projects())

    def _project_info(self, slot: ProjectSlot) -> ProjectInfo:
        swarm = self.swarms.find(slot.name) if slot.local_swarm else None
        return project_info(slot, active=slot.name == self.memory.active, swarm=swarm)

    def _save_quietly(self) -> None:
        """Save the settings from the scheduler loop: a failure is told, and the loop goes on."""
        try:
            self._file.save(self.memory)
        except SettingsNotSaved as exc:
            log.error("%s", exc)
            self.events.publish(ErrorRaised("settings", str(exc)))

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
        raise InvalidArgument("the manifest path is empty")
    return Path(text)
