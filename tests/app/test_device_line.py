"""The dashboard says which device training uses and why, the copied diagnostics too; the words
come from the engine's ``TrainingDevice`` (here the fake's: one NVIDIA GPU)."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from pytestqt.qtbot import QtBot

from app import wording
from app.pages.dashboard import DashboardPage
from app.window import MainWindow
from core.api.schema import TrainingDevice
from core.api.testing import FakeEngine, sample_data
from core.engine.device import DeviceChoice
from core.worker.accelerator import TorchBuild, detect_accelerator
from core.worker.nvml import NvmlReport
from tests.app.test_events_page import copy_and_read, events_page

NO_DRIVER = NvmlReport(problem="no NVIDIA driver found (NVML: NVML Shared Library Not Found)")


def dashboard(window: MainWindow) -> DashboardPage:
    page = window.page["dashboard"]
    assert isinstance(page, DashboardPage)
    return page


def test_the_dashboard_names_the_device_and_why(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    page = dashboard(make_window(fake))
    qtbot.waitUntil(page.device.isVisible)
    # the demo project of the fake was attached with device "cuda"
    assert page.device.text() == (
        "Trains on NVIDIA GeForce RTX 3060 (12 GB): this project is set to train on cuda"
    )
    assert page.device.toolTip().splitlines() == [
        "Device setting: cuda",
        "NVIDIA driver 580.95.05 (CUDA 13.0)",
        "torch 2.13.0+cu130",
    ]
    page.show_state(None)  # no engine: nothing to say about its device
    assert page.device.isHidden()


def test_without_a_project_it_says_what_auto_would_use(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    page = dashboard(make_window(fresh))  # behind the first-run page, but up to date
    qtbot.waitUntil(lambda: not page.device.isHidden())
    assert page.device.text() == f"Trains on {sample_data.GPU}: {sample_data.GPU_REASON}"


def test_the_words_for_a_computer_without_a_gpu() -> None:
    device = TrainingDevice(
        "cpu",
        "CPU (8 threads)",
        "no NVIDIA driver found (NVML: NVML Shared Library Not Found)",
        torch="2.13.0+cpu",
    )
    assert wording.device_line(device) == (
        "Trains on CPU (8 threads): no NVIDIA driver found (NVML: NVML Shared Library Not Found)"
    )
    assert wording.device_detail(device) == "Device setting: auto\ntorch 2.13.0+cpu"
    bare = TrainingDevice("mps", "Apple silicon GPU", "Apple silicon")
    assert wording.device_detail(bare).endswith("torch is not installed")


@pytest.mark.parametrize(
    ("system", "build", "line"),
    [
        (
            "Linux",
            TorchBuild("2.13.0+rocm6.4", None, hip="6.4.43482-0f2d60242"),
            (
                "Trains on AMD GPU (ROCm): torch 2.13.0+rocm6.4 is a ROCm build: it trains on an "
                "AMD GPU if it finds one, else on the CPU; Barnraise has not been tested on ROCm"
            ),
        ),
        (
            "Linux",
            TorchBuild("2.13.0+cpu", None),
            (
                "Trains on CPU (8 threads): no NVIDIA driver found (NVML: NVML Shared Library Not "
                "Found); to train on a GPU, Barnraise needs an NVIDIA GPU and its driver (an AMD "
                "GPU only through a ROCm build of torch on Linux, which Barnraise has not been "
                "tested on)"
            ),
        ),
        (
            "Darwin",
            None,
            "Trains on CPU (8 threads): an Intel Mac: torch has no GPU support for it",
        ),
    ],
)
def test_a_gpu_left_unused_is_explained_on_the_dashboard(
    monkeypatch: pytest.MonkeyPatch, system: str, build: TorchBuild | None, line: str
) -> None:
    # the engine's own detection and view, as the dashboard gets them in the state
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    choice = DeviceChoice()
    choice.found = detect_accelerator(
        system=system, machine="x86_64", nvml=lambda: NO_DRIVER, torch=lambda: build
    )
    device = choice.view(None)
    assert device is not None
    assert wording.device_line(device) == line


def test_the_copied_diagnostics_name_the_device_and_the_gpus(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    page = events_page(make_window(fake))
    report = copy_and_read(page, qtbot)
    assert "trains on cuda: NVIDIA GeForce RTX 3060 (12 GB) (this project is set to" in report
    assert "device: GPU 0: NVIDIA GeForce RTX 3060 (12 GB), compute capability 8.6" in report
    assert "device: NVIDIA driver 580.95.05, CUDA 13.0" in report
