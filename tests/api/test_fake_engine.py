"""The FakeEngine (which every GUI test trusts) against the real rules: scripted conditions are
decided by the real policy, a scripted peer failure is worded as the engine words it, settings are
checked by the real preferences (same messages) and described as the engine describes them, pause
reasons follow the real policy, and its kept backlog says only what the engine would say.

No window here: the fake's own API.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
from typing import Any

import pytest

from core.api import (
    AttachRequest,
    BadRequest,
    HeldOutMeasured,
    NotFound,
    ProjectsChanged,
    StateChanged,
)
from core.api.codec import decode, encode
from core.api.schema import HeldOutPoint
from core.api.settings import settings_view
from core.api.testing import CALM, DEMO, FakeEngine
from core.api.testing.sample_data import REMOTE_PREVIEW
from core.policy import (
    Conditions,
    PeerStatus,
    Preferences,
    PreferencesError,
    decide,
    outcome,
)
from core.util.clock import FakeClock


def fixed_clock(hour: int, minute: int = 0) -> FakeClock:
    """A clock standing at ``hour:minute`` today, local time."""
    return FakeClock(dt.datetime.combine(dt.date.today(), dt.time(hour, minute)).timestamp())


def engine_says(fake: FakeEngine, peer: PeerStatus, **changes: Any) -> tuple[str, str, str]:
    """What the real policy and the engine's mapping make of the fake's project and ``changes``."""
    active = next(p for p in fake.projects_ if p.active)
    conditions = dataclasses.replace(CALM, uses_gpu=active.device != "cpu", **changes)
    now = dt.datetime.fromtimestamp(fake._clock.time()).astimezone()
    result = outcome(decide(conditions, Preferences.from_dict(fake.values), now), peer)
    return result.state, result.code, result.reason


async def said(fake: FakeEngine) -> tuple[str, str, str]:
    state = await fake.state()
    return state.state, state.code, state.reason


@pytest.mark.parametrize(
    "changes",
    [
        {"on_battery": True},
        {"idle_seconds": 20.0},  # at the computer: the demo's GPU project waits
        {"other_cpu_percent": 87.0},
        {"available_memory_mb": 300.0},
        {"gpu": dataclasses.replace(CALM.gpu, temperature_c=91.0) if CALM.gpu else None},
        {"network_mb_this_month": 50.0},
    ],
    ids=["battery", "user", "busy", "memory", "hot", "network"],
)
async def test_scripted_conditions_are_decided_by_the_real_policy(changes: dict[str, Any]) -> None:
    fake = FakeEngine("contributing", clock=fixed_clock(12))
    assert await said(fake) == ("running", "running", "Contributing")
    if "network_mb_this_month" in changes:
        fake.values["monthly_network_cap_mb"] = 40.0
    fake.set_conditions(**changes)
    expected = engine_says(fake, PeerStatus("ready"), **changes)
    assert await said(fake) == expected
    assert expected[0] in ("paused", "waiting")
    fake.set_conditions()
    fake.values["monthly_network_cap_mb"] = 0.0
    assert await said(fake) == ("running", "running", "Contributing")


async def test_a_cpu_project_throttles_while_the_user_is_at_the_computer() -> None:
    fresh = FakeEngine("fresh")
    await fresh.attach(AttachRequest(fresh.offered[0].manifest, device="cpu"))  # auto: the GPU
    fresh.username = "sam"
    await fresh.start()
    fresh.set_conditions(idle_seconds=5.0)
    state = await fresh.state()
    assert (state.state, state.code) == ("throttled", "throttled")
    assert state.reason == "Running slowly: you are using the computer"
    assert state.duty == Preferences().in_use_cpu_fraction  # the real decision's numbers
    assert state.threads == CALM.cpu_count - Preferences().leave_cores_free


async def test_a_scripted_peer_failure_is_worded_as_the_engine_words_it() -> None:
    fake = FakeEngine("contributing")
    fake.fail_peer("the data server does not answer")
    peer = PeerStatus("failed", "the data server does not answer")
    assert await said(fake) == engine_says(fake, peer)
    assert (await fake.state()).code == "peer_failed"
    fake.fail_peer(None)
    assert (await fake.state()).state == "running"


async def test_a_moderated_project_without_a_login_needs_one() -> None:
    fake = FakeEngine("contributing")
    await fake.logout()
    state = await fake.state()
    assert (state.state, state.code) == ("error", "login_required")
    assert state.reason.startswith("Not logged in: ")
    await fake.pause()  # a pause comes first: nothing would run anyway
    assert (await fake.state()).code == "user_paused"


async def test_every_state_change_is_published_once() -> None:
    fake = FakeEngine("contributing")
    before = len(fake.recent)
    fake.set_conditions(on_battery=True)
    fake.set_conditions(on_battery=True)  # the same again: no change, no event
    fake.set_conditions()
    changes = [e.data for e in fake.recent[before:] if isinstance(e.data, StateChanged)]
    assert [(c.previous, c.state, c.code) for c in changes] == [
        ("running", "paused", "on_battery"),
        ("paused", "running", "running"),
    ]


@pytest.mark.parametrize(
    "values",
    [
        {"idle_minutes": -1},
        {"in_use_cpu_fraction": 0},
        {"max_other_cpu_percent": 120.0},
        {"cpu_when_in_use": "sometimes"},
        {"window_start": "09:00"},
        {"window_start": "25:00", "window_end": "07:00"},
        {"run_on_battery": "yes"},
        {"no_such_thing": 1},
    ],
)
async def test_settings_are_refused_with_the_real_preferences_words(values: dict[str, Any]) -> None:
    fake = FakeEngine("contributing")
    before = dict(fake.values)
    with pytest.raises(PreferencesError) as real:
        Preferences.from_dict(before).updated(values)
    with pytest.raises(BadRequest) as refused:
        await fake.set_settings(values)
    assert refused.value.message == str(real.value)
    assert fake.values == before  # nothing of a refused change is kept


async def test_settings_are_kept_as_the_engine_keeps_them() -> None:
    fake = FakeEngine("contributing", clock=fixed_clock(12))
    settings = await fake.set_settings({"window_start": "9:00", "window_end": "10:30"})
    assert (settings.values["window_start"], settings.values["window_end"]) == ("09:00", "10:30")
    assert type((await fake.set_settings({"idle_minutes": 7})).values["idle_minutes"]) is float
    state = await fake.state()  # noon is outside 09:00-10:30
    assert (state.state, state.code) == ("waiting", "outside_window")
    assert state.reason == "Waiting: outside your hours (09:00–10:30)"


async def test_the_backlog_says_only_what_the_engine_would() -> None:
    fake = FakeEngine("contributing")
    changes = [e.data for e in fake.recent if isinstance(e.data, StateChanged)]
    assert [(c.state, c.code, c.reason) for c in changes] == [
        ("starting", "running", "Starting: joining the swarm"),
        ("running", "running", "Contributing"),
        ("waiting", "user_active", "Waiting: you are using the computer"),
        ("running", "running", "Contributing"),
    ]
    assert changes[0].previous == "starting"
    for before, after in itertools.pairwise(changes):
        assert after.previous == before.state
    assert all(e.data.project == DEMO for e in fake.recent if hasattr(e.data, "project"))


async def test_activating_a_project_switches_as_the_engine_does() -> None:
    fake = FakeEngine("contributing")
    await fake.attach(AttachRequest(manifest=REMOTE_PREVIEW.url))
    assert fake.active == DEMO  # attached beside
    seen = fake.recent[-1].seq
    info = await fake.activate_project(REMOTE_PREVIEW.name)
    assert (info.name, info.active) == (REMOTE_PREVIEW.name, True)
    listed = (await fake.projects()).projects
    assert [(p.name, p.active) for p in listed] == [(DEMO, False), (REMOTE_PREVIEW.name, True)]
    assert (await fake.account()).project == REMOTE_PREVIEW.name
    assert (await fake.state()).project == info
    news = [e.data for e in fake.recent if e.seq > seen and isinstance(e.data, ProjectsChanged)]
    assert news == [ProjectsChanged([DEMO, REMOTE_PREVIEW.name], REMOTE_PREVIEW.name)]
    # already active: the same answer, nothing published
    seen = fake.recent[-1].seq
    assert await fake.activate_project(REMOTE_PREVIEW.name) == info
    assert [e for e in fake.recent if e.seq > seen] == []
    with pytest.raises(NotFound, match="no attached project is called 'nope'"):
        await fake.activate_project("nope")


# ---- the fake's preferences and pause reasons against the engine's -------------------------------


async def test_the_fakes_preferences_are_the_engines() -> None:
    settings = await FakeEngine("fresh").settings()
    assert settings == settings_view(Preferences())  # the engine's own answer
    described = [(s.name, s.help, s.default) for s in settings.descriptions]
    assert described == Preferences.describe()
    for info in settings.descriptions:
        real = next(f for f in dataclasses.fields(Preferences) if f.name == info.name)
        assert type(info.default) is type(real.default), info.name
    assert FakeEngine("fresh").values == {**Preferences().to_dict()}


def real_decision(
    fake: FakeEngine, *, has_project: bool, contribute: bool, user_paused: bool, snoozed: bool
) -> tuple[str, str]:
    """The real policy's (code, reason) for what the fake was told."""
    now = dt.datetime.fromtimestamp(fake._clock.time())
    conditions = Conditions(
        idle_seconds=None,
        on_battery=False,
        battery_percent=None,
        other_cpu_percent=None,
        available_memory_mb=None,
        cpu_count=4,
        gpu=None,
        has_project=has_project,
        user_paused=user_paused,
        snoozed_until=fake.snoozed_until if snoozed else None,
        headless=True,
    )
    decision = decide(conditions, Preferences(contribute=contribute), now)
    return decision.code, decision.reason


FLAGS = [
    (contribute, paused, snoozed)
    for contribute in (False, True)
    for paused in (False, True)
    for snoozed in (False, True)
]


@pytest.mark.parametrize("scenario", ["fresh", "contributing"])
@pytest.mark.parametrize(("contribute", "user_paused", "snoozed"), FLAGS)
async def test_the_fakes_pause_reasons_follow_the_real_policy(
    scenario: str, contribute: bool, user_paused: bool, snoozed: bool
) -> None:
    """No project, then not opted in, then paused by you, then snoozed: the first that applies."""
    fake = FakeEngine(scenario, clock=fixed_clock(12))  # type: ignore[arg-type]
    fake.values["contribute"] = contribute
    fake.user_paused = user_paused
    fake.snoozed_until = fake._clock.time() + 3600 if snoozed else None
    state = await fake.state()
    expected = real_decision(
        fake,
        has_project=scenario == "contributing",
        contribute=contribute,
        user_paused=user_paused,
        snoozed=snoozed,
    )
    assert (state.code, state.reason) == expected
    if expected[0] == "running":
        assert state.state == "running"
    else:
        assert state.state == ("idle" if expected[0] == "no_project" else "paused")


async def test_the_fakes_snooze_past_midnight_is_worded_like_the_engines() -> None:
    fake = FakeEngine("contributing", clock=fixed_clock(23, 30))
    await fake.snooze(60)
    state = await fake.state()
    expected = real_decision(
        fake, has_project=True, contribute=True, user_paused=False, snoozed=True
    )
    assert (state.code, state.reason) == expected


async def test_the_fakes_history_carries_the_backbones_evaluations() -> None:
    fake = FakeEngine("contributing")
    history = await fake.history()
    # every tenth epoch measured, a little above the training loss, as a real backbone reports
    assert [e.epoch for e in history.held_out] == list(range(0, 150, 10))
    losses = {p.epoch: p.loss for p in history.points}
    for evaluation in history.held_out:
        assert evaluation.loss is not None
        assert evaluation.loss > (losses[evaluation.epoch] or 0.0)
        assert 0 <= evaluation.accuracy <= 1
    told = fake.evaluate(loss=4.0, accuracy=0.5)
    assert (told.epoch, told.loss, told.accuracy) == (149, 4.0, 0.5)
    assert (await fake.history()).held_out[-1] == told
    assert fake.recent[-1].data == HeldOutMeasured(DEMO, told)
    assert (await FakeEngine("fresh").history()).held_out == []


def test_a_held_out_point_reads_with_and_without_its_floor() -> None:
    floored = HeldOutPoint(10, 1.0, 5.5, 0.25, 256, 6.25)
    assert encode(floored)["floor"] == 6.25
    assert decode(HeldOutPoint, encode(floored)) == floored
    # an engine older than the floor sends none: the point reads without one
    older = {k: v for k, v in encode(floored).items() if k != "floor"}
    assert decode(HeldOutPoint, older) == HeldOutPoint(10, 1.0, 5.5, 0.25, 256)
    # the fake's sample curve carries the demo's floor, as the real backbone reports it
    assert {e.floor for e in FakeEngine("contributing").held_out_} == {6.24}
