"""What the window's words and defaults rest on: the wording functions at their edges and the
presets against the real preferences. (The FakeEngine against the engine's preferences and
policy: ``tests/api/test_fake_engine.py``.)

No window here: pure functions.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from app import wording
from app.presets import DEFAULT_PRESET, PRESETS, current_preset
from core.api.events import Event, HeldOutMeasured
from core.api.schema import HeldOutPoint
from core.policy import Preferences

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


@pytest.mark.parametrize(
    ("loss", "floor", "text"),
    [
        (5.7312, 6.2412, "0.51 below the unigram floor (6.24)"),
        (6.24, 6.24, "0.00 below the unigram floor (6.24)"),
        (7.0, 6.24, "0.76 above the unigram floor (6.24)"),
        (5.0, None, ""),
        (None, 6.24, ""),
    ],
)
def test_beside_floor(loss: float | None, floor: float | None, text: str) -> None:
    assert wording.beside_floor(loss, floor) == text


def test_a_held_out_event_says_where_the_loss_stands_against_the_floor() -> None:
    point = HeldOutPoint(30, 0.0, 5.5, 0.25, 256, 6.25)
    event = Event(1, 0.0, HeldOutMeasured("demo", point))
    assert wording.describe_event(event) == (
        "Collaboration",
        (
            "The model of epoch 30 measured on held-out text: loss 5.500, 25.0 % of tokens "
            "right; 0.75 below the unigram floor (6.25)"
        ),
    )
    bare = dataclasses.replace(
        event, data=HeldOutMeasured("demo", HeldOutPoint(30, 0.0, 5.5, 0.25, 256))
    )
    assert wording.describe_event(bare)[1] == (
        "The model of epoch 30 measured on held-out text: loss 5.500, 25.0 % of tokens right"
    )


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
