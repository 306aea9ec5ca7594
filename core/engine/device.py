"""DeviceChoice: what the active project trains on, and why, told before torch is loaded.

The engine looks once when it opens (``core.worker.accelerator``: the NVIDIA driver through
NVML, Apple silicon, the installed torch's build; milliseconds, on the blocking pool) and answers
from that in every state: a project set to "auto" trains on what was found, one set to a device
by name on that device. The same finding tells the scheduler whether the project uses a GPU (the
GPU's stricter rules: only when the user is away). A bug report looks afresh (temperatures and
other programs' use change).
"""

from __future__ import annotations

import logging

from core.api.schema import TrainingDevice
from core.util.blocking import BlockingPool
from core.worker import accelerator
from core.worker.accelerator import Accelerator, Kind, gpu_name

log = logging.getLogger(__name__)

AUTO = "auto"


class DeviceChoice:
    def __init__(self) -> None:
        self.found: Accelerator | None = None
        """What this computer has; None until ``look`` has run."""

    async def look(self, blocking: BlockingPool) -> Accelerator:
        """Find the accelerator (again) and remember it."""
        found = await blocking.run(accelerator.detect_accelerator)
        if self.found is None or (found.kind, found.name) != (self.found.kind, self.found.name):
            log.info("this computer trains on %s (%s): %s", found.kind, found.name, found.reason)
        self.found = found
        return found

    def uses_gpu(self, setting: str | None) -> bool:
        """Whether a project with this device setting computes on a GPU (None: no project)."""
        if setting is None:
            return False
        if setting == AUTO:
            # not looked yet: assume a GPU, whose rules are the stricter ones
            return self.found is None or self.found.kind != "cpu"
        return not setting.startswith("cpu")

    def view(self, setting: str | None) -> TrainingDevice | None:
        """The API's answer for the active project's setting (None: no project, i.e. "auto")."""
        found = self.found
        if found is None:
            return None
        setting = setting or AUTO
        report, build = found.nvml, found.torch

        def device(kind: Kind, name: str, reason: str) -> TrainingDevice:
            version = build.version if build is not None else None
            return TrainingDevice(
                kind, name, reason, setting, report.driver, report.cuda_text, version
            )

        if setting == AUTO:
            return device(found.kind, found.name, found.reason)
        kind: Kind = "cpu" if setting.startswith("cpu") else "mps" if setting == "mps" else "cuda"
        why = f"this project is set to train on {setting}"
        if kind == found.kind:
            return device(kind, _named(found, setting), why)
        if kind == "cpu":
            return device("cpu", "CPU", f"{why}; {found.name} was found, which auto would use")
        # asked for a GPU this computer does not seem to have: training will say so when it starts
        return device(kind, setting, f"{why}, but {found.reason}")


def _named(found: Accelerator, setting: str) -> str:
    """The GPU that "cuda:N" names, where the driver lists it (in its own order, usually CUDA's)."""
    index = int(setting.partition(":")[2] or 0) if setting.startswith("cuda") else 0
    gpus = found.nvml.gpus
    return gpu_name(gpus[index]) if 0 < index < len(gpus) else found.name
