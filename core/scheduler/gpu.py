"""The GPU's free memory and temperature, through torch only if the process has already loaded it.

Importing torch takes seconds and hundreds of megabytes, which the paused engine and the GUI must
not pay, so this sensor never imports it. It also leaves CUDA alone until training has started
it, because asking for free memory would create a CUDA context on an idle GPU.
"""

from __future__ import annotations

import sys
from types import ModuleType

from core.policy import GpuState
from core.scheduler.sensor import Reading

_MB = 1024 * 1024


class GpuSensor:
    def __init__(self, device: int | None = None) -> None:
        self._device = device
        self._temperature_note: str | None = None

    def read(self) -> Reading[GpuState]:
        torch = sys.modules.get("torch")
        if torch is None:
            return Reading(None, "torch is not loaded yet (no training has started)")
        try:
            if not torch.cuda.is_available():
                return Reading(None, "torch sees no CUDA GPU")
            if not torch.cuda.is_initialized():
                return Reading(None, "CUDA is not started in this process yet")
            device = torch.cuda.current_device() if self._device is None else self._device
            free, total = torch.cuda.mem_get_info(device)
        except Exception as exc:
            # driver errors come as RuntimeError or CUDA-specific types; all mean "cannot tell"
            return Reading(None, f"cannot query the GPU ({exc})")
        return Reading(GpuState(free / _MB, total / _MB, self._temperature(torch, device)))

    @property
    def temperature_note(self) -> str | None:
        """Why the temperature is unknown (pynvml missing, ...), once a read has found out."""
        return self._temperature_note

    def _temperature(self, torch: ModuleType, device: int) -> float | None:
        if self._temperature_note is not None:
            return None  # failed before; the reasons (no pynvml, no sensor) do not go away
        try:
            return float(torch.cuda.temperature(device))
        except Exception as exc:
            self._temperature_note = f"cannot read the GPU temperature ({exc})"
            return None
