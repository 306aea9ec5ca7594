"""The scheduling policy as a table: every code, the order of precedence, and the edge values."""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from typing import Any, get_args

import pytest

from core.policy import Conditions, Decision, GpuState, PolicyCode, Preferences, decide
from core.policy.window import DailyWindow
from core.policy.wording import moment_text, number_text

# a fixed zone, so that the expected clock times do not depend on the machine running the tests
TZ = dt.timezone(dt.timedelta(hours=2))


def at(hour: int, minute: int = 0, day: int = 5) -> dt.datetime:
    return dt.datetime(2024, 3, day, hour, minute, tzinfo=TZ)


NOON = at(12)

AWAY = Conditions(
    idle_seconds=3600.0,
    on_battery=False,
    battery_percent=100.0,
    other_cpu_percent=5.0,
    available_memory_mb=8000.0,
    cpu_count=8,
    gpu=None,
)


@dataclass(frozen=True)
class Case:
    conditions: dict[str, Any] = field(default_factory=dict)
    prefs: dict[str, Any] = field(default_factory=dict)
    now: dt.datetime = NOON
    action: str = "run"
    code: str = "running"
    reason: str = "Contributing"
    threads: int = 7
    duty: float | None = None
    until: float | None = None


def case(id_: str, **kwargs: Any) -> Any:
    return pytest.param(Case(**kwargs), id=id_)


def hot_gpu(temperature: float) -> GpuState:
    return GpuState(free_mb=1000.0, total_mb=8000.0, temperature_c=temperature)


EVERYTHING_WRONG: dict[str, Any] = {
    "on_battery": True,
    "other_cpu_percent": 90.0,
    "available_memory_mb": 10.0,
    "idle_seconds": 0.0,
    "network_mb_this_month": 5000.0,
}
CAPPED_OUTSIDE_HOURS: dict[str, Any] = {
    "window_start": "09:00",
    "window_end": "10:00",
    "monthly_network_cap_mb": 100.0,
}

CASES = [
    case("running by default", reason="Contributing"),
    case(
        "no project beats everything",
        conditions={"has_project": False, "user_paused": True, **EVERYTHING_WRONG},
        prefs={"contribute": False},
        action="pause",
        code="no_project",
        reason="Idle: no project attached",
    ),
    case(
        "not opted in beats user pause",
        conditions={"user_paused": True, **EVERYTHING_WRONG},
        prefs={"contribute": False},
        action="pause",
        code="not_opted_in",
        reason="Paused: contribution is off",
    ),
    case(
        "user pause beats snooze",
        conditions={"user_paused": True, "snoozed_until": at(14, 30).timestamp()},
        action="pause",
        code="user_paused",
        reason="Paused by you",
    ),
    case(
        "snoozed",
        conditions={"snoozed_until": at(14, 30).timestamp()},
        action="pause",
        code="snoozed",
        reason="Snoozed until 14:30",
        until=at(14, 30).timestamp(),
    ),
    case(
        "snooze beats everything but user and opt-in",
        conditions={"snoozed_until": at(14, 30).timestamp(), **EVERYTHING_WRONG},
        prefs=CAPPED_OUTSIDE_HOURS,
        action="pause",
        code="snoozed",
        reason="Snoozed until 14:30",
        until=at(14, 30).timestamp(),
    ),
    case(
        "snooze into tomorrow",
        conditions={"snoozed_until": at(1, 0, day=6).timestamp()},
        now=at(23),
        action="pause",
        code="snoozed",
        reason="Snoozed until tomorrow 01:00",
        until=at(1, 0, day=6).timestamp(),
    ),
    case("snooze that has ended", conditions={"snoozed_until": NOON.timestamp()}),
    case(
        "on battery",
        conditions={"on_battery": True},
        action="pause",
        code="on_battery",
        reason="Paused: on battery",
    ),
    case(
        "battery beats busy and outside hours",
        conditions={"on_battery": True, "other_cpu_percent": 90.0},
        prefs=CAPPED_OUTSIDE_HOURS,
        action="pause",
        code="on_battery",
        reason="on battery",
    ),
    case("battery allowed", conditions={"on_battery": True}, prefs={"run_on_battery": True}),
    case("battery unknown runs", conditions={"on_battery": None}),
    case(
        "outside hours after the end",
        prefs={"window_start": "09:00", "window_end": "17:00"},
        now=at(18),
        action="pause",
        code="outside_window",
        reason="Waiting: outside your hours (09:00–17:00)",
        until=at(9, 0, day=6).timestamp(),
    ),
    case(
        "outside hours before the start opens today",
        prefs={"window_start": "09:00", "window_end": "17:00"},
        now=at(8, 59),
        action="pause",
        code="outside_window",
        reason="outside your hours",
        until=at(9).timestamp(),
    ),
    case(
        "inside hours at the start",
        prefs={"window_start": "09:00", "window_end": "17:00"},
        now=at(9),
    ),
    case(
        "end of the window is outside",
        prefs={"window_start": "09:00", "window_end": "17:00"},
        now=at(17),
        action="pause",
        code="outside_window",
        reason="(09:00–17:00)",
        until=at(9, 0, day=6).timestamp(),
    ),
    case(
        "window over midnight at 23:30",
        prefs={"window_start": "22:00", "window_end": "07:00"},
        now=at(23, 30),
    ),
    case(
        "window over midnight at 06:59",
        prefs={"window_start": "22:00", "window_end": "07:00"},
        now=at(6, 59),
    ),
    case(
        "window over midnight closes at 07:00",
        prefs={"window_start": "22:00", "window_end": "07:00"},
        now=at(7),
        action="pause",
        code="outside_window",
        reason="(22:00–07:00)",
        until=at(22).timestamp(),
    ),
    case(
        "window start equals end is all day",
        prefs={"window_start": "08:00", "window_end": "08:00"},
        now=at(3),
    ),
    case(
        "network cap reached exactly",
        conditions={"network_mb_this_month": 1000.0},
        prefs={"monthly_network_cap_mb": 1000.0},
        action="pause",
        code="network_cap",
        reason="allowance is used (1000 of 1000 MB)",
    ),
    case(
        "network cap beats low memory",
        conditions={"network_mb_this_month": 1500.0, "available_memory_mb": 10.0},
        prefs={"monthly_network_cap_mb": 1000.0},
        action="pause",
        code="network_cap",
        reason="(1500 of 1000 MB)",
    ),
    case(
        "network under the cap",
        conditions={"network_mb_this_month": 999.5},
        prefs={"monthly_network_cap_mb": 1000.0},
    ),
    case("no network cap", conditions={"network_mb_this_month": 1e9}),
    case(
        "low memory beats busy and hot GPU",
        conditions={
            "available_memory_mb": 300.0,
            "other_cpu_percent": 90.0,
            "uses_gpu": True,
            "gpu": hot_gpu(99),
        },
        action="pause",
        code="low_memory",
        reason="Waiting: memory is low (300 MB free)",
    ),
    case("memory unknown runs", conditions={"available_memory_mb": None}),
    case(
        "hot GPU",
        conditions={"uses_gpu": True, "gpu": hot_gpu(88.0)},
        action="pause",
        code="gpu_hot",
        reason="Waiting: the GPU is hot (88 °C)",
    ),
    case("hot GPU ignored for CPU training", conditions={"uses_gpu": False, "gpu": hot_gpu(99)}),
    case("GPU temperature unknown", conditions={"uses_gpu": True, "gpu": GpuState(1.0, 2.0, None)}),
    case(
        "busy",
        conditions={"other_cpu_percent": 43.0},
        action="pause",
        code="busy",
        reason="Waiting: other programs are busy (43% CPU)",
    ),
    case(
        "busy beats user active",
        conditions={"other_cpu_percent": 43.0, "idle_seconds": 0.0},
        action="pause",
        code="busy",
        reason="(43% CPU)",
    ),
    case("busy exactly at the limit runs", conditions={"other_cpu_percent": 25.0}),
    case(
        "busy check off at 100",
        conditions={"other_cpu_percent": 100.0},
        prefs={"max_other_cpu_percent": 100.0},
    ),
    case(
        "GPU waits while you use the computer",
        conditions={"uses_gpu": True, "idle_seconds": 30.0},
        action="pause",
        code="user_active",
        reason="Waiting: you are using the computer",
    ),
    case(
        "GPU may run while you use the computer",
        conditions={"uses_gpu": True, "idle_seconds": 30.0},
        prefs={"gpu_only_when_idle": False},
    ),
    case(
        "CPU throttles while you use the computer",
        conditions={"idle_seconds": 30.0},
        action="throttle",
        code="throttled",
        reason="Running slowly: you are using the computer",
        duty=0.5,
    ),
    case(
        "throttle duty is the preference",
        conditions={"idle_seconds": 30.0},
        prefs={"in_use_cpu_fraction": 0.25},
        action="throttle",
        code="throttled",
        reason="Running slowly",
        duty=0.25,
    ),
    case(
        "CPU pauses while you use the computer",
        conditions={"idle_seconds": 30.0},
        prefs={"cpu_when_in_use": "pause"},
        action="pause",
        code="user_active",
        reason="Waiting: you are using the computer",
    ),
    case("CPU keeps running", conditions={"idle_seconds": 30.0}, prefs={"cpu_when_in_use": "run"}),
    case("away exactly idle_minutes", conditions={"idle_seconds": 180.0}),
    case(
        "idle threshold follows the preference",
        conditions={"idle_seconds": 500.0},
        prefs={"idle_minutes": 10.0},
        action="throttle",
        code="throttled",
        reason="Running slowly",
        duty=0.5,
    ),
    case(
        "headless ignores idleness",
        conditions={"headless": True, "idle_seconds": 0.0, "uses_gpu": True},
    ),
    case(
        "unknown idleness runs and says so",
        conditions={"idle_seconds": None, "uses_gpu": True},
        reason="Contributing (cannot tell whether you are using the computer)",
    ),
    case("threads never below one", conditions={"cpu_count": 1}, threads=1),
    case(
        "many cores left free",
        conditions={"cpu_count": 4},
        prefs={"leave_cores_free": 8},
        threads=1,
    ),
    case(
        "no cores left free", conditions={"cpu_count": 4}, prefs={"leave_cores_free": 0}, threads=4
    ),
    case(
        "paused decisions still carry threads",
        conditions={"on_battery": True, "cpu_count": 16},
        prefs={"leave_cores_free": 2},
        action="pause",
        code="on_battery",
        reason="Paused: on battery",
        threads=14,
    ),
]


@pytest.mark.parametrize("c", CASES)
def test_decide(c: Case) -> None:
    conditions = dataclasses.replace(AWAY, **c.conditions)
    prefs = Preferences(contribute=True).updated(c.prefs)
    decision = decide(conditions, prefs, c.now)
    assert (decision.action, decision.code) == (c.action, c.code)
    assert c.reason in decision.reason
    assert decision.threads == c.threads
    expected_duty = c.duty if c.duty is not None else {"run": 1.0, "pause": 0.0}[c.action]
    assert decision.duty == pytest.approx(expected_duty)
    if c.until is None:
        assert decision.until is None
    else:
        assert decision.until == pytest.approx(c.until)


def test_table_covers_every_code() -> None:
    codes = {param.values[0].code for param in CASES}
    assert codes == {
        "no_project",
        "not_opted_in",
        "user_paused",
        "snoozed",
        "on_battery",
        "outside_window",
        "network_cap",
        "low_memory",
        "gpu_hot",
        "busy",
        "user_active",
        "throttled",
        "running",
    }
    assert codes == set(get_args(PolicyCode))  # the type names no code the policy never gives


@pytest.mark.parametrize(
    "conditions",
    [
        {"idle_seconds": None, "headless": True},
        {"idle_seconds": 600.0},
    ],
    ids=["headless", "known idleness"],
)
def test_running_reason_is_plain_when_idleness_is_known_or_irrelevant(
    conditions: dict[str, Any],
) -> None:
    decision = decide(dataclasses.replace(AWAY, **conditions), Preferences(contribute=True), NOON)
    assert decision.reason == "Contributing"


def test_unknown_idleness_is_not_mentioned_when_it_would_not_matter() -> None:
    prefs = Preferences(contribute=True, cpu_when_in_use="run")
    decision = decide(dataclasses.replace(AWAY, idle_seconds=None), prefs, NOON)
    assert decision.reason == "Contributing"


def test_naive_local_datetimes_work() -> None:
    now = dt.datetime(2024, 3, 5, 12, 0)
    end = now + dt.timedelta(minutes=90)
    conditions = dataclasses.replace(AWAY, snoozed_until=end.timestamp())
    decision = decide(conditions, Preferences(contribute=True), now)
    assert decision == Decision("pause", "snoozed", "Snoozed until 13:30", 7, 0.0, end.timestamp())


def test_window_helpers() -> None:
    window = DailyWindow.parse("22:00", "07:00")
    assert window is not None
    assert window.label() == "22:00–07:00"
    assert window.next_start(at(23)) == at(22, 0, day=6)
    assert DailyWindow.parse("", "") is None


def test_wording() -> None:
    assert number_text(1234.4) == "1234"
    assert number_text(2.5) == "2.5"
    assert number_text(3.0) == "3"
    later = at(9, 5, day=9)
    assert moment_text(later, NOON) == f"{later.strftime('%a')} 9 {later.strftime('%b')} 09:05"
