"""The scheduling decision: run, throttle or pause, from the conditions and the user's preferences.

``decide`` is pure (no I/O, no clock reads), so every rule is tested with a table of fixed
datetimes. The rules are checked in order and the first that applies wins; ``_PAUSE_RULES`` is
that order for the rules that pause.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from core.policy.codes import PolicyCode
from core.policy.conditions import Conditions
from core.policy.preferences import Preferences
from core.policy.window import DailyWindow
from core.policy.wording import local_time, moment_text, number_text

Action = Literal["run", "throttle", "pause"]

IN_USE_TEXT = "you are using the computer"


@dataclass(frozen=True)
class Decision:
    action: Action
    code: PolicyCode
    """Machine-readable: ``running``, ``throttled``, ``user_active``, ``on_battery``, ..."""
    reason: str
    """For the user, in plain words: "Waiting: you are using the computer"."""
    threads: int
    """CPU threads training may use (at least 1)."""
    duty: float
    """Share of the time to compute: 1.0 to run, 0.0 when paused."""
    until: float | None = None
    """Unix time when this decision will change by itself (snooze end, window opening), if known."""


@dataclass(frozen=True)
class _Pause:
    code: PolicyCode
    reason: str
    until: float | None = None


_Rule = Callable[[Conditions, Preferences, _dt.datetime], _Pause | None]


def decide(conditions: Conditions, prefs: Preferences, now: _dt.datetime) -> Decision:
    """What training should do now; ``now`` is local time, naive or aware."""
    threads = max(1, conditions.cpu_count - prefs.leave_cores_free)
    for rule in _PAUSE_RULES:
        pause = rule(conditions, prefs, now)
        if pause is not None:
            return Decision("pause", pause.code, pause.reason, threads, 0.0, pause.until)
    if _user_active(conditions, prefs):
        if conditions.uses_gpu:
            if prefs.gpu_only_when_idle:
                return Decision("pause", "user_active", f"Waiting: {IN_USE_TEXT}", threads, 0.0)
        elif prefs.cpu_when_in_use == "pause":
            return Decision("pause", "user_active", f"Waiting: {IN_USE_TEXT}", threads, 0.0)
        elif prefs.cpu_when_in_use == "throttle":
            reason = f"Running slowly: {IN_USE_TEXT}"
            return Decision("throttle", "throttled", reason, threads, prefs.in_use_cpu_fraction)
    reason = "Contributing"
    if _idleness_unknown_but_matters(conditions, prefs):
        reason += " (cannot tell whether you are using the computer)"
    return Decision("run", "running", reason, threads, 1.0)


def _user_active(c: Conditions, prefs: Preferences) -> bool:
    if c.headless or c.idle_seconds is None:
        return False
    return c.idle_seconds < prefs.idle_minutes * 60.0


def _idleness_unknown_but_matters(c: Conditions, prefs: Preferences) -> bool:
    if c.headless or c.idle_seconds is not None:
        return False
    if c.uses_gpu:
        return prefs.gpu_only_when_idle
    return prefs.cpu_when_in_use != "run"


def _no_project(c: Conditions, prefs: Preferences, now: _dt.datetime) -> _Pause | None:
    return None if c.has_project else _Pause("no_project", "Idle: no project attached")


def _not_opted_in(c: Conditions, prefs: Preferences, now: _dt.datetime) -> _Pause | None:
    return None if prefs.contribute else _Pause("not_opted_in", "Paused: contribution is off")


def _user_paused(c: Conditions, prefs: Preferences, now: _dt.datetime) -> _Pause | None:
    return _Pause("user_paused", "Paused by you") if c.user_paused else None


def _snoozed(c: Conditions, prefs: Preferences, now: _dt.datetime) -> _Pause | None:
    if c.snoozed_until is None or c.snoozed_until <= now.timestamp():
        return None
    end = moment_text(local_time(c.snoozed_until, now), now)
    return _Pause("snoozed", f"Snoozed until {end}", c.snoozed_until)


def _on_battery(c: Conditions, prefs: Preferences, now: _dt.datetime) -> _Pause | None:
    if c.on_battery is True and not prefs.run_on_battery:
        return _Pause("on_battery", "Paused: on battery")
    return None


def _outside_window(c: Conditions, prefs: Preferences, now: _dt.datetime) -> _Pause | None:
    window = DailyWindow.parse(prefs.window_start, prefs.window_end)
    if window is None or window.contains(now):
        return None
    reason = f"Waiting: outside your hours ({window.label()})"
    return _Pause("outside_window", reason, window.next_start(now).timestamp())


def _network_cap(c: Conditions, prefs: Preferences, now: _dt.datetime) -> _Pause | None:
    cap = prefs.monthly_network_cap_mb
    if cap <= 0 or c.network_mb_this_month < cap:
        return None
    used = f"{number_text(c.network_mb_this_month)} of {number_text(cap)} MB"
    return _Pause("network_cap", f"Paused: this month's network allowance is used ({used})")


def _low_memory(c: Conditions, prefs: Preferences, now: _dt.datetime) -> _Pause | None:
    free = c.available_memory_mb
    if free is None or free >= prefs.min_free_memory_mb:
        return None
    return _Pause("low_memory", f"Waiting: memory is low ({free:.0f} MB free)")


def _gpu_hot(c: Conditions, prefs: Preferences, now: _dt.datetime) -> _Pause | None:
    temperature = c.gpu.temperature_c if c.gpu is not None else None
    if not c.uses_gpu or temperature is None or temperature < prefs.max_gpu_temperature_c:
        return None
    return _Pause("gpu_hot", f"Waiting: the GPU is hot ({temperature:.0f} °C)")


def _busy(c: Conditions, prefs: Preferences, now: _dt.datetime) -> _Pause | None:
    other, limit = c.other_cpu_percent, prefs.max_other_cpu_percent
    if other is None or limit >= 100.0 or other <= limit:
        return None
    return _Pause("busy", f"Waiting: other programs are busy ({other:.0f}% CPU)")


_PAUSE_RULES: tuple[_Rule, ...] = (
    _no_project,
    _not_opted_in,
    _user_paused,
    _snoozed,
    _on_battery,
    _outside_window,
    _network_cap,
    _low_memory,
    _gpu_hot,
    _busy,
)
