"""Engine: the long-running service that contributes for one user, composed of its parts.

``await Engine.open(config)`` opens its parts (``parts``: settings file, ledger, identity, sensors)
and then follows the active project (``attached``: its runner, the account at its coordinator) and
starts the loops: the scheduler (``scheduling``), the metering (``progress``), the local demo
swarms' follower (``core.swarm``) and the manifest poll (``manifest_updates``, ``following``), so an
engine never has a missing part; ``close`` stops them in reverse, each even if another fails, and
raises ``ShutdownIncomplete`` listing what failed.
Commands come from the control server under the names of the API's calls (``EngineApi``: start,
pause, resume, snooze, set_settings, attach, activate_project, detach, login, logout, ...), are
handed to the part they concern, and fail with the engine's own errors (``errors``), which the
server maps onto the API's; after each the settings are saved and the scheduler ticks at once.
``try_model`` asks the active project's model a volunteer's question (``trying``);
``credit_check`` sets this computer's count of its landed epochs beside the coordinator's credit
(``credit``).
Every change is published as a typed event, and contribution is metered into the ledger. The
views (state, projects, offers, history, statistics, diagnostics) are built from the parts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Mapping

from core import __version__
from core.account import CredentialStore
from core.api.events import AccountChanged, ErrorRaised
from core.api.schema import (
    API_VERSION,
    AccountInfo,
    AttachRequest,
    CreditCheck,
    Diagnostics,
    EngineState,
    Leaderboard,
    ModelAnswer,
    MyRank,
    Network,
    ProjectInfo,
    ProjectOffer,
    ProjectPreview,
    Rounds,
    Settings,
    SettingValue,
    Statistics,
    TrainingHistory,
)
from core.api.settings import settings_view
from core.engine.account import Account
from core.engine.attached import AttachedProjects
from core.engine.config import EngineConfig
from core.engine.credit import LandedEpochs, compare, since
from core.engine.device import DeviceChoice
from core.engine.diagnostics import diagnostics
from core.engine.errors import (
    InvalidArgument,
    NoCoordinator,
    NotJoinedByUrl,
    SettingsNotSaved,
    ShutdownIncomplete,
    UnknownProject,
)
from core.engine.events import EventBus
from core.engine.join.following import ManifestFollower
from core.engine.join.joining import preview, slot_for
from core.engine.join.manifest_updates import ManifestPoll
from core.engine.join.offers import project_offers
from core.engine.parts import Closing, EngineParts
from core.engine.peer_events import PeerEvents
from core.engine.progress import ProgressMeter
from core.engine.projects import ProjectRunner, ProjectSlot
from core.engine.scheduling import Scheduling
from core.engine.trying import ModelTrial
from core.engine.views import network_lines, network_view, rounds_view, statistics_view
from core.project import Manifest
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
        self._clock = clock
        self._file = parts.file
        self.memory = parts.memory
        self.ledger = parts.ledger
        self.metering = parts.metering
        self.curve = parts.curve
        self.swarms = parts.swarms
        self.device = DeviceChoice()
        self.started = clock.time()
        self.stopped = asyncio.Event()
        self._tasks = BackgroundTasks("engine")
        self._wake = asyncio.Event()
        """Set for the scheduler's next tick now (a command, a login, the peer's news)."""
        self._account = Account(
            credentials, on_change=self._account_changed, blocking=parts.blocking
        )
        self._landed = LandedEpochs(
            parts.ledger, parts.identity.peer_id, clock=clock, on_error=self._ledger_failed
        )
        self._peer_events = PeerEvents(
            events, self._wake, parts.metering, parts.curve, self._landed
        )
        # the runner is asked for at each meter: switches and rebuilds replace it
        self._progress = ProgressMeter(config, parts.metering, events, lambda: self.runner)
        self._attached = AttachedProjects(
            config,
            parts.memory,
            identity=parts.identity,
            account=self._account,
            swarms=parts.swarms,
            blocking=parts.blocking,
            events=events,
            on_peer_event=self._peer_events.handle,
            meter=self._progress.meter,
            wake=self._wake,
            save=self._save_quietly,
        )
        self._scheduling = Scheduling(
            config,
            parts.memory,
            attached=self._attached,
            sampler=parts.sampler,
            device=self.device,
            metering=parts.metering,
            events=events,
            wake=self._wake,
            save=self._save_quietly,
            clock=clock,
        )
        self._manifests = ManifestFollower(self._attached, events, parts.blocking)
        self._poll = ManifestPoll(lambda: list(self.memory.projects), self._manifests.look)
        self._swarm_follower = SwarmFollower(
            parts.swarms,
            interval=config.swarm_interval,
            followed=self._attached.followed_swarm,
            peer=lambda: self.runner,
            joined=lambda runner: (runner.slot.name, runner.swarm),
            follow_account=self._attached.follow_active,
            rebuild=self._attached.rebuild,
        )

        self._trial = ModelTrial(lambda: self.runner, parts.blocking)

    @property
    def runner(self) -> ProjectRunner | None:
        """The active project's peer; None while no project is attached."""
        return self._attached.runner

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
        await self._attached.open()
        self._tasks.spawn("scheduler", self._scheduling.run())
        self._tasks.spawn("metering", self._progress.run())
        self._tasks.spawn("local-swarms", self._swarm_follower.run())
        self._tasks.spawn("manifest-updates", self._poll.run())

    async def close(self) -> None:
        """Stop training (dropping at most the current microbatch), write the ledger and settings.

        Every part is stopped even if another fails; each failure is logged with its traceback,
        and ``ShutdownIncomplete`` lists them all once everything has stopped."""
        closing = Closing()
        with closing.attempt("stopping the engine's loops"):
            await self._tasks.close()
        with closing.attempt("closing the model's tryout"):
            await self._trial.close()
        await self._attached.close(closing)
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
        slot = await slot_for(
            request, self.memory.projects, self.config.manifest_copy, self._blocking, self.device
        )
        await self._attached.attach(slot)
        self._poll.wake()
        await self._changed()
        return self._attached.info(slot)

    async def preview_project(self, url: str) -> ProjectPreview:
        """What the project at ``url`` is and would use here, its signed manifest checked."""
        return await preview(url, self.memory.projects, self.device)

    async def check_project(self, name: str) -> ProjectInfo:
        """Look now for a signed update of project ``name`` (joined by URL)."""
        slot = self._known_slot(name)
        if slot.source_url is None:
            raise NotJoinedByUrl(
                f"{name} was attached from a manifest file: there is no project URL to look at"
            )
        await self._manifests.look(slot)  # ManifestUnreachable when it does not answer
        current = self._attached.slot(name)
        if current is None:
            raise UnknownProject(f"{name} was detached meanwhile")
        return self._attached.info(current)

    async def detach(self, name: str) -> list[ProjectInfo]:
        self._known_slot(name)
        await self._attached.detach(name)
        await self._changed()
        return self.projects()

    async def activate_project(self, name: str) -> ProjectInfo:
        """Contribute to the attached project ``name`` instead of the active one.

        The active peer stops as a detach stops it (its contribution is counted; the ledger keeps
        every project's rows), ``name`` becomes active and its peer starts on the scheduler's next
        "run", as after an attach; the account follows to its coordinator. Already active: nothing
        changes."""
        slot = self._known_slot(name)
        if self.memory.active == name:
            return self._attached.info(slot)
        current = await self._attached.switch_to(name)
        await self._changed()
        if current is None:
            raise UnknownProject(f"{name} was detached meanwhile")
        return self._attached.info(current)

    async def try_model(self, text: str) -> ModelAnswer:
        """Ask the active project's model about ``text`` (``trying``): its answer, or why it
        cannot answer now; ``InvalidArgument`` for a text it cannot take."""
        return await self._trial.ask(text)

    async def login(self, username: str, password: str, *, signup: bool = False) -> AccountInfo:
        """Log in at the active project's coordinator (signing up first with ``signup``)."""
        return await self._account.login(username, password, signup=signup)

    async def logout(self) -> AccountInfo:
        info = await self._account.logout()
        await self._attached.logged_out()
        return info

    # ---- views -----------------------------------------------------------------------------------

    def state(self) -> EngineState:
        scheduling = self._scheduling
        decision, result = scheduling.decision, scheduling.outcome
        slot = self._attached.active_slot()
        return EngineState(
            api_version=API_VERSION,
            engine_version=__version__,
            pid=os.getpid(),
            state=result.state,
            code=result.code,
            reason=result.reason,
            since=scheduling.since,
            contribute=self.memory.preferences.contribute,
            user_paused=self.memory.user_paused,
            snoozed_until=self.memory.snoozed_until,
            project=self._attached.info(slot) if slot is not None else None,
            progress=self._progress.progress(),
            threads=decision.threads if decision else 0,
            duty=decision.duty if decision else 0.0,
            notes=list(scheduling.notes),
            last_error=self.runner.error if self.runner is not None else None,
            network=self._network(),
            device=self.device.view(slot.device if slot is not None else None),
            rounds=self._rounds(),
        )

    def _network(self) -> Network | None:
        network = self.runner.network() if self.runner is not None else None
        return network_view(network) if network is not None else None

    def _rounds(self) -> Rounds | None:
        runner = self.runner
        manifest = runner.manifest if runner is not None else None
        if runner is None or not isinstance(manifest, Manifest):  # dmoe: experts, no rounds
            return None
        return rounds_view(manifest.training, runner.last_epoch, now=self._clock.time())

    def settings(self) -> Settings:
        return settings_view(self.memory.preferences)

    def account(self) -> AccountInfo:
        """The login at the active project's coordinator, as the engine holds it."""
        return self._account.info()

    async def leaderboard(self, limit: int = 10) -> Leaderboard:
        return await self._account.leaderboard(limit)

    async def my_rank(self) -> MyRank:
        return await self._account.my_rank()

    async def credit_check(self) -> CreditCheck:
        """This computer's landed epochs of the active project beside what its coordinator
        credited to this computer's key (``credit``); ``NoCoordinator`` and ``NotLoggedIn`` as
        ``my_rank``."""
        project = self.memory.active
        if project is None:
            raise NoCoordinator("no project is attached: attach one first (barnraise ctl attach)")
        rows = self._landed.rows(project)
        credited = await self._account.credit_mine(self._landed.peer, since(rows))
        manifest = self.runner.manifest if self.runner is not None else None
        checked = isinstance(manifest, Manifest) and manifest.training.work_checks > 0
        return compare(project, rows, credited, checked=checked)

    def projects(self) -> list[ProjectInfo]:
        return self._attached.infos()

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
        """The active project's loss curve and held-out evaluations, oldest first."""
        name = self.memory.active
        if name is None:
            return TrainingHistory(None, [])
        return TrainingHistory(name, self.curve.points(name), self.curve.held_out(name))

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
        known = {s.name for s in self.memory.projects} | set(self.ledger.projects())
        if project is not None and project not in known:
            raise UnknownProject(f"no statistics for a project called {project!r}")
        self._progress.meter()
        self.metering.flush_all()  # the answer comes from the ledger itself
        return statistics_view(self.ledger, project, days, now=self._clock.time())

    # ---- helpers ---------------------------------------------------------------------------------

    async def _changed(self) -> EngineState:
        """After a command: remember it, act on it now, and answer with the new state.

        A settings file that cannot be written does not undo the command: it is carried out and
        holds until the engine stops, and the caller learns that it was not saved."""
        try:
            self._file.save(self.memory)
        except SettingsNotSaved as exc:
            await self._scheduling.tick()
            raise SettingsNotSaved(f"{exc}; the change holds until the engine stops") from exc
        await self._scheduling.tick()
        return self.state()

    def _known_slot(self, name: str) -> ProjectSlot:
        slot = self._attached.slot(name)
        if slot is None:
            raise UnknownProject(f"no attached project is called {name!r}")
        return slot

    def _save_quietly(self) -> None:
        """Save the settings from a loop: a failure is told, and the loop goes on."""
        try:
            self._file.save(self.memory)
        except SettingsNotSaved as exc:
            log.error("%s", exc)
            self.events.publish(ErrorRaised("settings", str(exc)))

    def _ledger_failed(self, message: str) -> None:
        self.events.publish(ErrorRaised("ledger", message))

    def _account_changed(self, info: AccountInfo) -> None:
        self.events.publish(AccountChanged(info))
        self._wake.set()  # a peer waiting for a login may start now
