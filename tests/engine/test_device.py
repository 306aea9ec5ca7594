"""The engine tells which device the active project trains on, and why, before torch is loaded: in
its state, in ``barnraise ctl status``, in diagnostics; the scheduler counts an "auto" project on a
GPU computer (an NVIDIA GPU, or a ROCm build of torch) as a GPU project, and the peer gets "auto"
to resolve with torch."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.api.errors import BadRequest
from core.api.schema import AttachRequest, TrainingDevice
from core.engine.device import DeviceChoice
from core.worker import accelerator
from core.worker.accelerator import Accelerator, TorchBuild
from core.worker.nvml import NvidiaGpu, NvmlReport
from tests.engine.standin import StandInPeer
from tests.support.engine import CtlRun, Running, until

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo" / "project.toml"

GPUS = (
    NvidiaGpu(0, "NVIDIA GeForce RTX 4070", memory_mb=12 * 1024, temperature=58.0),
    NvidiaGpu(1, "NVIDIA GeForce GTX 1080", memory_mb=8 * 1024),
)
WITH_GPU = Accelerator(
    "cuda",
    "NVIDIA GeForce RTX 4070 (12 GB) and 1 more",
    "NVIDIA driver 580.95.05 supports CUDA 13.0; torch 2.13.0+cu130 is built for CUDA 13.0",
    NvmlReport(GPUS, "580.95.05", (13, 0)),
    TorchBuild("2.13.0+cu130", "13.0"),
)
WITHOUT_GPU = Accelerator(
    "cpu",
    "CPU (8 threads)",
    "no NVIDIA driver found (NVML: NVML Shared Library Not Found)",
    NvmlReport(problem="no NVIDIA driver found (NVML: NVML Shared Library Not Found)"),
    TorchBuild("2.13.0+cpu", None),
)


@pytest.fixture
def gpu_computer(monkeypatch: pytest.MonkeyPatch) -> Accelerator:
    """The engine, opened after this, finds an RTX 4070 whatever this machine has."""
    monkeypatch.setattr(accelerator, "detect_accelerator", lambda: WITH_GPU)
    return WITH_GPU


async def test_the_state_says_which_device_and_why(
    gpu_computer: Accelerator, engine: Running, peers: list[StandInPeer], ctl_run: CtlRun
) -> None:
    client = engine.client
    before = await client.state()
    assert before.project is None
    assert before.device is not None
    assert before.device.kind == "cuda"

    info = await client.attach(AttachRequest(str(DEMO)))
    assert info.device == "auto"  # the default: the engine chooses
    state = await client.state()
    assert state.device == TrainingDevice(
        "cuda",
        "NVIDIA GeForce RTX 4070 (12 GB) and 1 more",
        gpu_computer.reason,
        "auto",
        "580.95.05",
        "13.0",
        "2.13.0+cu130",
    )
    await client.set_settings({"max_other_cpu_percent": 100, "cpu_when_in_use": "pause"})
    await client.start()
    await until(client, lambda s: s.state == "running")
    (peer,) = peers
    assert peer.settings.device == "auto"  # resolved with torch by the peer, by the same rule

    status = await ctl_run("status")
    assert "trains on cuda: NVIDIA GeForce RTX 4070 (12 GB) and 1 more (NVIDIA driver" in status
    report = await client.diagnostics()
    assert report.accelerator[0].startswith("cuda: NVIDIA GeForce RTX 4070 (12 GB) and 1 more")
    assert "GPU 1: NVIDIA GeForce GTX 1080 (8 GB)" in report.accelerator


def test_a_device_named_by_the_project_is_shown_with_what_was_found() -> None:
    choice = DeviceChoice()
    assert choice.view("auto") is None  # not looked yet
    assert choice.uses_gpu("auto")  # then the stricter GPU rules hold
    assert not choice.uses_gpu(None)
    choice.found = WITH_GPU
    second = choice.view("cuda:1")
    assert second is not None
    assert (second.kind, second.name) == ("cuda", "NVIDIA GeForce GTX 1080 (8 GB)")
    assert second.reason == "this project is set to train on cuda:1"
    on_cpu = choice.view("cpu")
    assert on_cpu is not None
    assert on_cpu.kind == "cpu"
    assert "NVIDIA GeForce RTX 4070 (12 GB) and 1 more was found" in on_cpu.reason
    assert not choice.uses_gpu("cpu")
    assert choice.uses_gpu("auto")
    assert choice.uses_gpu("mps")

    choice.found = WITHOUT_GPU
    assert not choice.uses_gpu("auto")  # an "auto" project on a CPU computer: the CPU's rules
    auto = choice.view(None)
    assert auto is not None
    assert (auto.kind, auto.setting, auto.reason) == ("cpu", "auto", WITHOUT_GPU.reason)
    wanted = choice.view("cuda")
    assert wanted is not None
    assert wanted.kind == "cuda"
    assert wanted.reason == f"this project is set to train on cuda, but {WITHOUT_GPU.reason}"


def test_a_rocm_build_is_a_gpu_project_with_its_reason_shown() -> None:
    # no NVIDIA driver: detection cannot see the AMD GPU, so the GPU's stricter rules hold
    choice = DeviceChoice()
    choice.found = accelerator.detect_accelerator(
        system="Linux",
        nvml=lambda: WITHOUT_GPU.nvml,
        torch=lambda: TorchBuild("2.13.0+rocm6.4", None, hip="6.4.43482-0f2d60242"),
    )
    assert choice.uses_gpu("auto")
    auto = choice.view(None)
    assert auto is not None
    assert (auto.kind, auto.name, auto.torch) == ("cuda", "AMD GPU (ROCm)", "2.13.0+rocm6.4")
    assert auto.reason == (
        "torch 2.13.0+rocm6.4 is a ROCm build: it trains on an AMD GPU if it finds one, else on "
        "the CPU; Barnraise has not been tested on ROCm"
    )


@pytest.mark.parametrize("device", ["auto", "cpu", "cuda", "cuda:1", "mps"])
def test_attach_takes_the_known_devices(device: str) -> None:
    assert AttachRequest("project.toml", device=device).device == device


@pytest.mark.parametrize("device", ["", "gpu", "cuda:", "cuda:x", "CPU", "xpu"])
def test_attach_refuses_other_devices(device: str) -> None:
    with pytest.raises(BadRequest, match="unknown device"):
        AttachRequest("project.toml", device=device)
