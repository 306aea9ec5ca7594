"""Preferences: BOINC-like defaults, round trips, and errors that name the setting."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from core.policy import Preferences, PreferencesError
from core.util.errors import ConfigError


def test_defaults_are_boinc_like() -> None:
    prefs = Preferences()
    assert prefs.to_dict() == {
        "contribute": False,
        "gpu_only_when_idle": True,
        "idle_minutes": 3.0,
        "cpu_when_in_use": "throttle",
        "in_use_cpu_fraction": 0.5,
        "run_on_battery": False,
        "leave_cores_free": 1,
        "max_other_cpu_percent": 25.0,
        "window_start": "",
        "window_end": "",
        "monthly_network_cap_mb": 0.0,
        "listen_port": 0,
        "offer_relay": False,
        "min_free_memory_mb": 512.0,
        "max_gpu_temperature_c": 85.0,
    }


def test_round_trip() -> None:
    prefs = Preferences(
        contribute=True,
        idle_minutes=10.0,
        cpu_when_in_use="pause",
        leave_cores_free=3,
        window_start="22:00",
        window_end="07:00",
        monthly_network_cap_mb=2048.0,
    )
    assert Preferences.from_dict(prefs.to_dict()) == prefs


def test_missing_keys_keep_their_defaults_and_ints_count_as_floats() -> None:
    prefs = Preferences.from_dict({"idle_minutes": 5, "contribute": True})
    assert prefs.idle_minutes == 5.0
    assert isinstance(prefs.idle_minutes, float)
    assert prefs.min_free_memory_mb == 512.0


def test_times_are_stored_in_one_spelling() -> None:
    prefs = Preferences(window_start="9:00", window_end=" 17:30 ")
    assert (prefs.window_start, prefs.window_end) == ("09:00", "17:30")


def test_updated_checks_like_the_constructor() -> None:
    prefs = Preferences().updated({"contribute": True, "in_use_cpu_fraction": 1})
    assert prefs.contribute
    assert prefs.in_use_cpu_fraction == 1.0
    with pytest.raises(PreferencesError, match="in_use_cpu_fraction"):
        prefs.updated({"in_use_cpu_fraction": 0})


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"idle_minutes": -1.0}, "idle_minutes"),
        ({"idle_minutes": float("nan")}, "idle_minutes"),
        ({"idle_minutes": float("inf")}, "idle_minutes"),
        ({"idle_minutes": "3"}, "idle_minutes"),
        ({"idle_minutes": True}, "idle_minutes"),
        ({"in_use_cpu_fraction": 0.0}, "in_use_cpu_fraction"),
        ({"in_use_cpu_fraction": 1.5}, "in_use_cpu_fraction"),
        ({"leave_cores_free": -1}, "leave_cores_free"),
        ({"leave_cores_free": 1.5}, "leave_cores_free"),
        ({"leave_cores_free": False}, "leave_cores_free"),
        ({"max_other_cpu_percent": 101.0}, "max_other_cpu_percent"),
        ({"max_other_cpu_percent": -5.0}, "max_other_cpu_percent"),
        ({"max_gpu_temperature_c": 0.0}, "max_gpu_temperature_c"),
        ({"max_gpu_temperature_c": 500.0}, "max_gpu_temperature_c"),
        ({"monthly_network_cap_mb": -1.0}, "monthly_network_cap_mb"),
        ({"min_free_memory_mb": -0.5}, "min_free_memory_mb"),
        ({"cpu_when_in_use": "slow"}, "cpu_when_in_use"),
        ({"contribute": "yes"}, "contribute"),
        ({"contribute": 1}, "contribute"),
        ({"window_start": "25:00", "window_end": "07:00"}, "window_start"),
        ({"window_start": "09:00", "window_end": "7pm"}, "window_end"),
        ({"window_start": "09:60", "window_end": "10:00"}, "window_start"),
        ({"window_start": "09:00"}, "window_end"),
        ({"window_end": "09:00"}, "window_start"),
        ({"window_start": 9}, "window_start"),
    ],
    ids=str,
)
def test_invalid_values_name_the_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(PreferencesError) as caught:
        Preferences.from_dict(changes)
    assert field in str(caught.value)
    assert caught.value.field == field
    assert isinstance(caught.value, ConfigError)


def test_range_errors_say_the_allowed_range() -> None:
    with pytest.raises(PreferencesError, match=r"above 0 and at most 1 \(got 1.5\)"):
        Preferences(in_use_cpu_fraction=1.5)
    with pytest.raises(PreferencesError, match=r"'run', 'throttle', 'pause'"):
        Preferences(cpu_when_in_use="never")


def test_unknown_key_lists_the_known_ones() -> None:
    with pytest.raises(PreferencesError) as caught:
        Preferences.from_dict({"idle_minuts": 3.0})
    message = str(caught.value)
    assert "'idle_minuts'" in message
    for f in dataclasses.fields(Preferences):
        assert f.name in message
    with pytest.raises(PreferencesError, match="bogus"):
        Preferences().updated({"bogus": 1})


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("contribute", "true", True),
        ("contribute", "Yes", True),
        ("contribute", "on", True),
        ("contribute", "1", True),
        ("contribute", "false", False),
        ("contribute", "NO", False),
        ("contribute", "off", False),
        ("contribute", "0", False),
        ("leave_cores_free", "2", 2),
        ("idle_minutes", "2.5", 2.5),
        ("idle_minutes", "7", 7.0),
        ("cpu_when_in_use", "pause", "pause"),
        ("window_start", "", ""),
    ],
)
def test_parse_value(name: str, text: str, expected: object) -> None:
    value = Preferences.parse_value(name, text)
    assert value == expected
    assert type(value) is type(expected)
    assert getattr(Preferences().updated({name: value}), name) == expected


@pytest.mark.parametrize(
    ("name", "text", "fragment"),
    [
        ("contribute", "maybe", "true or false"),
        ("leave_cores_free", "1.5", "whole number"),
        ("idle_minutes", "soon", "number"),
        ("no_such_thing", "1", "known preferences"),
    ],
)
def test_parse_value_errors(name: str, text: str, fragment: str) -> None:
    with pytest.raises(PreferencesError, match=fragment) as caught:
        Preferences.parse_value(name, text)
    assert name in str(caught.value)


def test_describe_covers_every_field() -> None:
    described = Preferences.describe()
    assert [name for name, _, _ in described] == [f.name for f in dataclasses.fields(Preferences)]
    defaults = Preferences().to_dict()
    for name, help_text, default in described:
        assert help_text.strip(), name
        assert default == defaults[name]
