"""Battery, memory, CPU count and other programs' CPU use, read through psutil.

The engine polls this about four times a second, so a reading must stay well under a
millisecond: CPU counters are read without waiting (``cpu_share`` does the averaging), and the
battery, which can be slow to read on some laptops, is looked at only every few seconds.

``exclude`` names processes whose CPU use is not "other programs'" (the engine passes those of demo
swarms running on this computer, see ``excluded_cpu``); it is asked only every ``exclude_every``
seconds.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import cast

import psutil

from core.scheduler.cpu_share import CpuSample, CpuShareWindow
from core.scheduler.excluded_cpu import ExcludedCpu
from core.scheduler.sensor import Reading
from core.util.clock import SYSTEM_CLOCK, Clock

_MB = 1024 * 1024


@dataclass(frozen=True)
class SystemState:
    on_battery: bool | None
    battery_percent: float | None
    other_cpu_percent: float | None
    available_memory_mb: float | None
    cpu_count: int
    """CPUs this process may run on."""
    notes: tuple[str, ...] = ()
    """Why any of the above is ``None``."""


@dataclass(frozen=True)
class _Battery:
    on_battery: bool | None
    percent: float | None
    note: str | None


class SystemSensor:
    def __init__(
        self,
        *,
        window_seconds: float = 10.0,
        battery_every: float = 5.0,
        clock: Clock = SYSTEM_CLOCK,
        exclude: Callable[[], Iterable[int]] | None = None,
        exclude_every: float = 5.0,
    ) -> None:
        self._clock = clock
        self._process = psutil.Process()
        self._cpu = CpuShareWindow(window_seconds)
        self._excluded = (
            None
            if exclude is None
            else ExcludedCpu(exclude, refresh_every=exclude_every, clock=clock)
        )
        self._battery_every = battery_every
        self._battery_at = -float("inf")
        self._battery = _Battery(None, None, "not read yet")

    def read(self) -> SystemState:
        notes: list[str] = []
        battery = self._read_battery()
        if battery.note is not None:
            notes.append(f"battery: {battery.note}")
        other = self._other_cpu_percent()
        if other.note is not None:
            notes.append(f"other programs' CPU use: {other.note}")
        memory = _available_memory_mb()
        if memory.note is not None:
            notes.append(f"memory: {memory.note}")
        return SystemState(
            on_battery=battery.on_battery,
            battery_percent=battery.percent,
            other_cpu_percent=other.value,
            available_memory_mb=memory.value,
            cpu_count=usable_cpu_count(),
            notes=tuple(notes),
        )

    def _read_battery(self) -> _Battery:
        now = self._clock.monotonic()
        if now - self._battery_at >= self._battery_every:
            self._battery = _query_battery()
            self._battery_at = now
        return self._battery

    def _other_cpu_percent(self) -> Reading[float]:
        try:
            times = psutil.cpu_times()
            own = self._process.cpu_times()
        except (psutil.Error, OSError) as exc:
            return Reading(None, f"cannot read CPU times ({exc})")
        total = sum(times)
        # Linux counts guest time inside user time as well; steal is time the VM did not get
        for counted_twice in ("guest", "guest_nice"):
            total -= getattr(times, counted_twice, 0.0)
        not_busy = sum(getattr(times, name, 0.0) for name in ("idle", "iowait", "steal"))
        excluded = self._excluded.sample() if self._excluded is not None else 0.0
        sample = CpuSample(
            self._clock.monotonic(), total - not_busy, own.user + own.system, excluded
        )
        percent = self._cpu.add(sample, os.cpu_count() or 1)
        return Reading(percent, None if percent is not None else "still measuring")


def usable_cpu_count() -> int:
    """CPUs this process may run on (its affinity, where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, psutil.cpu_count(logical=True) or 1)


def _query_battery() -> _Battery:
    try:
        battery = psutil.sensors_battery()
    except Exception as exc:
        # psutil raises assorted errors for odd power-supply drivers; none should stop the engine
        return _Battery(None, None, f"cannot read the battery ({exc})")
    if battery is None:
        return _Battery(None, None, "no battery found, or the system does not report it")
    # psutil's stubs say bool, but it gives None when the charger state is unknown
    plugged = cast("bool | None", battery.power_plugged)
    if plugged is None:
        return _Battery(
            None, float(battery.percent), "cannot tell whether the charger is plugged in"
        )
    return _Battery(not plugged, float(battery.percent), None)


def _available_memory_mb() -> Reading[float]:
    try:
        return Reading(psutil.virtual_memory().available / _MB)
    except (psutil.Error, OSError) as exc:
        return Reading(None, f"cannot read available memory ({exc})")
