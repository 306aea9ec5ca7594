"""The engine's scheduling policy and the sensors it decides from.

- ``preferences``  ``Preferences``: the user's settings (when, how much), BOINC-like defaults, checked.
- ``errors``       ``PreferencesError``: a setting that cannot be used, naming the field.
- ``window``       ``DailyWindow``: the optional daily "HH:MM" to "HH:MM" hours, wrapping midnight.
- ``conditions``   ``Conditions``, ``GpuState``: what the sensors saw; ``None`` is "cannot tell".
- ``policy``       ``decide``: the pure run / throttle / pause ``Decision``, with a code and a reason.
- ``wording``      numbers and times in the reasons' plain words.
- ``sensor``       ``Reading``, the ``IdleSensor`` protocol and ``PolledIdleSensor``, its base.
- ``idle``         ``default_idle_sensor`` for this platform; fallback, fixed and scripted sensors.
- ``idle_x11``     ``X11IdleSensor``: XScreenSaver through ctypes.
- ``idle_logind``  ``LogindIdleSensor``: logind's IdleHint through ``loginctl`` (Linux fallback).
- ``idle_windows`` ``WindowsIdleSensor``: GetLastInputInfo.
- ``idle_macos``   ``MacIdleSensor``: HIDIdleTime from ``ioreg``.
- ``cpu_share``    ``CpuShareWindow``: other programs' CPU share, averaged over seconds.
- ``excluded_cpu`` ``ExcludedCpu``: CPU time of processes that are not "other programs" (a local
  demo swarm's), counted only between readings in which each process existed.
- ``system``       ``SystemSensor``: battery, memory, CPU count and other programs' CPU use (psutil).
- ``gpu``          ``GpuSensor``: GPU memory and temperature, only if torch is already loaded.
- ``sampler``      ``ConditionSampler``: all sensors plus the engine's state into one ``Conditions``.

Nothing here imports torch or Qt; the GUI may import this package to show and edit preferences.
"""

from core.scheduler.conditions import Conditions, GpuState
from core.scheduler.cpu_share import CpuSample, CpuShareWindow
from core.scheduler.errors import PreferencesError
from core.scheduler.excluded_cpu import ExcludedCpu, ProcessKey, ProcessTable
from core.scheduler.gpu import GpuSensor
from core.scheduler.idle import (
    FallbackIdleSensor,
    FixedIdleSensor,
    ScriptedIdleSensor,
    default_idle_sensor,
)
from core.scheduler.idle_logind import LogindIdleSensor
from core.scheduler.idle_macos import MacIdleSensor
from core.scheduler.idle_windows import WindowsIdleSensor
from core.scheduler.idle_x11 import X11IdleSensor
from core.scheduler.policy import Action, Decision, decide
from core.scheduler.preferences import CPU_WHEN_IN_USE, Preferences
from core.scheduler.sampler import ConditionSampler
from core.scheduler.sensor import IdleSensor, PolledIdleSensor, Reading
from core.scheduler.system import SystemSensor, SystemState, usable_cpu_count
from core.scheduler.window import DailyWindow

__all__ = [
    "CPU_WHEN_IN_USE",
    "Action",
    "ConditionSampler",
    "Conditions",
    "CpuSample",
    "CpuShareWindow",
    "DailyWindow",
    "Decision",
    "ExcludedCpu",
    "FallbackIdleSensor",
    "FixedIdleSensor",
    "GpuSensor",
    "GpuState",
    "IdleSensor",
    "LogindIdleSensor",
    "MacIdleSensor",
    "PolledIdleSensor",
    "Preferences",
    "PreferencesError",
    "ProcessKey",
    "ProcessTable",
    "Reading",
    "ScriptedIdleSensor",
    "SystemSensor",
    "SystemState",
    "WindowsIdleSensor",
    "X11IdleSensor",
    "decide",
    "default_idle_sensor",
    "usable_cpu_count",
]
