"""The three presets offered on first run and on the Schedule page.

Each sets the scheduler preferences that decide how much of the computer Barnraise takes; the others
(time window, network cap, memory and temperature limits) are left as the user set them.
Balanced is the engine's own defaults (BOINC's: GPU only after 3 idle minutes, not on battery, one
core left free).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.api.schema import SettingValue


@dataclass(frozen=True)
class Preset:
    key: str
    title: str
    summary: str
    values: dict[str, SettingValue]

    def matches(self, current: dict[str, SettingValue]) -> bool:
        return all(current.get(name) == value for name, value in self.values.items())


PRESETS = (
    Preset(
        "light",
        "Light",
        "Only while you are away for 10 minutes; pauses the moment you come back, leaves two "
        "cores free and waits whenever other programs are busy.",
        {
            "gpu_only_when_idle": True,
            "idle_minutes": 10.0,
            "cpu_when_in_use": "pause",
            "in_use_cpu_fraction": 0.25,
            "leave_cores_free": 2,
            "max_other_cpu_percent": 15.0,
            "run_on_battery": False,
        },
    ),
    Preset(
        "balanced",
        "Balanced",
        "The GPU after 3 idle minutes; the CPU at half pace while you work; one core left free; "
        "never on battery. Recommended.",
        {
            "gpu_only_when_idle": True,
            "idle_minutes": 3.0,
            "cpu_when_in_use": "throttle",
            "in_use_cpu_fraction": 0.5,
            "leave_cores_free": 1,
            "max_other_cpu_percent": 25.0,
            "run_on_battery": False,
        },
    ),
    Preset(
        "maximum",
        "Maximum",
        "Always, even while you use the computer, on every core, whatever else runs; still never "
        "on battery. For a machine you do not use much.",
        {
            "gpu_only_when_idle": False,
            "idle_minutes": 3.0,
            "cpu_when_in_use": "run",
            "in_use_cpu_fraction": 1.0,
            "leave_cores_free": 0,
            "max_other_cpu_percent": 100.0,
            "run_on_battery": False,
        },
    ),
)
DEFAULT_PRESET = "balanced"


def preset(key: str) -> Preset:
    for p in PRESETS:
        if p.key == key:
            return p
    raise KeyError(key)


def current_preset(values: dict[str, SettingValue]) -> Preset | None:
    """The preset the preferences match, or None when the user changed them by hand."""
    return next((p for p in PRESETS if p.matches(values)), None)
