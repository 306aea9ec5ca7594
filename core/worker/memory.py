"""How much memory this computer has for training: its RAM, and the memory of the GPU a project
would train on. Torch-free, like ``accelerator``: RAM from psutil, a GPU's memory from NVML (the
``Accelerator``'s report), and from torch only where torch is loaded already and NVML gave no
figure (a ROCm GPU, NVML missing); torch is never imported for it.

Apple silicon's GPU shares the RAM ("unified memory"): it has no figure of its own.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass

import psutil

from core.worker.accelerator import Accelerator

log = logging.getLogger(__name__)

_MB = 1024 * 1024


@dataclass(frozen=True)
class MemoryHere:
    """This computer's memory, for people and for the fit of a project's model."""

    ram_bytes: int | None
    """Total RAM; None when psutil cannot tell."""
    gpu: str | None = None
    """The GPU the project would train on, named for people; None: it trains on the CPU (or on
    Apple silicon, whose GPU shares the RAM)."""
    gpu_bytes: int | None = None
    """That GPU's total memory; None when neither NVML nor a loaded torch tells."""

    @property
    def largest(self) -> int | None:
        """The most memory any one part of this computer has (None: nothing known)."""
        known = [n for n in (self.ram_bytes, self.gpu_bytes) if n is not None]
        return max(known) if known else None

    @property
    def training(self) -> int | None:
        """The memory of what trains: the GPU's when it trains on one with a known size, else RAM."""
        return self.gpu_bytes if self.gpu is not None and self.gpu_bytes else self.ram_bytes

    def describe(self) -> str:
        """ "16.0 GB of RAM; NVIDIA GeForce RTX 4070 (12 GB): 12.0 GB"."""
        said = [f"{_gb(self.ram_bytes)} of RAM" if self.ram_bytes else "RAM of unknown size"]
        if self.gpu is not None:
            said.append(f"{self.gpu}: {_gb(self.gpu_bytes) if self.gpu_bytes else 'size unknown'}")
        return "; ".join(said)


def ram_bytes() -> int | None:
    try:
        return int(psutil.virtual_memory().total)
    except (psutil.Error, OSError) as exc:
        log.warning("cannot read this computer's memory: %s", exc)
        return None


def memory_here(found: Accelerator | None, device: str | None) -> MemoryHere:
    """The memory a project set to train on ``device`` ("auto", "cpu", "cuda:N", "mps"; None:
    "auto") has here, ``found`` being what ``detect_accelerator`` found (None: not looked yet,
    the RAM only)."""
    ram = ram_bytes()
    setting = device or "auto"
    if found is None or setting.startswith("cpu") or setting == "mps":
        return MemoryHere(ram)
    if setting == "auto" and found.kind != "cuda":
        return MemoryHere(ram)  # the CPU, or Apple silicon's GPU in the RAM
    index = int(setting.partition(":")[2] or 0) if setting.startswith("cuda") else 0
    gpus = found.nvml.gpus
    gpu = gpus[index] if 0 <= index < len(gpus) else None
    if gpu is not None and gpu.memory_mb:
        return MemoryHere(ram, found.name if index == 0 else gpu.name, int(gpu.memory_mb * _MB))
    if gpu is not None:
        name = gpu.name
    elif found.kind == "cuda" and index == 0:
        name = found.name  # a GPU NVML does not list (ROCm), which torch may still see
    else:
        name = setting
    return MemoryHere(ram, name, _torch_gpu_bytes(index))


def _torch_gpu_bytes(index: int) -> int | None:
    """The memory of GPU ``index`` as a torch already loaded sees it; None without one."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_available() or index >= torch.cuda.device_count():
            return None
        return int(torch.cuda.get_device_properties(index).total_memory)
    except (RuntimeError, AssertionError, AttributeError) as exc:  # a broken CUDA set-up
        log.warning("torch cannot tell GPU %d's memory: %s", index, exc)
        return None


def _gb(n: int | None) -> str:
    return f"{(n or 0) / 1e9:.1f} GB"
