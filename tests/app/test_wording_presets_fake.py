"""What the window's words and defaults rest on: the wording functions at their edges, the presets
against the real preferences, and the FakeEngine (which every GUI test trusts) against the real
engine's preferences and scheduling policy, so that the fake cannot drift from the engine.

No window here: pure functions and the fake's own API.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from app import wording
from app.presets import DEFAULT_PRESET, PRESETS, current_preset
from core.api.settings import settings_view
from core.api.testing import FakeEngine
from core.policy import Conditions, Preferences, decide
from core.util.clock import FakeClock

# ---- wording -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0"),
        (999, "999"),
        (9_999, "9,999"),
        (10_000, "10.0 k"),
        (12_345, "12.3 k"),
        (123_456, "123 k"),
        (1.84e6, "1.84 M"),
        (264_293_157, "264 M"),
        (1e9, "1.00 B"),
        (1e12, "1.00 T"),
        (-12_345, "-12.3 k"),
        (float("nan"), "–"),
        (float("inf"), "–"),
    ],
)
def test_count(n: float, text: str) -> None:
    assert wording.count(n) == text


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (999, "999 B"),
        (1000, "1.00 kB"),
        (12_345, "12.3 kB"),
        (1_234_000_000, "1.23 GB"),
        (17_256_073_923, "17.3 GB"),
        (2.5e12, "2.50 TB"),
        (1e16, "10000 TB"),  # no unit above TB
    ],
)
def test_data_size(n: float, text: str) -> None:
    assert wording.data_size(n) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "0 s"),
        (0, "0 s"),
        (59, "59 s"),
        (60, "1 min"),
        (3599, "1 h"),  # rounded: 59 min 59 s
        (3600, "1 h"),
        (3660, "1 h 1 min"),
        (11_520, "3 h 12 min"),
        (47 * 3600 + 59 * 60, "47 h 59 min"),
        (48 * 3600, "2 d"),
        (52 * 3600, "2 d 4 h"),
        (967_609.7, "11 d 4 h"),
    ],
)
def test_duration(seconds: float, text: str) -> None:
    assert wording.duration(seconds) == text


def at(day: int, hour: int, minute: int = 0) -> float:
    """A local time in November 2026 (no daylight-saving change in the days used)."""
    return dt.datetime(2026, 11, day, hour, minute).timestamp()


NOW = at(16, 15, 0)


@pytest.mark.parametrize(
    ("then", "text"),
    [
        (NOW, "just now"),
        (NOW + 30, "just now"),  # a clock a little ahead is no future
        (NOW - 44, "just now"),
        (NOW - 45, "1 min ago"),
        (NOW - 300, "5 min ago"),
        (NOW - 3600, "1 h ago"),
        (NOW - 3 * 3600, "3 h ago"),
        (at(16, 8, 5), "08:05"),
        (at(15, 14, 2), "yesterday 14:02"),
        (at(13, 14, 2), f"13 {dt.date(2026, 11, 13).strftime('%b')} 14:02"),
    ],
)
def test_ago(then: float, text: str) -> None:
    assert wording.ago(then, NOW) == text


def test_day_label_and_short_date() -> None:
    monday = dt.date(2026, 11, 16)
    day, month = monday.strftime("%a"), monday.strftime("%b")  # in the process's locale
    assert wording.day_label("2026-11-16") == f"{day} 16"
    assert wording.day_label("2026-11-16", month=True) == f"{day} 16 {month}"
    assert wording.day_label("2026-11-06") == f"{dt.date(2026, 11, 6).strftime('%a')} 6"
    assert wording.short_date("2026-11-16") == f"16 {month}"
    assert wording.short_date("2026-01-01") == f"1 {dt.date(2026, 1, 1).strftime('%b')}"
    assert wording.day_label("not a day") == "not a day"  # shown as the engine sent it
    assert wording.short_date("2026-13-40") == "2026-13-40"


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0th"),
        (1, "1st"),
        (2, "2nd"),
        (3, "3rd"),
        (4, "4th"),
        (11, "11th"),
        (12, "12th"),
        (13, "13th"),
        (21, "21st"),
        (22, "22nd"),
        (23, "23rd"),
        (85, "85th"),
        (101, "101st"),
        (111, "111th"),
        (112, "112th"),
    ],
)
def test_ordinal(n: int, text: str) -> None:
    assert wording.ordinal(n) == text


def test_rounding_never_shows_a_thousand_of_the_smaller_unit() -> None:
    assert wording.count(999_999) == "1.00 M"
    assert wording.data_size(999_999) == "1.00 MB"
    assert wording.count(99_999) == "100 k"
    assert wording.duration(59.6) == "1 min"
    assert wording.ago(NOW - 3599, NOW) == "1 h ago"


def test_trillions_keep_three_digits() -> None:
    assert wording.count(1.5e12) == "1.50 T"


# ---- presets ---------------------------------------------------------------------------------------


REAL = [f.name for f in dataclasses.fields(Preferences)]


@pytest.mark.parametrize("key", [p.key for p in PRESETS])
def test_a_preset_sets_only_real_preferences_that_the_engine_accepts(key: str) -> None:
    preset = next(p for p in PRESETS if p.key == key)
    unknown = sorted(set(preset.values) - set(REAL))
    assert not unknown, f"{key} sets preferences the engine does not have: {unknown}"
    assert "contribute" not in preset.values  # opting in is the user's switch, never a preset
    applied = Preferences().updated(preset.values)  # raises PreferencesError if refused
    kinds = {f.name: type(f.default) for f in dataclasses.fields(Preferences)}
    for name, value in preset.values.items():
        assert getattr(applied, name) == value, name
        assert type(value) is kinds[name], f"{key}.{name} is a {type(value).__name__}"


def test_balanced_is_the_engines_defaults() -> None:
    balanced = next(p for p in PRESETS if p.key == "balanced")
    assert DEFAULT_PRESET == "balanced"
    defaults = Preferences()
    assert balanced.values == {name: getattr(defaults, name) for name in balanced.values}
    assert current_preset(defaults.to_dict()) is balanced  # type: ignore[arg-type]


def test_the_presets_differ() -> None:
    values = [tuple(sorted(p.values.items())) for p in PRESETS]
    assert len(set(values)) == len(PRESETS)
    assert len({p.title for p in PRESETS}) == len(PRESETS)


# ---- the fake against the engine -------------------------------------------------------------------


async def test_the_fakes_preferences_are_the_engines() -> None:
    settings = await FakeEngine("fresh").settings()
    assert settings == settings_view(Preferences())  # the engine's own answer
    described = [(s.name, s.help, s.default) for s in settings.descriptions]
    assert described == Preferences.describe()
    for info in settings.descriptions:
        real = next(f for f in dataclasses.fields(Preferences) if f.name == info.name)
        assert type(info.default) is type(real.default), info.name
    assert FakeEngine("fresh").values == {**Preferences().to_dict()}


def fixed_clock(hour: int, minute: int = 0) -> FakeClock:
    """A clock standing at ``hour:minute`` today, local time."""
    return FakeClock(dt.datetime.combine(dt.date.today(), dt.time(hour, minute)).timestamp())


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
