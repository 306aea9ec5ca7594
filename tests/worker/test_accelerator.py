"""Finding the training device without torch: NVML absent, a fake NVML with a GPU, NVML failing,
Apple silicon, a ROCm build of torch, and the trainer's own choice with torch (on this GPU-less
machine, ROCm's answers from a stand-in)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from core.worker import device as device_module
from core.worker.accelerator import (
    GPU_HINT,
    Accelerator,
    TorchBuild,
    detect_accelerator,
    installed_torch,
)
from core.worker.device import training_device
from core.worker.errors import TrainingError
from core.worker.nvml import NvidiaGpu, NvmlReport, read_nvml

CUDA_TORCH = TorchBuild("2.13.0+cu130", "13.0")
CPU_TORCH = TorchBuild("2.13.0+cpu", None)
HIP = "6.4.43482-0f2d60242"
ROCM_TORCH = TorchBuild("2.13.0+rocm6.4", None, hip=HIP)

NO_DRIVER = NvmlReport(problem="no NVIDIA driver found (NVML: NVML Shared Library Not Found)")
NO_GPU = NvmlReport(
    driver="580.95.05", cuda=(13, 0), problem="the NVIDIA driver is installed but sees no GPU"
)
RTX = NvmlReport((NvidiaGpu(0, "NVIDIA GeForce RTX 4070", memory_mb=12 * 1024),), "580.95.05")
ON_ROCM = (
    "torch 2.13.0+rocm6.4 is a ROCm build: it trains on an AMD GPU if it finds one, else on the "
    "CPU; Barnraise has not been tested on ROCm"
)


class FakeNvmlError(Exception):
    def __init__(self, value: int, text: str) -> None:
        super().__init__(text)
        self.value = value


def fake_pynvml(*, fail: FakeNvmlError | None = None, gpus: int = 1) -> ModuleType:
    """A ``pynvml`` with ``gpus`` RTX 4070s, driver 580.95.05 (CUDA 13.0); ``fail``: init raises."""
    module = ModuleType("pynvml")
    calls: list[str] = []
    module.calls = calls  # type: ignore[attr-defined]
    module.NVML_TEMPERATURE_GPU = 0  # type: ignore[attr-defined]

    def init() -> None:
        calls.append("init")
        if fail is not None:
            raise fail

    def processes(handle: int) -> list[Any]:
        return [SimpleNamespace(pid=1, usedGpuMemory=300 * 2**20), SimpleNamespace(pid=4242)]

    def graphics(handle: int) -> list[Any]:
        return [SimpleNamespace(pid=1, usedGpuMemory=300 * 2**20)]  # the same process, drawing

    def not_supported(handle: int) -> None:
        raise FakeNvmlError(3, "Not Supported")

    functions: dict[str, Any] = {
        "nvmlInit": init,
        "nvmlShutdown": lambda: calls.append("shutdown"),
        "nvmlSystemGetDriverVersion": lambda: b"580.95.05",  # old pynvml versions answer bytes
        "nvmlSystemGetCudaDriverVersion": lambda: 13000,
        "nvmlDeviceGetCount": lambda: gpus,
        "nvmlDeviceGetHandleByIndex": lambda index: index,
        "nvmlDeviceGetName": lambda handle: "NVIDIA GeForce RTX 4070",
        "nvmlDeviceGetMemoryInfo": lambda handle: SimpleNamespace(total=12 * 2**30, used=2 * 2**30),
        "nvmlDeviceGetCudaComputeCapability": lambda handle: (8, 9),
        "nvmlDeviceGetTemperature": lambda handle, sensor: 61,
        "nvmlDeviceGetUtilizationRates": not_supported,  # one reading missing: None, not a failure
        "nvmlDeviceGetComputeRunningProcesses": processes,
        "nvmlDeviceGetGraphicsRunningProcesses": graphics,
    }
    for name, function in functions.items():
        setattr(module, name, function)
    return module


def test_without_pynvml_the_cpu_is_chosen_and_the_reason_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # an import of it fails, as if not installed
    found = detect_accelerator(system="Linux", machine="x86_64", torch=lambda: CPU_TORCH)
    assert found.kind == "cpu"
    assert found.name.startswith("CPU")
    assert "nvidia-ml-py" in found.reason
    assert found.nvml.pynvml_missing
    # with torch for CUDA, torch may still find a GPU when training starts: the reason says so
    with_cuda = detect_accelerator(system="Linux", machine="x86_64", torch=lambda: CUDA_TORCH)
    assert with_cuda.kind == "cpu"
    assert "will still use a GPU if it finds one" in with_cuda.reason


def test_a_fake_nvml_with_a_gpu_is_read_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    report = read_nvml(own_pid=4242)
    assert report.problem is None
    assert report.driver == "580.95.05"
    assert report.cuda == (13, 0)
    assert report.cuda_text == "13.0"
    (gpu,) = report.gpus
    assert gpu.name == "NVIDIA GeForce RTX 4070"
    assert gpu.memory_mb == 12 * 1024
    assert gpu.memory_used_mb == 2 * 1024
    assert gpu.compute_capability == (8, 9)
    assert gpu.temperature == 61.0
    assert gpu.utilization is None  # "Not Supported" on this GPU
    assert gpu.other_processes == 1  # pid 1 once (computing and drawing), never our own 4242
    assert gpu.other_memory_mb == 300
    assert fake.calls == ["init", "shutdown"]  # type: ignore[attr-defined]

    found = detect_accelerator(system="Linux", machine="x86_64", torch=lambda: CUDA_TORCH)
    assert found.kind == "cuda"
    assert found.name == "NVIDIA GeForce RTX 4070 (12 GB)"
    assert found.reason == (
        "NVIDIA driver 580.95.05 supports CUDA 13.0; torch 2.13.0+cu130 is built for CUDA 13.0"
    )
    details = "\n".join(found.details())
    assert "GPU 0: NVIDIA GeForce RTX 4070 (12 GB), compute capability 8.9" in details
    assert "61 °C" in details
    assert "other program(s) holding 300 MB" in details


@pytest.mark.parametrize(
    ("value", "text", "words", "hinted"),
    [
        (
            12,
            "NVML Shared Library Not Found",
            "no NVIDIA driver found (NVML: NVML Shared Library",
            True,
        ),
        (9, "Driver Not Loaded", "the NVIDIA driver is installed but not running", False),
        (4, "Insufficient Permissions", "not allowed to ask the NVIDIA driver", False),
        (18, "RM has detected an NVML/RM version mismatch.", "restart the computer", False),
        (999, "Unknown Error", "the NVIDIA driver did not answer (NVML: Unknown Error)", False),
    ],
)
def test_every_nvml_failure_is_a_reason_never_a_crash(
    monkeypatch: pytest.MonkeyPatch, value: int, text: str, words: str, hinted: bool
) -> None:
    fake = fake_pynvml(fail=FakeNvmlError(value, text))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    found = detect_accelerator(system="Windows", machine="AMD64", torch=lambda: CUDA_TORCH)
    assert found.kind == "cpu"
    assert words in found.reason
    # no driver at all: what would make a GPU usable; a driver in trouble: only its own fix
    assert found.reason.endswith(GPU_HINT) == hinted
    assert fake.calls == ["init"]  # type: ignore[attr-defined] # nothing to shut down


@pytest.mark.parametrize(
    ("system", "report", "build", "kind", "reason"),
    [
        # a ROCm build reaches AMD GPUs through torch.cuda: "auto" takes one if torch finds it
        ("Linux", NO_DRIVER, ROCM_TORCH, "cuda", ON_ROCM),
        ("Linux", NO_GPU, ROCM_TORCH, "cuda", ON_ROCM),
        (
            "Linux",
            RTX,
            ROCM_TORCH,
            "cuda",
            (
                f"{ON_ROCM}; it cannot use NVIDIA GeForce RTX 4070 (12 GB): run the set-up again "
                "to install torch for CUDA"
            ),
        ),
        # no NVIDIA GPU and no ROCm: the CPU, and what would make a GPU usable
        ("Linux", NO_DRIVER, CPU_TORCH, "cpu", f"{NO_DRIVER.problem}; {GPU_HINT}"),
        ("Linux", NO_GPU, CPU_TORCH, "cpu", f"{NO_GPU.problem}; {GPU_HINT}"),
        ("Windows", NO_DRIVER, CPU_TORCH, "cpu", f"{NO_DRIVER.problem}; {GPU_HINT}"),
        ("Linux", NO_DRIVER, None, "cpu", f"{NO_DRIVER.problem}; {GPU_HINT}"),
        ("Linux", NvmlReport(), CPU_TORCH, "cpu", f"the NVIDIA driver sees no GPU; {GPU_HINT}"),
    ],
)
def test_without_an_nvidia_gpu_the_reason_says_what_would_use_a_gpu(
    system: str, report: NvmlReport, build: TorchBuild | None, kind: str, reason: str
) -> None:
    found = detect_accelerator(
        system=system, machine="x86_64", nvml=lambda: report, torch=lambda: build
    )
    assert found.kind == kind
    assert found.name == "AMD GPU (ROCm)" if kind == "cuda" else found.name.startswith("CPU")
    assert found.reason == reason


def test_a_rocm_build_is_named_in_the_bug_report() -> None:
    found = detect_accelerator(system="Linux", nvml=lambda: NO_DRIVER, torch=lambda: ROCM_TORCH)
    assert found.details()[:2] == [
        f"cuda: AMD GPU (ROCm) — {ON_ROCM}",
        f"torch 2.13.0+rocm6.4, ROCm (HIP {HIP})",
    ]


VERSION_PY = {
    # annotated, as in this torch's version.py, or a plain assignment: both are read
    "rocm, annotated": (
        (
            "__version__ = '2.13.0+rocm6.4'\ndebug = False\ncuda: Optional[str] = None\n"
            f"git_version = 'cf30153'\nhip: Optional[str] = '{HIP}'\nrocm: Optional[str] = '6.4.1'\n"
        ),
        TorchBuild("2.13.0+rocm6.4", None, hip=HIP),
    ),
    "rocm, plain": (
        "__version__ = '2.5.1+rocm6.2'\ndebug = False\ncuda = None\nhip = '6.2.41133-dd7f95766'\n",
        TorchBuild("2.5.1+rocm6.2", None, hip="6.2.41133-dd7f95766"),
    ),
    "cuda": (
        "__version__ = '2.13.0+cu130'\ncuda: Optional[str] = '13.0'\nhip: Optional[str] = None\n",
        CUDA_TORCH,
    ),
    "cpu": (
        "__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\nhip: Optional[str] = None\n",
        CPU_TORCH,
    ),
}


@pytest.mark.parametrize("layout", VERSION_PY)
def test_the_build_is_read_from_version_py(
    layout: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text, build = VERSION_PY[layout]
    package = tmp_path / "torch"
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('only read, never imported')\n")
    (package / "version.py").write_text(
        "from typing import Optional\n\n__all__ = ['__version__', 'cuda', 'hip']\n" + text
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    # find_spec answers from sys.modules when torch is loaded: look as a fresh process would
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert installed_torch() == build


def test_a_driver_failing_after_a_good_start_is_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_pynvml()

    def lost() -> int:
        raise FakeNvmlError(15, "GPU is lost")

    fake.nvmlDeviceGetCount = lost  # type: ignore[attr-defined]
    report = read_nvml(fake)
    assert report.gpus == ()
    assert report.problem == "the NVIDIA driver stopped answering (NVML: GPU is lost)"
    assert fake.calls == ["init", "shutdown"]  # type: ignore[attr-defined]
    no_gpu = read_nvml(fake_pynvml(gpus=0))
    assert no_gpu.problem == "the NVIDIA driver is installed but sees no GPU"


def test_a_gpu_that_the_installed_torch_cannot_use_means_the_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(gpus=2))
    cpu_only = detect_accelerator(system="Linux", machine="x86_64", torch=lambda: CPU_TORCH)
    assert cpu_only.kind == "cpu"
    assert "and 1 more" in cpu_only.reason
    assert "CPU-only build: run the set-up again" in cpu_only.reason

    def old_driver() -> NvmlReport:
        report = read_nvml(fake_pynvml())
        return NvmlReport(report.gpus, "535.54", (12, 2))

    too_new = detect_accelerator(
        system="Linux", machine="x86_64", nvml=old_driver, torch=lambda: CUDA_TORCH
    )
    assert too_new.kind == "cpu"
    assert "supports CUDA 12.2 only and torch 2.13.0+cu130 needs CUDA 13.0" in too_new.reason
    # the same driver runs a CUDA 12.8 build (minor version compatibility): the GPU
    minor = TorchBuild("2.13.0+cu128", "12.8")
    assert detect_accelerator(system="Linux", nvml=old_driver, torch=lambda: minor).kind == "cuda"
    without_torch = detect_accelerator(system="Linux", nvml=old_driver, torch=lambda: None)
    assert without_torch.kind == "cuda"
    assert "torch is not installed yet" in without_torch.reason


def test_apple_silicon_is_mps_and_an_intel_mac_the_cpu() -> None:
    def no_nvml() -> NvmlReport:
        raise AssertionError("NVML is not asked on macOS")

    arm = detect_accelerator(system="Darwin", machine="arm64", nvml=no_nvml, torch=lambda: None)
    assert arm.kind == "mps"
    assert arm.name == "Apple silicon GPU"
    assert "Metal (MPS)" in arm.reason
    assert "not installed yet" in arm.reason
    intel = detect_accelerator(system="Darwin", machine="x86_64", nvml=no_nvml)
    assert intel.kind == "cpu"
    assert "Intel Mac" in intel.reason


def test_the_installed_torch_is_read_without_importing_it() -> None:
    code = (
        "import sys; from core.worker.accelerator import installed_torch as t; b = t(); "
        "print(b.version, b.cuda, b.known, 'torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    import torch  # this test's process may load it: the answer must agree with torch itself

    assert out == [torch.__version__, str(torch.version.cuda), "True", "False"]
    assert installed_torch() == TorchBuild(torch.__version__, torch.version.cuda)


def test_auto_trains_on_the_cpu_here_with_the_detections_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(device_module.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(device_module.torch.backends.mps, "is_available", lambda: False)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    device, why = training_device("auto")
    assert device.type == "cpu"
    assert "nvidia-ml-py" in why
    assert training_device("cpu")[0].type == "cpu"
    with pytest.raises(TrainingError, match="torch cannot use a CUDA GPU here"):
        training_device("cuda:1")
    with pytest.raises(TrainingError, match="cannot use Apple's Metal"):
        training_device("mps")
    with pytest.raises(TrainingError, match="unknown device 'gpu'"):
        training_device("gpu")


def on_rocm(monkeypatch: pytest.MonkeyPatch, *, gpu: bool, report: NvmlReport = NO_DRIVER) -> None:
    """torch as a ROCm build presents itself, with an AMD GPU or without; NVML answers ``report``."""
    version = device_module.torch.version
    monkeypatch.setattr(version, "hip", HIP)
    monkeypatch.setattr(version, "cuda", None)
    monkeypatch.setattr(device_module.torch, "__version__", "2.13.0+rocm6.4")
    cuda = device_module.torch.cuda
    monkeypatch.setattr(cuda, "is_available", lambda: gpu)
    monkeypatch.setattr(cuda, "get_device_name", lambda index=None: "AMD Radeon RX 7900 XTX")
    monkeypatch.setattr(device_module.torch.backends.mps, "is_available", lambda: False)

    def detect() -> Accelerator:
        return detect_accelerator(system="Linux", nvml=lambda: report, torch=lambda: ROCM_TORCH)

    monkeypatch.setattr(device_module, "detect_accelerator", detect)


NO_AMD = "torch 2.13.0+rocm6.4 is a ROCm build and finds no usable AMD GPU"


@pytest.mark.parametrize(
    ("gpu", "report", "requested", "kind", "reason"),
    [
        (
            True,
            NO_DRIVER,
            "auto",
            "cuda",
            (
                "torch 2.13.0+rocm6.4 can use AMD Radeon RX 7900 XTX through ROCm; Barnraise has "
                "not been tested on ROCm"
            ),
        ),
        (False, NO_DRIVER, "auto", "cpu", NO_AMD),
        (
            False,
            RTX,
            "auto",
            "cpu",
            (
                f"{NO_AMD}; it cannot use NVIDIA GeForce RTX 4070 (12 GB): run the set-up again "
                "to install torch for CUDA"
            ),
        ),
        (True, NO_DRIVER, "cuda", "cuda", "the project asks for cuda (AMD Radeon RX 7900 XTX)"),
    ],
)
def test_on_a_rocm_build_the_reasons_say_rocm(
    monkeypatch: pytest.MonkeyPatch,
    *,
    gpu: bool,
    report: NvmlReport,
    requested: str,
    kind: str,
    reason: str,
) -> None:
    on_rocm(monkeypatch, gpu=gpu, report=report)
    device, why = training_device(requested)
    assert (device.type, why) == (kind, reason)


def test_a_rocm_build_without_a_gpu_refuses_cuda_in_rocm_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    on_rocm(monkeypatch, gpu=False)
    with pytest.raises(TrainingError) as refused:
        training_device("cuda")
    assert str(refused.value) == (
        "this project trains on cuda, but torch cannot use a GPU through ROCm here (torch "
        "2.13.0+rocm6.4 is a ROCm build and finds no usable AMD GPU); set its device to auto to "
        "train on what this computer has"
    )


def test_auto_prefers_cuda_then_mps(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = device_module.torch.cuda
    monkeypatch.setattr(cuda, "is_available", lambda: True)
    monkeypatch.setattr(cuda, "get_device_name", lambda index=None: "NVIDIA GeForce RTX 4070")
    device, why = training_device("auto")
    assert device.type == "cuda"
    assert why.endswith("can use NVIDIA GeForce RTX 4070")
    monkeypatch.setattr(cuda, "is_available", lambda: False)
    monkeypatch.setattr(device_module.torch.backends.mps, "is_available", lambda: True)
    assert training_device("auto")[0].type == "mps"
