"""Which device this computer would train on, and why, found without importing torch.

NVIDIA GPUs come from the driver (``nvml``); Apple silicon from the platform (macOS on arm64,
where torch reaches the GPU through Metal, "mps"); everything else trains on the CPU. Whether the
installed torch can use the GPU is read from the text of its ``version.py`` (found, not imported):
a CPU-only build, or one built for a newer CUDA than the driver supports, means the CPU. A ROCm
build (for AMD GPUs) reaches its GPU through ``torch.cuda`` too; no driver is asked about AMD GPUs
here, so such a build is reported as training on an AMD GPU if torch finds one (kind "cuda", the
stricter GPU rules), untested. The decision is the one ``device`` makes with torch itself when a
project's device is "auto": CUDA (or ROCm) if torch can use a GPU, else MPS, else the CPU. Each
answer carries its reason in words.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from core.worker.nvml import NvidiaGpu, NvmlReport, read_nvml

Kind = Literal["cuda", "mps", "cpu"]


@dataclass(frozen=True)
class TorchBuild:
    """The installed torch, as its files say."""

    version: str
    """E.g. "2.13.0+cu130"; "unknown" when its files cannot be read."""
    cuda: str | None
    """The CUDA version it was built for; None: a CPU-only or ROCm build (or not known, see
    ``known``)."""
    known: bool = True
    """False: torch is there but its build could not be read (a frozen bundle, say)."""
    hip: str | None = None
    """The HIP version of a ROCm build, for AMD GPUs ("6.2.41133-dd7f95766"); None: not one."""

    @property
    def cuda_major(self) -> int | None:
        match = re.match(r"(\d+)", self.cuda or "")
        return int(match.group(1)) if match else None


@dataclass(frozen=True)
class Accelerator:
    kind: Kind
    name: str
    """What it is, for people: "NVIDIA GeForce RTX 4070 (12 GB)", "Apple silicon GPU", "AMD GPU
    (ROCm)", "CPU"."""
    reason: str
    """Why this one, in words."""
    nvml: NvmlReport = field(default_factory=NvmlReport)
    torch: TorchBuild | None = None
    """None: torch is not installed."""

    def details(self) -> list[str]:
        """Lines for a bug report: the choice, the driver, each GPU as NVML sees it now."""
        lines = [f"{self.kind}: {self.name} — {self.reason}"]
        torch = self.torch
        lines.append(
            "torch: not installed"
            if torch is None
            else f"torch {torch.version}, "
            + (
                f"CUDA {torch.cuda}"
                if torch.cuda
                else f"ROCm (HIP {torch.hip})"
                if torch.hip
                else "no CUDA"
                if torch.known
                else "build unknown"
            )
        )
        report = self.nvml
        if report.driver or report.cuda:
            lines.append(f"NVIDIA driver {report.driver or '?'}, CUDA {report.cuda_text or '?'}")
        if report.problem and report.problem not in self.reason:
            lines.append(f"NVML: {report.problem}")
        lines += [gpu_line(gpu) for gpu in report.gpus]
        return lines


def detect_accelerator(
    *,
    system: str | None = None,
    machine: str | None = None,
    nvml: Callable[[], NvmlReport] = read_nvml,
    torch: Callable[[], TorchBuild | None] | None = None,
) -> Accelerator:
    """The device an "auto" project trains on here, and why. Never raises, never imports torch.

    ``system`` and ``machine`` default to this platform's (``platform.system()``, ``.machine()``);
    ``nvml`` and ``torch`` read the driver and the installed torch (tests pass their own)."""
    system = platform.system() if system is None else system
    machine = (platform.machine() if machine is None else machine).lower()
    build = (torch or installed_torch)()
    if system == "Darwin":  # NVIDIA has no driver for macOS since 10.13: NVML is not asked
        return _mac(machine, build)
    report = nvml()
    if build is not None and build.hip:
        return _rocm(report, build)
    return _nvidia(report, build)


def _nvidia(report: NvmlReport, build: TorchBuild | None) -> Accelerator:
    """The NVIDIA GPU the driver lists, if the installed torch (neither ROCm nor absent) can use it."""
    if not report.gpus:
        why = report.problem or "the NVIDIA driver sees no GPU"
        if report.pynvml_missing and build is not None and build.cuda:
            why += f"; torch {build.version} will still use a GPU if it finds one"
        elif _no_nvidia(report):
            why += f"; {GPU_HINT}"
        return _cpu(why, report, build)
    gpu = report.gpus[0]
    more = f" and {len(report.gpus) - 1} more" if len(report.gpus) > 1 else ""
    name = gpu_name(gpu) + more
    driver = f"NVIDIA driver {report.driver or '(version unknown)'}"
    supports = f" supports CUDA {report.cuda_text}" if report.cuda else ""
    if build is None:
        return Accelerator(
            "cuda", name, f"{driver}{supports}; torch is not installed yet", report, build
        )
    if build.known and build.cuda is None:
        why = (
            f"found {name}, but the installed torch ({build.version}) is a CPU-only build: "
            "run the set-up again to install torch for CUDA"
        )
        return _cpu(why, report, build)
    major = build.cuda_major
    if report.cuda is not None and major is not None and report.cuda[0] < major:
        why = (
            f"found {name}, but its {driver} supports CUDA {report.cuda_text} only and torch "
            f"{build.version} needs CUDA {build.cuda}: update the driver, or run the set-up again"
        )
        return _cpu(why, report, build)
    built = f"torch {build.version} is built for CUDA {build.cuda}" if build.cuda else ""
    return Accelerator(
        "cuda", name, "; ".join(p for p in (f"{driver}{supports}", built) if p), report, build
    )


GPU_HINT = (
    "to train on a GPU, Barnraise needs an NVIDIA GPU and its driver (an AMD GPU only through a "
    "ROCm build of torch on Linux, which Barnraise has not been tested on)"
)
"""What would let a computer that trains on the CPU use a GPU (Windows and Linux)."""

_NVIDIA_ABSENT = ("no NVIDIA driver found", "the NVIDIA driver is installed but sees no GPU")
"""How ``read_nvml`` words a computer without a usable NVIDIA GPU. Its other problems (a driver
not running, a version mismatch) carry their own fix, which the hint would only bury."""


def gpu_name(gpu: NvidiaGpu) -> str:
    """ "NVIDIA GeForce RTX 4070 (12 GB)"."""
    size = f" ({gpu.memory_mb / 1024:.0f} GB)" if gpu.memory_mb else ""
    return f"{gpu.name}{size}"


def gpu_line(gpu: NvidiaGpu) -> str:
    """One GPU with what NVML tells of it now, for a bug report."""
    parts = [f"GPU {gpu.index}: {gpu_name(gpu)}"]
    if gpu.compute_capability:
        parts.append("compute capability {}.{}".format(*gpu.compute_capability))
    if gpu.memory_used_mb is not None and gpu.memory_mb:
        parts.append(f"{gpu.memory_used_mb:.0f} of {gpu.memory_mb:.0f} MB in use")
    if gpu.temperature is not None:
        parts.append(f"{gpu.temperature:.0f} °C")
    if gpu.utilization is not None:
        parts.append(f"{gpu.utilization:.0f} % busy")
    if gpu.other_processes is not None:
        held = f" holding {gpu.other_memory_mb:.0f} MB" if gpu.other_memory_mb else ""
        parts.append(f"{gpu.other_processes} other program(s){held}")
    return ", ".join(parts)


def installed_torch() -> TorchBuild | None:
    """The installed torch's version and CUDA, read from its ``version.py`` (not imported)."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    try:
        text = (Path(locations[0]) / "version.py").read_text(encoding="utf-8")
    except (IndexError, OSError, UnicodeDecodeError):
        return TorchBuild(_distribution_version() or "unknown", None, known=False)
    version = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
    cuda = _assigned("cuda", text)
    hip = _assigned("hip", text)
    return TorchBuild(
        version.group(1) if version else (_distribution_version() or "unknown"),
        (cuda.group(2) or None) if cuda else None,
        known=cuda is not None,
        hip=(hip.group(2) or None) if hip else None,
    )


def _assigned(name: str, text: str) -> re.Match[str] | None:
    """``name = None`` or ``name: Optional[str] = '...'`` in ``version.py``: group 2 the string."""
    return re.search(rf"^{name}\s*(?::[^=\n]*)?=\s*(None|['\"]([^'\"]*)['\"])", text, re.M)


def _distribution_version() -> str | None:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def _mac(machine: str, build: TorchBuild | None) -> Accelerator:
    if machine == "arm64":
        why = "Apple silicon: torch trains on its GPU through Metal (MPS)"
        if build is None:
            why += "; torch is not installed yet"
        return Accelerator("mps", "Apple silicon GPU", why, torch=build)
    return _cpu("an Intel Mac: torch has no GPU support for it", NvmlReport(), build)


def _rocm(report: NvmlReport, build: TorchBuild) -> Accelerator:
    # torch's ROCm builds expose AMD GPUs through torch.cuda, so "auto" takes one if torch finds
    # it; nothing here can tell whether there is one, and the GPU's rules are the safer guess
    why = (
        f"torch {build.version} is a ROCm build: it trains on an AMD GPU if it finds one, else on "
        "the CPU; Barnraise has not been tested on ROCm"
    )
    if report.gpus:
        more = f" and {len(report.gpus) - 1} more" if len(report.gpus) > 1 else ""
        why += (
            f"; it cannot use {gpu_name(report.gpus[0])}{more}: run the set-up again to install "
            "torch for CUDA"
        )
    return Accelerator("cuda", "AMD GPU (ROCm)", why, report, build)


def _no_nvidia(report: NvmlReport) -> bool:
    """NVML answered that there is no NVIDIA GPU to use (not that it could not be asked)."""
    return report.problem is None or report.problem.startswith(_NVIDIA_ABSENT)


def _cpu(why: str, report: NvmlReport, build: TorchBuild | None) -> Accelerator:
    threads = os.cpu_count()
    name = f"CPU ({threads} threads)" if threads else "CPU"
    return Accelerator("cpu", name, why, report, build)
