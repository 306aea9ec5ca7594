"""FakeEngine: an engine in memory that answers the control API like the real one.

The desktop app is written against ``EngineApi``; its tests and the screenshot script give it this
instead of an ``EngineClient``. It keeps the real engine's rules where the GUI depends on them (the
order of pause reasons and their wording, opt-in before contributing, login before a moderated
project trains, errors as the API's ``ApiError`` subclasses) and adds hooks for tests: scripted
conditions, one-shot failures, a record of the calls, and events pushed by hand.

Thread-safe: the GUI's bridge awaits it on its asyncio thread while a test scripts it from the Qt
thread; every change happens under one lock and events reach each subscriber's loop through
``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Literal

from core.api import sample_data
from core.api.errors import (
    ApiError,
    BadRequest,
    Conflict,
    CoordinatorUnreachable,
    EngineUnavailable,
    LoginRefused,
    LoginRequired,
    NotFound,
)
from core.api.events import (
    AccountChanged,
    CollaborationEpoch,
    EpochFinished,
    ErrorRaised,
    Event,
    EventData,
    PeersSeen,
    ProgressUpdated,
    ProjectsChanged,
    StateChanged,
)
from core.api.schema import (
    API_VERSION,
    AccountInfo,
    Amounts,
    AttachRequest,
    Diagnostics,
    EngineState,
    EpochPoint,
    Leaderboard,
    MyRank,
    Progress,
    ProjectInfo,
    ProjectList,
    ProjectOffer,
    ProjectOffers,
    Settings,
    SettingValue,
    StateName,
    Statistics,
    TrainingHistory,
)

Scenario = Literal["fresh", "contributing"]
DEMO = "barnraise-demo"
DEMO_MANIFEST = "/home/you/.cache/barnraise/swarm/barnraise-demo/moderated.toml"
COORDINATOR = "http://127.0.0.1:8765"


@dataclasses.dataclass
class _Subscriber:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[Event | None]


class FakeEngine:
    """See the module docstring. ``scenario``: "fresh" (nothing attached, first run) or
    "contributing" (a volunteer some weeks in, logged in, training)."""

    def __init__(
        self,
        scenario: Scenario = "contributing",
        *,
        clock: Callable[[], float] = time.time,
        username: str = "sam",
    ) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._subscribers: list[_Subscriber] = []
        self._recent: list[Event] = []
        self._seq = 0
        self._failures: dict[str, ApiError] = {}
        self.calls: list[str] = []
        """The API calls made, in order (``"start"``, ``"set_settings"``, ...)."""
        self.closed = False
        self.shut_down = False
        now = clock()
        self.started = now - 3 * 3600
        self.values: dict[str, SettingValue] = {
            s.name: s.default for s in sample_data.settings_descriptions()
        }
        self.user_paused = False
        self.snoozed_until: float | None = None
        self.condition: tuple[StateName, str, str] | None = None
        """A scripted state from the sensors: ("waiting", "user_active", "Waiting: you are ...")."""
        self.passwords = {"alice": "correct horse battery", username: "my password"}
        self.coordinator_down = False
        self.allow_signup = True
        self.offered = [
            ProjectOffer(
                name=DEMO,
                description="A tiny ALBERT masked language model trained on the demo text shards.",
                manifest=DEMO_MANIFEST,
                source="local_swarm",
                initial_peers=["/ip4/127.0.0.1/tcp/40145/p2p/12D3KooWDemoBackbone"],
                data_base="http://127.0.0.1:40146/",
                note="2 trainers and a backbone on this computer since 09:12; needs an account",
                moderated=True,
            )
        ]
        self.projects_: list[ProjectInfo] = []
        self.active: str | None = None
        self.username: str | None = None
        self.history_: list[EpochPoint] = []
        self.progress = Progress()
        self.session_samples = 0
        self._state: StateName = "starting"
        self._code = "starting"
        self._reason = "Starting"
        self._since = now
        self.last_error: str | None = None
        self.contributed = scenario == "contributing"
        """Whether the ledger has a history (statistics); a first start has none."""
        if scenario == "contributing":
            offer = self.offered[0]
            self.projects_ = [self._info(offer, active=True)]
            self.active = offer.name
            self.username = username
            self.values["contribute"] = True
            self.history_ = sample_data.loss_curve(now, 150)
            self.progress = Progress(
                epoch=149,
                collaboration_epoch=149,
                samples_per_second=286.4,
                collaboration_samples_per_second=1312.9,
                peers=5,
                session_samples=96_512,
            )
        self._decide(publish=False)
        if scenario == "contributing":
            self._past_events(now)

    def _past_events(self, now: float) -> None:
        """The backlog a real engine would hold after a morning of work."""
        project = DEMO
        steps: list[tuple[float, EventData]] = [
            (5400, StateChanged("starting", "paused", "starting", "Starting: joining the swarm")),
            (5390, StateChanged("running", "starting", "running", "Contributing")),
            (5000, PeersSeen(project, 4)),
            (
                3600,
                StateChanged(
                    "waiting", "running", "user_active", "Waiting: you are using the computer"
                ),
            ),
            (2400, StateChanged("running", "waiting", "running", "Contributing")),
            (1800, PeersSeen(project, 5)),
            (
                900,
                ErrorRaised(
                    f"project {project}", "averaging round 146 lost 1 of 5 parts (a peer left)"
                ),
            ),
        ]
        for point in self.history_[-6:]:
            steps.append((now - point.time, CollaborationEpoch(project, point)))
            steps.append(
                (
                    now - point.time - 1,
                    EpochFinished(project, point.epoch, 1024, point.peers, True, 3.2),
                )
            )
        for ago, data in sorted(steps, key=lambda s: -s[0]):
            self._publish(data, now - ago)

    # ---- test hooks (any thread) -----------------------------------------------------------------

    def fail_next(self, call: str, error: ApiError) -> None:
        """The next ``call`` (e.g. ``"start"``) raises ``error`` instead of answering."""
        with self._lock:
            self._failures[call] = error

    def set_condition(self, state: StateName | None, code: str = "", reason: str = "") -> None:
        """What the sensors say (None: nothing stops training); the state follows at once."""
        with self._lock:
            self.condition = None if state is None else (state, code, reason)
            self._decide()

    def emit(self, data: EventData) -> Event:
        """Publish an event as the engine would."""
        with self._lock:
            return self._publish(data)

    def advance(self, samples: int = 4096, loss: float = 4.5) -> EpochPoint:
        """One more collaboration epoch with ``samples`` of ours: progress and the loss curve move."""
        with self._lock:
            now = self._clock()
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

    def end_streams(self) -> None:
        """End every event stream, as an engine that stops does."""
        with self._lock:
            self._end_streams()

    # ---- reading -----------------------------------------------------------------------------------

    async def state(self) -> EngineState:
        await self._enter("state")
        with self._lock:
            self._decide()
            return self._snapshot()

    async def settings(self) -> Settings:
        await self._enter("settings")
        with self._lock:
            return Settings(dict(self.values), sample_data.settings_descriptions())

    async def statistics(self, project: str | None = None, days: int = 30) -> Statistics:
        await self._enter("statistics")
        if not 1 <= days <= 3660:
            raise BadRequest("days must be between 1 and 3660")
        with self._lock:
            if not self.contributed:
                return _empty_statistics(project, self._clock(), days)
            return sample_data.statistics(project, self._clock(), days)

    async def projects(self) -> ProjectList:
        await self._enter("projects")
        with self._lock:
            return ProjectList(list(self.projects_))

    async def offers(self) -> ProjectOffers:
        await self._enter("offers")
        with self._lock:
            attached = [
                ProjectOffer(
                    p.name,
                    p.description,
                    p.manifest,
                    "attached",
                    p.initial_peers,
                    p.data_base,
                    note="attached" + (", contributing to it" if p.active else ""),
                    moderated=self._moderated(p.name),
                )
                for p in self.projects_
            ]
            fresh = [o for o in self.offered if all(o.name != p.name for p in self.projects_)]
            return ProjectOffers([*fresh, *attached])

    async def history(self) -> TrainingHistory:
        await self._enter("history")
        with self._lock:
            return TrainingHistory(self.active, list(self.history_) if self.active else [])

    async def diagnostics(self) -> Diagnostics:
        await self._enter("diagnostics")
        return Diagnostics(
            engine_version="0.1.0",
            api_version=API_VERSION,
            pid=4242,
            platform="Linux-6.1-x86_64 (fake engine)",
            python="3.11.7",
            started=self.started,
            paths={"logs": "/home/you/.local/state/barnraise/log"},
            torch="2.13.0",
            log_tail=[
                "2026-11-22 09:12:03 INFO    core.engine.engine: running: Contributing",
                "2026-11-22 09:40:17 INFO    core.engine.engine: waiting: Waiting: you are away",
            ],
        )

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
            self.snoozed_until = self._clock() + minutes * 60
            self._decide()
            return self._snapshot()

    async def set_settings(self, values: Mapping[str, SettingValue]) -> Settings:
        await self._enter("set_settings")
        with self._lock:
            changed = dict(self.values)
            for name, value in values.items():
                if name not in changed:
                    raise BadRequest(f"unknown preference {name!r}")
                changed[name] = _checked(name, value, changed[name])
            if bool(changed["window_start"]) != bool(changed["window_end"]):
                raise BadRequest("window_start and window_end must both be set or both be empty")
            self.values = changed
            self._decide()
            return Settings(dict(self.values), sample_data.settings_descriptions())

    async def attach(self, request: AttachRequest) -> ProjectInfo:
        await self._enter("attach")
        with self._lock:
            offer = next((o for o in self.offered if o.manifest == request.manifest), None)
            if offer is None:
                raise BadRequest(f"cannot read the manifest {request.manifest}: no such file")
            if any(p.name == offer.name for p in self.projects_):
                raise Conflict(f"project {offer.name!r} is already attached; detach it first")
            info = self._info(offer, active=self.active is None)
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
            self._publish(ProjectsChanged([p.name for p in self.projects_], self.active))
            self._decide()
            return ProjectList(list(self.projects_))

    async def shutdown(self) -> None:
        await self._enter("shutdown")
        with self._lock:
            self.shut_down = True
            self._end_streams()

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
            self._coordinator()
            if signup:
                if not self.allow_signup:
                    raise LoginRefused("this project does not take sign-ups; ask its organizers")
                if username in self.passwords:
                    raise LoginRefused(f"the name {username!r} is taken")
                self.passwords[username] = password
            elif self.passwords.get(username) != password:
                raise LoginRefused("wrong username or password")
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

    # ---- the stream --------------------------------------------------------------------------------

    async def events(self, since: int | None = None) -> AsyncIterator[Event]:
        await self._enter("events")
        subscriber = _Subscriber(asyncio.get_running_loop(), asyncio.Queue())
        with self._lock:
            if self.shut_down:
                raise EngineUnavailable("the engine is gone")
            if since is not None:
                for kept in self._recent:
                    if kept.seq > since:
                        subscriber.queue.put_nowait(kept)
            self._subscribers.append(subscriber)
        try:
            while True:
                event = await subscriber.queue.get()
                if event is None:
                    return
                yield event
        finally:
            with self._lock:
                if subscriber in self._subscribers:
                    self._subscribers.remove(subscriber)

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

    def _publish(self, data: EventData, when: float | None = None) -> Event:
        self._seq += 1
        event = Event(self._seq, self._clock() if when is None else when, data)
        self._recent = [*self._recent[-499:], event]
        for sub in self._subscribers:
            sub.loop.call_soon_threadsafe(sub.queue.put_nowait, event)
        return event

    def _end_streams(self) -> None:
        for sub in self._subscribers:
            sub.loop.call_soon_threadsafe(sub.queue.put_nowait, None)
        self._subscribers = []

    def _decide(self, *, publish: bool = True) -> None:
        """The real policy's order: no project, not opted in, paused, snoozed, then conditions."""
        now = self._clock()
        if self.snoozed_until is not None and self.snoozed_until <= now:
            self.snoozed_until = None
        active = next((p for p in self.projects_ if p.name == self.active), None)
        state: StateName
        if active is None:
            state, code, reason = "idle", "no_project", "Idle: no project attached"
        elif not self.values["contribute"]:
            state, code, reason = "paused", "not_opted_in", "Paused: contribution is off"
        elif self.user_paused:
            state, code, reason = "paused", "user_paused", "Paused by you"
        elif self.snoozed_until is not None:
            state, code = "paused", "snoozed"
            reason = f"Snoozed until {_moment_text(self.snoozed_until, now)}"
        elif self.condition is not None:
            state, code, reason = self.condition
        elif self._needs_login(active):
            state, code = "error", "login_required"
            reason = "Not logged in: log in to the project's coordinator to contribute"
        else:
            state, code, reason = "running", "running", "Contributing"
        if (state, code, reason) != (self._state, self._code, self._reason):
            previous = self._state
            self._state, self._code, self._reason, self._since = state, code, reason, now
            if publish:
                self._publish(StateChanged(state, previous, code, reason))

    def _needs_login(self, project: ProjectInfo) -> bool:
        return self._moderated(project.name) and self.username is None

    def _moderated(self, name: str) -> bool:
        offer = next((o for o in self.offered if o.name == name), None)
        return offer is not None and offer.moderated

    def _snapshot(self) -> EngineState:
        active = next((p for p in self.projects_ if p.name == self.active), None)
        computing = self._state in ("running", "throttled")
        progress = dataclasses.replace(
            self.progress,
            samples_per_second=self.progress.samples_per_second if computing else 0.0,
        )
        return EngineState(
            api_version=API_VERSION,
            engine_version="0.1.0",
            pid=4242,
            state=self._state,
            code=self._code,
            reason=self._reason,
            since=self._since,
            contribute=bool(self.values["contribute"]),
            user_paused=self.user_paused,
            snoozed_until=self.snoozed_until,
            project=active,
            progress=progress if active is not None else Progress(),
            threads=1 if computing else 0,
            duty=1.0 if computing else 0.0,
            last_error=self.last_error,
        )

    def _info(self, offer: ProjectOffer, *, active: bool) -> ProjectInfo:
        return ProjectInfo(
            name=offer.name,
            description=offer.description,
            manifest=offer.manifest,
            initial_peers=list(offer.initial_peers),
            data_base=offer.data_base,
            active=active,
            local_swarm=offer.source == "local_swarm",
        )

    def _account(self) -> AccountInfo:
        offer = next((o for o in self.offered if o.name == self.active), None)
        coordinator = COORDINATOR if offer is not None and offer.moderated else None
        return AccountInfo(
            project=self.active,
            coordinator=coordinator,
            username=self.username if coordinator else None,
            logged_in=coordinator is not None and self.username is not None,
            pass_expires=self._clock() + 300 if self.username and coordinator else None,
            moderated=coordinator is not None,
            allow_signup=self.allow_signup and coordinator is not None,
        )

    def _coordinator(self) -> None:
        if self.active is None:
            raise Conflict("no project is attached: attach one first")
        if self._account().coordinator is None:
            raise Conflict(f"{self.active} has no coordinator: it is open to everyone")
        if self.coordinator_down:
            raise CoordinatorUnreachable(f"the coordinator at {COORDINATOR} does not answer")

    def _board(self) -> tuple[Leaderboard, MyRank]:
        self._coordinator()
        you = self.username or "you"
        return sample_data.leaderboard(self.active or DEMO, you, 1_843_200, self._clock())


def _checked(name: str, value: SettingValue, current: SettingValue) -> SettingValue:
    """The type and range checks the real preferences make, as far as the GUI can trip them."""
    kind = type(current)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if type(value) is not kind:
        raise BadRequest(f"{name} must be a {kind.__name__}, not {value!r}")
    if isinstance(value, float | int) and not isinstance(value, bool) and value < 0:
        raise BadRequest(f"{name} must be 0 or more (got {value!r})")
    if name == "cpu_when_in_use" and value not in ("run", "throttle", "pause"):
        raise BadRequest("cpu_when_in_use must be one of 'run', 'throttle', 'pause'")
    if name == "max_other_cpu_percent" and not 0 <= float(value) <= 100:
        raise BadRequest("max_other_cpu_percent must be between 0 and 100")
    if name == "in_use_cpu_fraction" and not 0 < float(value) <= 1:
        raise BadRequest("in_use_cpu_fraction must be above 0 and at most 1")
    return value


def _empty_statistics(project: str | None, now: float, days: int) -> Statistics:
    blank = sample_data.contribution_days(now, days)
    zeroed = [dataclasses.replace(d, amounts=Amounts()) for d in blank]
    return Statistics(project, Amounts(), Amounts(), 0, zeroed)


def _moment_text(when: float, now: float) -> str:
    """As the engine words a moment: "14:30", "tomorrow 14:30" or "Mon 3 Mar 14:30"."""
    moment, today = time.localtime(when), time.localtime(now)
    clock = time.strftime("%H:%M", moment)
    days = (
        datetime.date(moment.tm_year, moment.tm_mon, moment.tm_mday)
        - datetime.date(today.tm_year, today.tm_mon, today.tm_mday)
    ).days
    if days == 0:
        return clock
    if days == 1:
        return f"tomorrow {clock}"
    return (
        time.strftime("%a ", moment) + f"{moment.tm_mday} " + time.strftime("%b ", moment) + clock
    )
