"""FakeEngine: an engine in memory that answers the control API like the real one.

The desktop app is written against ``EngineApi``; its tests, the screenshot script and
``barnraise app --preview`` give it this instead of an ``EngineClient``. It decides with the real
rules (``core.policy``): ``decide`` over scripted ``Conditions``, the engine's mapping of a decision
and the peer's status to a state, code and reason, the real ``Preferences`` (their checks and
messages) and the real settings' descriptions, so a rule or its wording changes in one place. It
adds hooks for tests: scripted conditions and peer failures, one-shot failures of calls, a record of
the calls, and events pushed by hand.

Thread-safe: the GUI's bridge awaits it on its asyncio thread while a test scripts it from the Qt
thread; every change happens under one lock and events reach each subscriber's loop through
``call_soon_threadsafe`` (``stream``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import threading
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal

from core.api.errors import (
    ApiError,
    BadRequest,
    Conflict,
    CoordinatorUnreachable,
    EngineUnavailable,
    LoginRequired,
    NotFound,
)
from core.api.events import (
    AccountChanged,
    CollaborationEpoch,
    Event,
    EventData,
    HeldOutMeasured,
    ManifestUpdated,
    NetworkChanged,
    ProgressUpdated,
    ProjectsChanged,
    StateChanged,
)
from core.api.project_url import ProjectUrl
from core.api.schema import (
    API_VERSION,
    AccountInfo,
    AttachRequest,
    CreditCheck,
    Diagnostics,
    EngineState,
    EpochPoint,
    HeldOutPoint,
    KeySource,
    Leaderboard,
    ModelAnswer,
    ModelAnswerCode,
    MyRank,
    Network,
    Progress,
    ProjectInfo,
    ProjectKind,
    ProjectList,
    ProjectOffers,
    ProjectPreview,
    Rounds,
    Settings,
    SettingValue,
    Statistics,
    TrainingHistory,
)
from core.api.settings import settings_view
from core.api.testing import backlog, sample_data
from core.api.testing import model as fake_model
from core.api.testing.coordinator import COORDINATOR_URL, FakeCoordinator
from core.api.testing.sample_data import DEMO
from core.api.testing.stream import EventStream
from core.policy import (
    STARTING,
    Conditions,
    Decision,
    PeerStatus,
    Preferences,
    PreferencesError,
    decide,
    outcome,
)
from core.util.clock import SYSTEM_CLOCK, Clock

Scenario = Literal["fresh", "contributing"]
LOGIN_NEEDED = "barnraise-demo admits only volunteers with an account; log in to its coordinator"
"""What the fake's peer says when a moderated project has no login (the real one's words vary)."""


class FakeEngine:
    """See the module docstring. ``scenario``: "fresh" (nothing attached, first run) or
    "contributing" (a volunteer some weeks in, logged in, training)."""

    rounds: Rounds | None = None
    """How the active project trains (``set_rounds``); None as before its peer started."""
    model_kind: fake_model.FakeKind = "masked"
    """How the active project's model answers ``try_model``: guesses, or a completion."""
    model_refusal: tuple[ModelAnswerCode, str] | None = None
    """Why the model cannot answer now (``refuse_model``); None: it answers."""

    def __init__(
        self,
        scenario: Scenario = "contributing",
        *,
        clock: Clock = SYSTEM_CLOCK,
        username: str = "sam",
    ) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._stream = EventStream(clock)
        self._failures: dict[str, ApiError] = {}
        self.calls: list[str] = []
        """The API calls made, in order (``"start"``, ``"set_settings"``, ...)."""
        self.closed = False
        self.shut_down = False
        now = clock.time()
        self.started = now - 3 * 3600
        self.values: dict[str, SettingValue] = dict(Preferences().to_dict())
        """The preferences as the engine holds them (checked by ``Preferences`` on every change)."""
        self.user_paused = False
        self.snoozed_until: float | None = None
        self.conditions: Conditions = sample_data.CALM
        """What the sensors see (``set_conditions``); the fake adds the project, pause and snooze."""
        self.peer_error: str | None = None
        """The project's peer fails to start with these words (``fail_peer``)."""
        self.peer_waiting: str | None = None
        """The project's peer runs but waits for the collaboration, for this reason
        (``wait_for_collaboration``)."""
        self.coordinator = FakeCoordinator(username)
        self.offered = [sample_data.DEMO_OFFER]
        self.served: dict[str, ProjectPreview] = {
            sample_data.REMOTE_PREVIEW.url: sample_data.REMOTE_PREVIEW
        }
        """Project URLs (normalised) the fake answers previews for, and may attach
        (``serve_project``); any other URL does not answer."""
        self.projects_: list[ProjectInfo] = []
        self.active: str | None = None
        self.username: str | None = None
        self.history_: list[EpochPoint] = []
        self.progress = Progress()
        self.session_samples = 0
        self._outcome = STARTING
        self._decision: Decision | None = None
        self._since = now
        self.last_error: str | None = None
        self.network: Network | None = None
        """How others reach the peer (``set_network``); shown while a project is active."""
        self.ledger_seeds: dict[str, int] = {DEMO: 7} if scenario == "contributing" else {}
        """The projects the ledger has rows for, each with the seed of its made-up month (the
        statistics of one project; all together show the first's); a first start has none."""
        if scenario == "contributing":
            offer = self.offered[0]
            self.projects_ = [sample_data.project_info(offer, active=True, device="cuda")]
            self.active = offer.name
            self.username = username
            self.values["contribute"] = True
            self.history_ = sample_data.loss_curve(now, 150)
            self.progress = sample_data.PROGRESS
        # the backbone's evaluations of the curve (``evaluate`` adds one)
        self.held_out_: list[HeldOutPoint] = sample_data.held_out_curve(self.history_)
        self._decide(publish=False)
        if scenario == "contributing":
            for when, data in backlog.morning(DEMO, self.history_, now):
                self._stream.publish(data, when)

    # ---- test hooks (any thread) -----------------------------------------------------------------

    def fail_next(self, call: str, error: ApiError) -> None:
        """The next ``call`` (e.g. ``"start"``) raises ``error`` instead of answering."""
        with self._lock:
            self._failures[call] = error

    def set_conditions(self, **changes: Any) -> None:
        """What the sensors see: a calm computer (``sample_data.CALM``) with ``changes`` to its
        ``Conditions`` fields (``on_battery=True``, ``idle_seconds=20.0``); none: calm again. The
        state follows at once, decided by the real policy."""
        with self._lock:
            self.conditions = dataclasses.replace(sample_data.CALM, **changes)
            self._decide()

    def fail_peer(self, message: str | None) -> None:
        """The project's peer fails to start, saying ``message``; None: it starts again."""
        with self._lock:
            self.peer_error = message
            self._decide()

    def wait_for_collaboration(self, reason: str | None) -> None:
        """The project's peer runs but cannot load the collaboration's state, for ``reason``;
        None: it can again."""
        with self._lock:
            self.peer_waiting = reason
            self._decide()

    def set_network(self, network: Network | None) -> None:
        """What the reachability check says, and how the peer is connected; a new verdict is
        published as the engine does (``NetworkChanged``)."""
        with self._lock:
            before, self.network = self.network, network
            changed = before is None or before.reachability != getattr(
                network, "reachability", None
            )
            if network is not None and changed:
                self._publish(NetworkChanged(self.active or DEMO, network))

    def set_rounds(self, rounds: Rounds | None) -> None:
        """How the active project trains: the next state says so (the engine publishes no event
        for it: the round's seconds change all the time)."""
        with self._lock:
            self.rounds = rounds

    def refuse_model(self, code: ModelAnswerCode | None, reason: str = "") -> None:
        """``try_model`` answers that the model cannot answer, with ``code`` and ``reason``
        (``"not_ready"``, ``"The model is not here yet: ..."``); None: it answers again."""
        with self._lock:
            self.model_refusal = None if code is None else (code, reason)

    def set_credit(self, check: CreditCheck | None) -> None:
        """What ``credit_check`` answers (differences, say); None: counts that agree."""
        with self._lock:
            self.coordinator.credit_answer = check

    def serve_project(self, preview: ProjectPreview) -> None:
        """``preview.url`` (with or without a ``#key=`` fragment) now answers previews with
        ``preview`` (its ``key_source`` worked out as the engine would) and can be attached."""
        with self._lock:
            self.served[ProjectUrl.parse(preview.url).url] = preview

    def update_manifest(self, name: str, version: int, refused: str | None = None) -> None:
        """The project joined by URL ``name`` got a signed update to ``version``: applied, or
        refused for the reason ``refused``; published as the engine does (``ManifestUpdated``)."""
        with self._lock:
            info = next((p for p in self.projects_ if p.name == name), None)
            if info is None or info.source_url is None:
                raise ValueError(f"{name!r} is not a project joined by URL here")
            if refused is None:
                changed = dataclasses.replace(info, manifest_version=version, update_refused=None)
                reason = f"version {version} applied"
            else:
                changed = dataclasses.replace(info, update_refused=refused)
                reason = refused
            self.projects_ = [changed if p.name == name else p for p in self.projects_]
            self._publish(ManifestUpdated(name, version, refused is None, reason))

    def emit(self, data: EventData) -> Event:
        """Publish an event as the engine would."""
        return self._stream.publish(data)

    @property
    def recent(self) -> list[Event]:
        """The events the engine keeps for late joiners, oldest first."""
        return self._stream.recent

    def advance(self, samples: int = 4096, loss: float = 4.5) -> EpochPoint:
        """One more collaboration epoch with ``samples`` of ours: progress and the loss curve move."""
        with self._lock:
            now = self._clock.time()
            epoch = (self.history_[-1].epoch + 1) if self.history_ else 0
            point = EpochPoint(epoch, now, loss, samples * 4, 1300.0, 5)
            self.history_.append(point)
            self.session_samples += samples
            self.progress = dataclasses.replace(
                self.progress,
                epoch=epoch,
                collaboration_epoch=epoch,
                session_samples=self.session_samples,
            )
            project = self.active or DEMO
            self._publish(CollaborationEpoch(project, point))
            self._publish(ProgressUpdated(project, self.progress))
            return point

    def evaluate(
        self, loss: float | None = 4.8, accuracy: float = 0.35, floor: float | None = None
    ) -> HeldOutPoint:
        """The backbone measured the model of the newest epoch on its held-out text (``floor``:
        the unigram floor it reported, None as an older backbone)."""
        with self._lock:
            epoch = self.history_[-1].epoch if self.history_ else 0
            point = HeldOutPoint(epoch, self._clock.time(), loss, accuracy, 256, floor)
            self.held_out_.append(point)
            self._publish(HeldOutMeasured(self.active or DEMO, point))
            return point

    def end_streams(self) -> None:
        """End every event stream, as an engine that stops does."""
        self._stream.end()

    # ---- reading -----------------------------------------------------------------------------------

    async def state(self) -> EngineState:
        await self._enter("state")
        with self._lock:
            self._decide()
            return self._snapshot()

    async def settings(self) -> Settings:
        await self._enter("settings")
        with self._lock:
            return settings_view(self._preferences())

    async def statistics(self, project: str | None = None, days: int = 30) -> Statistics:
        await self._enter("statistics")
        if not 1 <= days <= 3660:
            raise BadRequest("days must be between 1 and 3660")
        with self._lock:
            now = self._clock.time()
            if not self.ledger_seeds:
                return sample_data.no_statistics(project, now, days)
            if project is None:
                return sample_data.statistics(None, now, days)
            seed = self.ledger_seeds.get(project)
            if seed is None:
                return sample_data.no_statistics(project, now, days)
            return sample_data.statistics(project, now, days, seed=seed)

    async def projects(self) -> ProjectList:
        await self._enter("projects")
        with self._lock:
            return ProjectList(list(self.projects_))

    async def offers(self) -> ProjectOffers:
        await self._enter("offers")
        with self._lock:
            attached = [
                sample_data.attached_offer(
                    p, moderated=self._moderated(p.name), kind=self._kind(p.name)
                )
                for p in self.projects_
            ]
            fresh = [o for o in self.offered if all(o.name != p.name for p in self.projects_)]
            return ProjectOffers([*fresh, *attached])

    async def history(self) -> TrainingHistory:
        await self._enter("history")
        with self._lock:
            if self.active is None:
                return TrainingHistory(None, [])
            return TrainingHistory(self.active, list(self.history_), list(self.held_out_))

    async def diagnostics(self) -> Diagnostics:
        await self._enter("diagnostics")
        return sample_data.diagnostics(self.started)

    # ---- commands ------------------------------------------------------------------------------------

    async def start(self) -> EngineState:
        await self._enter("start")
        with self._lock:
            self.values["contribute"] = True
            self.user_paused = False
            self.snoozed_until = None
            self._decide()
            return self._snapshot()

    async def pause(self) -> EngineState:
        await self._enter("pause")
        with self._lock:
            self.user_paused = True
            self._decide()
            return self._snapshot()

    async def resume(self) -> EngineState:
        await self._enter("resume")
        with self._lock:
            self.user_paused = False
            self.snoozed_until = None
            self._decide()
            return self._snapshot()

    async def snooze(self, minutes: float) -> EngineState:
        await self._enter("snooze")
        if not 0 < minutes <= 7 * 24 * 60:
            raise BadRequest("minutes must be more than 0 and at most a week (10080)")
        with self._lock:
            self.snoozed_until = self._clock.time() + minutes * 60
            self._decide()
            return self._snapshot()

    async def set_settings(self, values: Mapping[str, SettingValue]) -> Settings:
        await self._enter("set_settings")
        with self._lock:
            try:
                preferences = self._preferences().updated(values)
            except PreferencesError as exc:  # as the engine answers it
                raise BadRequest(str(exc)) from None
            self.values = dict(preferences.to_dict())
            self._decide()
            return settings_view(preferences)

    async def attach(self, request: AttachRequest) -> ProjectInfo:
        await self._enter("attach")
        with self._lock:
            active = self.active is None
            if request.is_url:
                preview = self._preview(request.manifest, request.pinned_key)
                info = sample_data.remote_project_info(
                    preview, active=active, device=request.device
                )
            else:
                offer = next((o for o in self.offered if o.manifest == request.manifest), None)
                if offer is None:
                    raise BadRequest(f"cannot read the manifest {request.manifest}: no such file")
                info = sample_data.project_info(offer, active=active, device=request.device)
            if any(p.name == info.name for p in self.projects_):
                raise Conflict(f"project {info.name!r} is already attached; detach it first")
            self.projects_.append(info)
            if self.active is None:
                self.active = info.name
            self._publish(ProjectsChanged([p.name for p in self.projects_], self.active))
            self._publish(AccountChanged(self._account()))
            self._decide()
            return info

    async def detach(self, name: str) -> ProjectList:
        await self._enter("detach")
        with self._lock:
            if all(p.name != name for p in self.projects_):
                raise NotFound(f"no attached project is called {name!r}")
            self.projects_ = [p for p in self.projects_ if p.name != name]
            if self.active == name:
                self.active = self.projects_[0].name if self.projects_ else None
                # the first left becomes active, and its info says so, as the engine's views do
                self.projects_ = [
                    dataclasses.replace(p, active=p.name == self.active) for p in self.projects_
                ]
            self._publish(ProjectsChanged([p.name for p in self.projects_], self.active))
            self._decide()
            return ProjectList(list(self.projects_))

    async def preview_project(self, url: str) -> ProjectPreview:
        await self._enter("preview_project")
        with self._lock:
            return self._preview(url, None)

    async def check_project(self, name: str) -> ProjectInfo:
        await self._enter("check_project")
        with self._lock:
            info = next((p for p in self.projects_ if p.name == name), None)
            if info is None:
                raise NotFound(f"no attached project is called {name!r}")
            if info.source_url is None:
                raise Conflict(f"{name} was attached from a file: it has no URL to check")
            return info

    async def activate_project(self, name: str) -> ProjectInfo:
        await self._enter("activate_project")
        with self._lock:
            info = next((p for p in self.projects_ if p.name == name), None)
            if info is None:
                raise NotFound(f"no attached project is called {name!r}")
            if self.active != name:
                self.active = name
                # the flag each project info carries follows, as the engine's views do
                self.projects_ = [
                    dataclasses.replace(p, active=p.name == name) for p in self.projects_
                ]
                self._publish(ProjectsChanged([p.name for p in self.projects_], self.active))
                self._publish(AccountChanged(self._account()))
                self._decide()
            return next(p for p in self.projects_ if p.name == name)

    async def try_model(self, text: str) -> ModelAnswer:
        await self._enter("try_model")
        with self._lock:
            project = self.active
            if project is None:
                return ModelAnswer(
                    None,
                    "no_project",
                    "No project is attached: join one, and once this computer has trained with "
                    "it, its model can be tried here.",
                )
            if self.model_refusal is not None:
                code, reason = self.model_refusal
                return ModelAnswer(project, code, reason)
            epoch = self.history_[-1].epoch if self.history_ else 0
            return fake_model.answer(
                project, text, self.model_kind, epoch=epoch, now=self._clock.time()
            )

    async def shutdown(self) -> None:
        await self._enter("shutdown")
        with self._lock:
            self.shut_down = True
            self._stream.end()

    # ---- the account ---------------------------------------------------------------------------------

    async def account(self) -> AccountInfo:
        await self._enter("account")
        with self._lock:
            return self._account()

    async def login(self, username: str, password: str, *, signup: bool = False) -> AccountInfo:
        await self._enter("login")
        if not username.strip():
            raise BadRequest("the username is empty")
        if not password:
            raise BadRequest("the password is empty")
        with self._lock:
            self._moderated_project()
            self.coordinator.login(username, password, signup=signup)
            self.username = username
            info = self._account()
            self._publish(AccountChanged(info))
            self._decide()
            return info

    async def logout(self) -> AccountInfo:
        await self._enter("logout")
        with self._lock:
            self.username = None
            info = self._account()
            self._publish(AccountChanged(info))
            self._decide()
            return info

    async def leaderboard(self, limit: int = 10) -> Leaderboard:
        await self._enter("leaderboard")
        with self._lock:
            board, _ = self._board()
            return dataclasses.replace(board, users=board.users[:limit])

    async def my_rank(self) -> MyRank:
        await self._enter("my_rank")
        with self._lock:
            if self.username is None:
                raise LoginRequired("log in to see your place on the leaderboard")
            return self._board()[1]

    async def credit_check(self) -> CreditCheck:
        await self._enter("credit_check")
        with self._lock:
            project = self._moderated_project()
            if self.username is None:
                raise LoginRequired("log in to compare your counts with the project's")
            return self.coordinator.credit(project)

    # ---- the stream --------------------------------------------------------------------------------

    async def events(self, since: int | None = None) -> AsyncIterator[Event]:
        await self._enter("events")
        with self._lock:  # a shutdown cannot slip in between the check and the subscription
            if self.shut_down:
                raise EngineUnavailable("the engine is gone")
            subscription = self._stream.subscribe(since)
        async for event in self._stream.read(subscription):
            yield event

    async def close(self) -> None:
        self.closed = True

    # ---- inside (called with the lock held) ----------------------------------------------------------

    async def _enter(self, call: str) -> None:
        await asyncio.sleep(0)  # an answer always takes a trip through the loop, as over HTTP
        with self._lock:
            self.calls.append(call)
            error = self._failures.pop(call, None)
            if self.shut_down and call != "shutdown":
                error = EngineUnavailable("the engine at http://127.0.0.1:1 does not answer")
        if error is not None:
            raise error

    def _publish(self, data: EventData) -> Event:
        return self._stream.publish(data)

    def _decide(self, *, publish: bool = True) -> None:
        """As the engine's scheduler tick: the conditions with the engine's own part, the real
        ``decide``, and the real mapping to a state with the (scripted) peer's status."""
        now = self._clock.time()
        if self.snoozed_until is not None and self.snoozed_until <= now:
            self.snoozed_until = None  # the snooze ended by itself
        active = self._active()
        conditions = dataclasses.replace(
            self.conditions,
            uses_gpu=active is not None and not active.device.startswith("cpu"),
            has_project=active is not None,
            user_paused=self.user_paused,
            snoozed_until=self.snoozed_until,
        )
        local = datetime.datetime.fromtimestamp(now).astimezone()
        self._decision = decide(conditions, self._preferences(), local)
        result = outcome(self._decision, self._peer(active))
        if result != self._outcome:
            previous, self._outcome, self._since = self._outcome, result, now
            if publish:
                self._publish(
                    StateChanged(result.state, previous.state, result.code, result.reason)
                )

    def _peer(self, active: ProjectInfo | None) -> PeerStatus:
        """The peer a run would find: waiting for a login, failed as scripted, or training."""
        if active is not None and self._moderated(active.name) and self.username is None:
            return PeerStatus("failed", LOGIN_NEEDED, needs_login=True)
        if self.peer_error is not None:
            return PeerStatus("failed", self.peer_error)
        return PeerStatus("ready", waiting_for=self.peer_waiting)

    def _preferences(self) -> Preferences:
        return Preferences.from_dict(self.values)

    def _active(self) -> ProjectInfo | None:
        return next((p for p in self.projects_ if p.name == self.active), None)

    def _moderated(self, name: str) -> bool:
        offer = next((o for o in self.offered if o.name == name), None)
        if offer is not None:
            return offer.moderated
        served = next((p for p in self.served.values() if p.name == name), None)
        return served is not None and served.mode == "moderated"

    def _kind(self, name: str) -> ProjectKind:
        served = next((p for p in self.served.values() if p.name == name), None)
        return served.kind if served is not None else "collaborative"

    def _preview(self, text: str, pinned: str | None) -> ProjectPreview:
        """What the engine would answer for a preview of (or an attach by) URL ``text``."""
        url = ProjectUrl.parse(text)
        served = self.served.get(url.url)
        if served is None:
            raise CoordinatorUnreachable(
                f"the project at {url.url} does not answer (cannot connect); check the URL, "
                "or try again later"
            )
        attached = next((p for p in self.projects_ if p.source_url == url.url), None)
        expected = url.key or pinned or (attached.project_key if attached else None)
        if expected is not None and expected != served.project_key:
            raise BadRequest(
                f"the manifest at {url.url} is signed by project key {served.project_key}, not "
                f"by {expected}: it may not be the project you meant; nothing was attached"
            )
        source: KeySource = "url" if url.key else "pinned" if attached is not None else "first-use"
        return dataclasses.replace(served, url=url.url, key_source=source)

    def _snapshot(self) -> EngineState:
        active = self._active()
        decision, current = self._decision, self._outcome
        computing = current.state in ("running", "throttled")
        progress = dataclasses.replace(
            self.progress,
            samples_per_second=self.progress.samples_per_second if computing else 0.0,
        )
        return EngineState(
            api_version=API_VERSION,
            engine_version="0.1.0",
            pid=4242,
            state=current.state,
            code=current.code,
            reason=current.reason,
            since=self._since,
            contribute=bool(self.values["contribute"]),
            user_paused=self.user_paused,
            snoozed_until=self.snoozed_until,
            project=active,
            progress=progress if active is not None else Progress(),
            threads=decision.threads if decision is not None else 0,
            duty=decision.duty if decision is not None else 0.0,
            notes=list(self.conditions.notes),
            last_error=self.last_error,
            network=self.network if active is not None else None,
            device=sample_data.training_device(active.device if active is not None else "auto"),
            rounds=self.rounds if active is not None else None,
        )

    def _account(self) -> AccountInfo:
        moderated = self.active is not None and self._moderated(self.active)
        coordinator = COORDINATOR_URL if moderated else None
        return AccountInfo(
            project=self.active,
            coordinator=coordinator,
            username=self.username if coordinator else None,
            logged_in=coordinator is not None and self.username is not None,
            pass_expires=self._clock.time() + 300 if self.username and coordinator else None,
            moderated=coordinator is not None,
            allow_signup=self.coordinator.allow_signup and coordinator is not None,
        )

    def _moderated_project(self) -> str:
        """The active project, if it has a coordinator (else ``Conflict``, as the engine says)."""
        if self.active is None:
            raise Conflict("no project is attached: attach one first")
        if not self._moderated(self.active):
            raise Conflict(f"{self.active} has no coordinator: it is open to everyone")
        return self.active

    def _board(self) -> tuple[Leaderboard, MyRank]:
        project = self._moderated_project()
        return self.coordinator.board(project, self.username or "you", self._clock.time())
