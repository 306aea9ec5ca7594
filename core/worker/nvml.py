"""NVIDIA GPUs as their driver describes them, read through NVML without loading CUDA.

NVML is the NVIDIA driver's management library (what ``nvidia-smi`` shows). Asking it opens no
CUDA context and takes milliseconds, so the engine can tell which GPU it would train on, its
memory, temperature and how busy other programs keep it, before torch is ever imported. Python
reaches NVML through ``pynvml``, from NVIDIA's ``nvidia-ml-py`` package, imported here only when
asked and optional: without it, without a driver, or without the right to ask, ``read_nvml``
says why in words and never raises.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

T = TypeVar("T")

_MB = 1024 * 1024

# NVML's error codes (nvml.h) that deserve their own words; the others are told as NVML says them
_NO_PERMISSION = 4
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_VERSION_MISMATCH = 18


@dataclass(frozen=True)
class NvidiaGpu:
    """One GPU; a value NVML could not give (old driver, Windows, no permission) is None."""

    index: int
    name: str
    memory_mb: float | None = None
    """Total memory."""
    memory_used_mb: float | None = None
    """In use by every program, this one included."""
    compute_capability: tuple[int, int] | None = None
    temperature: float | None = None
    """Degrees Celsius."""
    utilization: float | None = None
    """Percent of the last sample period in which the GPU was busy, for any program."""
    other_processes: int | None = None
    """Processes of other programs computing or drawing on it (those NVML lets us see)."""
    other_memory_mb: float | None = None
    """Memory those processes hold, where NVML tells it."""


@dataclass(frozen=True)
class NvmlReport:
    """What the driver said, or why it could not be asked (``problem``)."""

    gpus: tuple[NvidiaGpu, ...] = ()
    driver: str | None = None
    """The driver's version, e.g. "550.54.14"."""
    cuda: tuple[int, int] | None = None
    """The newest CUDA version the driver supports (``nvmlSystemGetCudaDriverVersion``)."""
    problem: str | None = None
    """Why no GPU is listed: no ``pynvml``, no driver, no permission, ... in words."""
    pynvml_missing: bool = False
    """The ``nvidia-ml-py`` package is not installed: whether a GPU exists is not known."""

    @property
    def cuda_text(self) -> str | None:
        return f"{self.cuda[0]}.{self.cuda[1]}" if self.cuda is not None else None


def read_nvml(pynvml: ModuleType | None = None, *, own_pid: int | None = None) -> NvmlReport:
    """Every NVIDIA GPU the driver sees, with the driver's versions; never raises.

    ``pynvml`` is the module to use (tests pass a fake); by default it is imported now.
    ``own_pid``: this process, whose use of a GPU is not "other programs'" (default: ours)."""
    if pynvml is None:
        try:
            pynvml = importlib.import_module("pynvml")
        except ImportError:
            return NvmlReport(
                problem="cannot look for NVIDIA GPUs: the nvidia-ml-py package (pynvml) "
                "is not installed",
                pynvml_missing=True,
            )
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # pynvml.NVMLError and its subclasses, or OSError from ctypes
        return NvmlReport(problem=_init_problem(exc))
    try:
        return _read(pynvml, os.getpid() if own_pid is None else own_pid)
    except Exception as exc:  # the driver failed after a good start: a GPU lost, a reset
        return NvmlReport(problem=f"the NVIDIA driver stopped answering (NVML: {_text(exc)})")
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _read(pynvml: Any, own_pid: int) -> NvmlReport:
    driver = _maybe(lambda: _str(pynvml.nvmlSystemGetDriverVersion()))
    cuda = _maybe(lambda: _cuda_version(int(pynvml.nvmlSystemGetCudaDriverVersion())))
    count = int(pynvml.nvmlDeviceGetCount())
    gpus = tuple(_gpu(pynvml, index, own_pid) for index in range(count))
    problem = None if gpus else "the NVIDIA driver is installed but sees no GPU"
    return NvmlReport(gpus, driver, cuda, problem)


def _gpu(pynvml: Any, index: int, own_pid: int) -> NvidiaGpu:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    memory = _maybe(lambda: pynvml.nvmlDeviceGetMemoryInfo(handle))
    capability = _maybe(lambda: pynvml.nvmlDeviceGetCudaComputeCapability(handle))
    others = _maybe(lambda: _other_processes(pynvml, handle, own_pid))
    return NvidiaGpu(
        index=index,
        name=_maybe(lambda: _str(pynvml.nvmlDeviceGetName(handle))) or f"NVIDIA GPU {index}",
        memory_mb=memory.total / _MB if memory is not None else None,
        memory_used_mb=memory.used / _MB if memory is not None else None,
        compute_capability=(int(capability[0]), int(capability[1])) if capability else None,
        temperature=_maybe(
            lambda: float(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU))
        ),
        utilization=_maybe(lambda: float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)),
        other_processes=others[0] if others is not None else None,
        other_memory_mb=others[1] if others is not None else None,
    )


def _other_processes(pynvml: Any, handle: Any, own_pid: int) -> tuple[int, float | None]:
    """How many other processes use the GPU, and the memory they hold (None: not told)."""
    memory: dict[int, int | None] = {}
    for query in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        for process in getattr(pynvml, query)(handle):
            pid = int(process.pid)
            if pid != own_pid:
                # a process that computes and draws is listed twice: count its memory once
                memory[pid] = getattr(process, "usedGpuMemory", None)
    known = [m for m in memory.values() if m is not None]
    return len(memory), (sum(known) / _MB if known else None)


def _init_problem(exc: BaseException) -> str:
    code = getattr(exc, "value", None)
    said = f"NVML: {_text(exc)}"
    if code == _LIBRARY_NOT_FOUND or isinstance(exc, OSError):
        return f"no NVIDIA driver found ({said})"
    if code == _DRIVER_NOT_LOADED:
        return f"the NVIDIA driver is installed but not running ({said})"
    if code == _NO_PERMISSION:
        return f"not allowed to ask the NVIDIA driver ({said})"
    if code == _VERSION_MISMATCH:
        return f"the NVIDIA driver was updated: restart the computer to use it ({said})"
    return f"the NVIDIA driver did not answer ({said})"


def _cuda_version(value: int) -> tuple[int, int]:
    """NVML's integer (12040) as (12, 4)."""
    return value // 1000, (value % 1000) // 10


def _str(value: str | bytes) -> str:
    """Older ``pynvml`` versions answer bytes."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _text(exc: BaseException) -> str:
    try:
        return str(exc) or type(exc).__name__
    except Exception:  # pynvml's __str__ asks the library, which may be the thing that is broken
        return type(exc).__name__


def _maybe(read: Callable[[], T]) -> T | None:
    """One optional reading: a value the GPU or driver cannot give is None, not a failure."""
    try:
        return read()
    except Exception:
        return None
