"""The sensors the engine's scheduling decides from, gathered into one ``Conditions``.

The rules themselves (preferences, conditions, ``decide``, reason codes and wording) are pure and
live in ``core.policy``, which the fake engine shares; this package does the reading.

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

Nothing here imports torch or Qt.
"""

from core.scheduler.cpu_share import CpuSample, CpuShareWindow
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
from core.scheduler.sampler import ConditionSampler
from core.scheduler.sensor import IdleSensor, PolledIdleSensor, Reading
from core.scheduler.system import SystemSensor, SystemState, usable_cpu_count

__all__ = [
    "ConditionSampler",
    "CpuSample",
    "CpuShareWindow",
    "ExcludedCpu",
    "FallbackIdleSensor",
    "FixedIdleSensor",
    "GpuSensor",
    "IdleSensor",
    "LogindIdleSensor",
    "MacIdleSensor",
    "PolledIdleSensor",
    "ProcessKey",
    "ProcessTable",
    "Reading",
    "ScriptedIdleSensor",
    "SystemSensor",
    "SystemState",
    "WindowsIdleSensor",
    "X11IdleSensor",
    "default_idle_sensor",
    "usable_cpu_count",
]
