"""Gathering one ``Conditions`` from the sensors and the engine's own state, notes included.

The idle sensor is not asked on a headless machine (idleness does not apply there), and the GPU
only when the project trains on one, so neither adds notes that do not matter.
"""

from __future__ import annotations

from core.policy import Conditions
from core.scheduler.gpu import GpuSensor
from core.scheduler.sensor import IdleSensor
from core.scheduler.system import SystemSensor


class ConditionSampler:
    def __init__(
        self, idle: IdleSensor, system: SystemSensor, gpu: GpuSensor, *, headless: bool
    ) -> None:
        self._idle = idle
        self._system = system
        self._gpu = gpu
        self._headless = headless

    def sample(
        self,
        *,
        uses_gpu: bool,
        has_project: bool,
        user_paused: bool,
        snoozed_until: float | None,
        network_mb_this_month: float,
    ) -> Conditions:
        notes: list[str] = []
        idle_seconds = None
        if not self._headless:
            idle_seconds = self._idle.idle_seconds()
            if idle_seconds is None:
                notes.append(f"keyboard and mouse idleness: {self._idle.note or 'unknown'}")
        system = self._system.read()
        notes.extend(system.notes)
        gpu = None
        if uses_gpu:
            reading = self._gpu.read()
            gpu = reading.value
            if reading.note is not None:
                notes.append(f"GPU: {reading.note}")
            elif gpu is not None and gpu.temperature_c is None and self._gpu.temperature_note:
                notes.append(f"GPU: {self._gpu.temperature_note}")
        return Conditions(
            idle_seconds=idle_seconds,
            on_battery=system.on_battery,
            battery_percent=system.battery_percent,
            other_cpu_percent=system.other_cpu_percent,
            available_memory_mb=system.available_memory_mb,
            cpu_count=system.cpu_count,
            gpu=gpu,
            network_mb_this_month=network_mb_this_month,
            uses_gpu=uses_gpu,
            has_project=has_project,
            user_paused=user_paused,
            snoozed_until=snoozed_until,
            headless=self._headless,
            notes=tuple(notes),
        )

    def close(self) -> None:
        """Free the idle sensor's display connection."""
        self._idle.close()
