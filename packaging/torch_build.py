"""Which torch build to install on this computer: the pip requirement, its index, and why.

    python3 packaging/torch_build.py      # print the choice for this computer

Torch comes in builds per accelerator. The default index has, for Linux, a build for one CUDA
version (gigabytes, useless without an NVIDIA GPU); PyTorch's own index has a CPU-only build and
one build per supported CUDA version. The choice:

- macOS: the default index (its wheels use Apple silicon's GPU through Metal, "mps").
- Linux and Windows with an NVIDIA GPU: the newest CUDA build that the driver supports (the driver
  says which CUDA version it supports) and that runs on every GPU (newer builds drop old GPUs);
  none fits: the CPU build, and why.
- Otherwise: the CPU build, from ``https://download.pytorch.org/whl/cpu``.
- ``BARNRAISE_TORCH`` overrides: ``auto`` (the above), ``cpu``, a CUDA build (``cu126``, ...), or
  ``default`` (plain ``torch==VERSION`` from pip's configured indexes, whatever they hold).

This runs before anything is installed (``dev.py``'s set-up, a bundle's first run), so it uses the
standard library only, and asks the NVIDIA driver through ctypes: NVML (``libnvidia-ml.so.1``,
``nvml.dll``) is the driver's own library, the one ``nvidia-smi`` calls, so going to it directly
needs no program on the PATH and no parsing of text, opens no CUDA context, and a computer without
it has no NVIDIA driver to use anyway. ``pick()`` is the one call: (requirement, index URL or
None, reason).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

TORCH_VERSION = "2.13.0"
"""pyproject.toml's pin; the build's local label (``+cpu``, ``+cu130``) is added to it."""
INDEX = "https://download.pytorch.org/whl"
OVERRIDE = "BARNRAISE_TORCH"


@dataclass(frozen=True)
class CudaBuild:
    tag: str
    """The index's folder and the local version label: ``cu130``."""
    cuda: tuple[int, int]
    """The CUDA version it bundles; the driver must support it (or, less safely, its major)."""
    oldest_gpu: tuple[int, int]
    """The oldest GPU architecture (compute capability) it has kernels for."""
    newest_gpu: tuple[int, int] | None
    """The newest it has kernels for; None: any newer."""


# The CUDA builds of torch 2.13.0 on PyTorch's index, newest first.
# Where this comes from: the default index's torch 2.13.0 wheel for Linux requires CUDA 13.0.3
# (its metadata, read on pypi.org), and PyTorch's release notes (RELEASE.md, "Release Compatibility
# Matrix" and the table of CUDA architectures per build) list 12.6 and 12.8 beside 13.0 for the
# releases before it: 12.6 from Maxwell (5.0) to Hopper (9.0), 12.8 from Volta (7.0) to Blackwell
# (12.0), 13.0 from Turing (7.5) on. Their presence for 2.13.0 on download.pytorch.org was not
# checked from here. To update (a new torch, a new CUDA): read that table in the new release's
# RELEASE.md, and check each folder, e.g. ``pip download --no-deps --index-url
# https://download.pytorch.org/whl/cu130 torch==VERSION``; then change TORCH_VERSION and this list.
CUDA_BUILDS = (
    CudaBuild("cu130", (13, 0), (7, 5), None),
    CudaBuild("cu128", (12, 8), (7, 0), None),
    CudaBuild("cu126", (12, 6), (5, 0), (9, 0)),
)


class TorchChoice(NamedTuple):
    requirement: str
    """For pip: ``torch==2.13.0+cu130``."""
    index_url: str | None
    """pip's ``--index-url``; None: pip's configured index (macOS, ``default``)."""
    reason: str

    def pip_arguments(self) -> list[str]:
        """What to give ``pip install``."""
        index = ["--index-url", self.index_url] if self.index_url else []
        return [self.requirement, *index]


class UnknownBuild(ValueError):
    """``BARNRAISE_TORCH`` names no build."""


@dataclass(frozen=True)
class Gpu:
    name: str
    compute_capability: tuple[int, int] | None = None


@dataclass(frozen=True)
class Machine:
    system: str
    """``platform.system()``: Linux, Windows, Darwin."""
    arch: str
    """``platform.machine()``, lower case: x86_64, amd64, arm64, aarch64."""
    gpus: tuple[Gpu, ...] = ()
    driver: str | None = None
    cuda: tuple[int, int] | None = None
    """The newest CUDA version the NVIDIA driver supports."""
    note: str = ""
    """Why no GPU is listed (no driver, ...), or something else worth saying."""


def pick(environ: Mapping[str, str] | None = None) -> TorchChoice:
    """The torch build for this computer, or the one ``BARNRAISE_TORCH`` names.

    Raises ``UnknownBuild`` when the variable names none."""
    environ = os.environ if environ is None else environ
    override = environ.get(OVERRIDE, "").strip().lower() or None
    machine = this_machine(look_for_gpus=override in (None, "auto"))
    return choose(machine, override)


def choose(machine: Machine, override: str | None = None) -> TorchChoice:
    """The build for ``machine`` (a pure function of it and the override)."""
    if override not in (None, "", "auto"):
        return _overridden(machine, override)
    if machine.system == "Darwin":
        return _mac(machine)
    if not machine.gpus:
        return _cpu(f"no NVIDIA GPU ({machine.note or 'none found'}): the CPU build")
    return _for_gpus(machine)


def _for_gpus(machine: Machine) -> TorchChoice:
    gpus = ", ".join(gpu.name for gpu in machine.gpus)
    if machine.cuda is None:
        return _cpu(
            f"found {gpus}, but driver {machine.driver or '?'} does not say which CUDA it "
            "supports (too old): the CPU build; update the NVIDIA driver to train on the GPU"
        )
    supported = _text(machine.cuda)
    runnable = [b for b in CUDA_BUILDS if all(_runs_on(b, gpu) for gpu in machine.gpus)]
    if not runnable:
        runnable = [b for b in CUDA_BUILDS if any(_runs_on(b, gpu) for gpu in machine.gpus)]
    if not runnable:
        return _cpu(f"found {gpus}, which no CUDA build of torch {TORCH_VERSION} supports")
    safe = [b for b in runnable if b.cuda <= machine.cuda]
    if safe:
        found = f"found {gpus}; driver {machine.driver} supports CUDA {supported}"
        return _cuda(safe[0], found, machine)
    # a driver of the same major version runs newer minor versions (CUDA's minor version
    # compatibility), with a few features missing: better than the CPU
    close = [b for b in runnable if b.cuda[0] == machine.cuda[0]]
    if close:
        return _cuda(
            close[-1],
            f"found {gpus}; driver {machine.driver} supports CUDA {supported}, older than any "
            "build: this one runs through CUDA's minor version compatibility (update the driver)",
            machine,
        )
    oldest = _text(min(b.cuda for b in runnable))
    return _cpu(
        f"found {gpus}, but driver {machine.driver} supports CUDA {supported} and torch "
        f"{TORCH_VERSION} needs CUDA {oldest} or newer: the CPU build; update the NVIDIA driver"
    )


def this_machine(*, look_for_gpus: bool = True) -> Machine:
    system, arch = platform.system(), platform.machine().lower()
    if system == "Darwin":
        translated = arch == "x86_64" and _rosetta()
        return Machine(system, "arm64 (x86_64 under Rosetta)" if translated else arch)
    if not look_for_gpus:
        return Machine(system, arch, note="not looked for")
    return _ask_nvml(Machine(system, arch))


def _overridden(machine: Machine, override: str) -> TorchChoice:
    said = f"{OVERRIDE}={override}"
    if override == "default":
        return TorchChoice(f"torch=={TORCH_VERSION}", None, f"{said}: pip's configured index")
    if override == "cpu":
        if machine.system == "Darwin":
            return TorchChoice(f"torch=={TORCH_VERSION}", None, f"{said}: macOS's one build")
        return _cpu(said)
    build = next((b for b in CUDA_BUILDS if b.tag == override), None)
    if build is None:
        names = ", ".join(["auto", "cpu", *(b.tag for b in CUDA_BUILDS), "default"])
        raise UnknownBuild(f"{said} names no torch {TORCH_VERSION} build: use one of {names}")
    if machine.system == "Darwin":
        raise UnknownBuild(f"{said}: torch has no CUDA builds for macOS")
    return _cuda(build, said)


def _mac(machine: Machine) -> TorchChoice:
    requirement = f"torch=={TORCH_VERSION}"
    if machine.arch == "arm64":
        return TorchChoice(requirement, None, "Apple silicon: the default build, which uses MPS")
    return TorchChoice(
        requirement,
        None,
        f"an Intel Mac ({machine.arch}): torch {TORCH_VERSION} publishes no build for it, so pip "
        "will fail (on Apple silicon, use a Python built for arm64)",
    )


def _cpu(reason: str) -> TorchChoice:
    return TorchChoice(f"torch=={TORCH_VERSION}+cpu", f"{INDEX}/cpu", reason)


def _cuda(build: CudaBuild, reason: str, machine: Machine | None = None) -> TorchChoice:
    reason = f"{reason}: the CUDA {_text(build.cuda)} build"
    left_out = [gpu.name for gpu in machine.gpus if not _runs_on(build, gpu)] if machine else []
    if left_out:  # no build runs on every GPU: this one runs on the others
        reason += f", which {', '.join(left_out)} cannot use"
    return TorchChoice(f"torch=={TORCH_VERSION}+{build.tag}", f"{INDEX}/{build.tag}", reason)


def _runs_on(build: CudaBuild, gpu: Gpu) -> bool:
    capability = gpu.compute_capability
    if capability is None:
        return True  # not told: let torch say at run time
    newest = build.newest_gpu
    return capability >= build.oldest_gpu and (newest is None or capability <= newest)


def _text(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def _rosetta() -> bool:
    try:
        answer = subprocess.run(
            ["sysctl", "-n", "sysctl.proc_translated"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return answer.stdout.strip() == "1"


# ---- NVML through ctypes ----------------------------------------------------------------------

_NAME_SIZE = 96  # NVML_DEVICE_NAME_V2_BUFFER_SIZE
_VERSION_SIZE = 80  # NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE


def _nvml_library() -> Any:
    if sys.platform == "win32":
        windows = os.environ.get("WINDIR", r"C:\Windows")
        programs = os.environ.get("PROGRAMFILES", r"C:\Program Files")
        places = [
            os.path.join(windows, "System32", "nvml.dll"),
            os.path.join(programs, "NVIDIA Corporation", "NVSMI", "nvml.dll"),
        ]
    else:
        places = ["libnvidia-ml.so.1"]
    failures = []
    for place in places:
        try:
            return ctypes.CDLL(place)
        except OSError as exc:
            failures.append(str(exc))
    raise OSError("; ".join(failures))


def _ask_nvml(machine: Machine, library: Any = None) -> Machine:
    """``machine`` with the GPUs, driver and CUDA version the driver reports; never raises."""
    try:
        nvml = _nvml_library() if library is None else library
    except OSError as exc:
        return Machine(machine.system, machine.arch, note=f"no NVIDIA driver found: {exc}")
    try:
        status = nvml.nvmlInit_v2()
    except (AttributeError, OSError) as exc:
        return Machine(machine.system, machine.arch, note=f"NVML cannot start: {exc}")
    if status != 0:
        return Machine(machine.system, machine.arch, note=f"NVML: {_error(nvml, status)}")
    try:
        return _read(nvml, machine)
    except (AttributeError, OSError) as exc:  # a function this driver lacks, a GPU gone
        return Machine(machine.system, machine.arch, note=f"NVML failed: {exc}")
    finally:
        with contextlib.suppress(AttributeError, OSError):
            nvml.nvmlShutdown()


def _read(nvml: Any, machine: Machine) -> Machine:
    version = ctypes.create_string_buffer(_VERSION_SIZE)
    driver = None
    if nvml.nvmlSystemGetDriverVersion(version, ctypes.c_uint(_VERSION_SIZE)) == 0:
        driver = version.value.decode(errors="replace")
    number = ctypes.c_int()
    cuda = None
    if nvml.nvmlSystemGetCudaDriverVersion(ctypes.byref(number)) == 0 and number.value > 0:
        cuda = (number.value // 1000, (number.value % 1000) // 10)
    count = ctypes.c_uint()
    status = nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
    if status != 0:
        return Machine(
            machine.system, machine.arch, (), driver, cuda, f"NVML: {_error(nvml, status)}"
        )
    gpus = tuple(_gpu(nvml, index) for index in range(count.value))
    note = "" if gpus else "the NVIDIA driver sees no GPU"
    return Machine(machine.system, machine.arch, gpus, driver, cuda, note)


def _gpu(nvml: Any, index: int) -> Gpu:
    handle = ctypes.c_void_p()
    nvml.nvmlDeviceGetHandleByIndex_v2.argtypes = [ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p)]
    if nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0:
        return Gpu(f"NVIDIA GPU {index}")
    name = ctypes.create_string_buffer(_NAME_SIZE)
    nvml.nvmlDeviceGetName.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint]
    said = nvml.nvmlDeviceGetName(handle, name, _NAME_SIZE) == 0
    major, minor = ctypes.c_int(), ctypes.c_int()
    capability = None
    query = nvml.nvmlDeviceGetCudaComputeCapability
    query.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)]
    if query(handle, ctypes.byref(major), ctypes.byref(minor)) == 0:
        capability = (major.value, minor.value)
    label = name.value.decode(errors="replace") if said else f"NVIDIA GPU {index}"
    return Gpu(label, capability)


def _error(nvml: Any, status: int) -> str:
    try:
        nvml.nvmlErrorString.restype = ctypes.c_char_p
        text = nvml.nvmlErrorString(status)
        return f"{text.decode(errors='replace')} (error {status})"
    except (AttributeError, OSError):
        return f"error {status}"


def main() -> int:
    machine = this_machine()
    print(f"{machine.system} {machine.arch}")
    if machine.driver or machine.cuda:
        cuda = _text(machine.cuda) if machine.cuda else "?"
        print(f"NVIDIA driver {machine.driver or '?'}, supports CUDA {cuda}")
    for gpu in machine.gpus:
        capability = _text(gpu.compute_capability) if gpu.compute_capability else "?"
        print(f"GPU: {gpu.name}, compute capability {capability}")
    if machine.note:
        print(machine.note)
    try:
        choice = pick()
    except UnknownBuild as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"pip install {' '.join(choice.pip_arguments())}")
    print(f"why: {choice.reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
