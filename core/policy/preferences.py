"""The user's scheduling preferences: when Barnraise may use this computer, with BOINC-like defaults.

Every field carries a one-line ``help`` in its metadata, which the GUI and ``barnraise ctl`` show.
Values are TOML-friendly (bool, int, float, str) and checked in ``__post_init__``, so a
``Preferences`` that exists is always usable. Every number has a lower and an upper bound (``BOUNDS``,
also in each help line), NaN and infinities are refused, and so are texts longer than ``MAX_TEXT``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from core.policy.errors import PreferencesError
from core.policy.window import format_hhmm, parse_hhmm

CPU_WHEN_IN_USE = ("run", "throttle", "pause")

PreferenceValue = bool | int | float | str
"""The types a preference can have (the API's ``SettingValue`` is the same)."""

BOUNDS: dict[str, tuple[float, float]] = {
    "idle_minutes": (0.0, 7 * 24 * 60.0),
    "in_use_cpu_fraction": (0.0, 1.0),  # above 0
    "leave_cores_free": (0, 4096),
    "max_other_cpu_percent": (0.0, 100.0),
    "monthly_network_cap_mb": (0.0, 1e9),
    "listen_port": (0, 65535),
    "min_free_memory_mb": (0.0, 2.0**24),
    "max_gpu_temperature_c": (0.0, 150.0),  # above 0
}
"""The lowest and highest value of each number (both allowed unless the help line says "above")."""
_ABOVE = frozenset({"in_use_cpu_fraction", "max_gpu_temperature_c"})
MAX_TEXT = 64
"""The longest text a preference takes (an HH:MM time, a word)."""

_TRUE_WORDS = frozenset({"true", "yes", "on", "1"})
_FALSE_WORDS = frozenset({"false", "no", "off", "0"})


@dataclass(frozen=True)
class Preferences:
    contribute: bool = field(
        default=False,
        metadata={"help": "Contribute to the project; while off, Barnraise only waits."},
    )
    gpu_only_when_idle: bool = field(
        default=True,
        metadata={"help": "Use the GPU only when the keyboard and mouse have been idle a while."},
    )
    idle_minutes: float = field(
        default=3.0,
        metadata={
            "help": "Minutes without keyboard or mouse input before you count as away "
            "(0 to 10080, a week)."
        },
    )
    cpu_when_in_use: str = field(
        default="throttle",
        metadata={
            "help": "What CPU training does while you use the computer: run, throttle or pause."
        },
    )
    in_use_cpu_fraction: float = field(
        default=0.5,
        metadata={
            "help": "Share of the time CPU training computes while throttled (above 0, up to 1)."
        },
    )
    run_on_battery: bool = field(
        default=False,
        metadata={"help": "Keep contributing when the computer runs on battery."},
    )
    leave_cores_free: int = field(
        default=1,
        metadata={
            "help": "CPU cores left for your own programs, 0 to 4096 (training always gets at "
            "least one)."
        },
    )
    max_other_cpu_percent: float = field(
        default=25.0,
        metadata={
            "help": "Wait while other programs use more CPU than this percent; 100 never waits."
        },
    )
    window_start: str = field(
        default="",
        metadata={
            "help": "Daily start time as HH:MM (24-hour); empty with window_end for any time."
        },
    )
    window_end: str = field(
        default="",
        metadata={"help": "Daily end time as HH:MM; it may be past midnight, e.g. 22:00 to 07:00."},
    )
    monthly_network_cap_mb: float = field(
        default=0.0,
        metadata={
            "help": "Megabytes Barnraise may send and receive each month, up to 10^9 "
            "(a petabyte); 0 for no limit."
        },
    )
    listen_port: int = field(
        default=0,
        metadata={
            "help": "TCP port other volunteers connect to; 0 for the project's (usually 4001). "
            "Another free port is used when it is taken."
        },
    )
    offer_relay: bool = field(
        default=False,
        metadata={
            "help": "Relay connections for volunteers behind routers when this computer is "
            "reachable from the internet (the traffic counts toward the monthly cap)."
        },
    )
    min_free_memory_mb: float = field(
        default=512.0,
        metadata={
            "help": "Wait while less memory than this (MB, 0 to 2^24) is available to other "
            "programs."
        },
    )
    max_gpu_temperature_c: float = field(
        default=85.0,
        metadata={
            "help": "Wait while the GPU is at least this hot (degrees Celsius, above 0, up to 150)."
        },
    )

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, _coerce(f.name, _kind(f), getattr(self, f.name)))
        for name, (low, high) in BOUNDS.items():
            _check_bounds(name, getattr(self, name), low, high, above=name in _ABOVE)
        if self.cpu_when_in_use not in CPU_WHEN_IN_USE:
            allowed = ", ".join(repr(v) for v in CPU_WHEN_IN_USE)
            _fail("cpu_when_in_use", f"must be one of {allowed}", self.cpu_when_in_use)
        self._check_window()

    def _check_window(self) -> None:
        for name in ("window_start", "window_end"):
            text = getattr(self, name).strip()
            if text:
                try:
                    minute = parse_hhmm(text)
                except ValueError:
                    _fail(name, "must be a time as HH:MM (24-hour), e.g. 09:00", text)
                # stored in one spelling so that "9:00" and "09:00" compare equal
                object.__setattr__(self, name, format_hhmm(minute))
            else:
                object.__setattr__(self, name, "")
        if bool(self.window_start) != bool(self.window_end):
            empty = "window_end" if self.window_start else "window_start"
            raise PreferencesError(
                "window_start and window_end must both be set or both be empty "
                f"(window_start={self.window_start!r}, window_end={self.window_end!r})",
                field=empty,
            )

    def to_dict(self) -> dict[str, PreferenceValue]:
        values: dict[str, PreferenceValue] = {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self)
        }
        return values

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> Preferences:
        """Preferences from a config file's table; missing keys keep their defaults."""
        _check_known(d)
        kwargs: dict[str, Any] = dict(d)
        return cls(**kwargs)

    def updated(self, changes: Mapping[str, object]) -> Preferences:
        """A copy with ``changes`` applied, checked like ``from_dict``."""
        _check_known(changes)
        kwargs: dict[str, Any] = dict(changes)
        return dataclasses.replace(self, **kwargs)

    @classmethod
    def describe(cls) -> list[tuple[str, str, PreferenceValue]]:
        """(name, help, default) for every preference, in declaration order."""
        defaults = cls().to_dict()
        return [
            (f.name, str(f.metadata["help"]), defaults[f.name]) for f in dataclasses.fields(cls)
        ]

    @classmethod
    def parse_value(cls, name: str, text: str) -> object:
        """Convert a command-line string to ``name``'s type (ranges are checked by ``updated``)."""
        _check_known({name: text})
        kind = next(_kind(f) for f in dataclasses.fields(cls) if f.name == name)
        word = text.strip()
        if kind == "bool":
            if word.lower() in _TRUE_WORDS:
                return True
            if word.lower() in _FALSE_WORDS:
                return False
            _fail(name, "takes true or false (also yes/no, on/off, 1/0)", text)
        if kind == "int":
            try:
                return int(word)
            except ValueError:
                _fail(name, "takes a whole number", text)
        if kind == "float":
            try:
                return float(word)
            except ValueError:
                _fail(name, "takes a number", text)
        return text


def _fail(name: str, requirement: str, value: object) -> NoReturn:
    try:
        shown = repr(value)
    except ValueError:  # an integer of more digits than Python prints
        shown = "a number of thousands of digits"
    if len(shown) > 40:  # a value sent to hurt should not fill the answer and the log
        shown = f"{shown[:30]}... ({len(shown)} characters)"
    raise PreferencesError(f"{name} {requirement} (got {shown})", field=name)


def _check_known(d: Mapping[str, object]) -> None:
    known = [f.name for f in dataclasses.fields(Preferences)]
    unknown = sorted(str(key) for key in d if key not in known)
    if unknown:
        names = ", ".join(repr(k) for k in unknown)
        raise PreferencesError(
            f"unknown preference {names}; known preferences are: {', '.join(known)}",
            field=unknown[0],
        )


def _kind(f: dataclasses.Field[Any]) -> str:
    """The field's type name: "bool", "int", "float" or "str"."""
    return f.type if isinstance(f.type, str) else f.type.__name__


def _coerce(name: str, kind: str, value: object) -> object:
    """``value`` as the field's type; ints become floats for float fields, bools never count as numbers."""
    if kind == "bool" and not isinstance(value, bool):
        _fail(name, "must be true or false", value)
    if kind == "str" and not isinstance(value, str):
        _fail(name, "must be text", value)
    if kind == "str" and len(value) > MAX_TEXT:  # type: ignore[arg-type]
        _fail(name, f"must be at most {MAX_TEXT} characters", value)
    if kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
        _fail(name, "must be a whole number", value)
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            _fail(name, "must be a number", value)
        try:
            number = float(value)
        except OverflowError:  # an integer too large for a float
            _fail(name, "must be a finite number", value)
        if not math.isfinite(number):
            _fail(name, "must be a finite number", value)
        return number
    return value


def _check_bounds(name: str, value: float, low: float, high: float, *, above: bool) -> None:
    too_low = value <= low if above else value < low
    if too_low or value > high:
        lowest = f"above {low:g}" if above else f"{low:g} or more"
        _fail(name, f"must be {lowest} and at most {high:g}", value)
