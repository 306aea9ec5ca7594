"""packaging/torch_build.py: the torch build per system, architecture, GPU and driver, the
override, NVML read through ctypes (a fake library here), and dev.py's set-up installing the
choice (its pip commands recorded, nothing installed)."""

from __future__ import annotations

import ctypes
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging"


def load(name: str) -> ModuleType:
    """A script of packaging/ (not importable by name: PyPI's ``packaging`` has that name)."""
    spec = importlib.util.spec_from_file_location(name, PACKAGING / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


tb = load("torch_build")
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def linux(*gpus: Any, driver: str = "580.95.05", cuda: tuple[int, int] | None = (13, 0)) -> Any:
    if not gpus:
        return tb.Machine("Linux", "x86_64", note="no NVIDIA driver found: libnvidia-ml.so.1")
    return tb.Machine("Linux", "x86_64", tuple(gpus), driver, cuda)


RTX_4070 = tb.Gpu("NVIDIA GeForce RTX 4070", (8, 9))
RTX_5090 = tb.Gpu("NVIDIA GeForce RTX 5090", (12, 0))
GTX_1080 = tb.Gpu("NVIDIA GeForce GTX 1080", (6, 1))
V100 = tb.Gpu("Tesla V100-SXM2-16GB", (7, 0))


@pytest.mark.parametrize(
    ("machine", "requirement", "index"),
    [
        # no NVIDIA GPU: the CPU build from PyTorch's CPU index (never the default index's CUDA one)
        (linux(), "torch==2.13.0+cpu", CPU_INDEX),
        (tb.Machine("Linux", "aarch64"), "torch==2.13.0+cpu", CPU_INDEX),
        (
            tb.Machine("Windows", "amd64", note="no NVIDIA driver found"),
            "torch==2.13.0+cpu",
            CPU_INDEX,
        ),
        # macOS: the default index's one build (MPS on Apple silicon)
        (tb.Machine("Darwin", "arm64"), "torch==2.13.0", None),
        (tb.Machine("Darwin", "x86_64"), "torch==2.13.0", None),
        # NVIDIA: the newest CUDA build the driver supports
        (linux(RTX_4070), "torch==2.13.0+cu130", "https://download.pytorch.org/whl/cu130"),
        (
            linux(RTX_4070, cuda=(13, 2)),
            "torch==2.13.0+cu130",
            "https://download.pytorch.org/whl/cu130",
        ),
        (
            linux(RTX_4070, cuda=(12, 9)),
            "torch==2.13.0+cu128",
            "https://download.pytorch.org/whl/cu128",
        ),
        (
            linux(RTX_4070, cuda=(12, 6)),
            "torch==2.13.0+cu126",
            "https://download.pytorch.org/whl/cu126",
        ),
        (
            tb.Machine("Windows", "amd64", (RTX_4070,), "576.02", (12, 9)),
            "torch==2.13.0+cu128",
            "https://download.pytorch.org/whl/cu128",
        ),
        # ... that runs on the GPU: Pascal is only in 12.6, Blackwell not in 12.6
        (linux(GTX_1080), "torch==2.13.0+cu126", "https://download.pytorch.org/whl/cu126"),
        (linux(V100), "torch==2.13.0+cu128", "https://download.pytorch.org/whl/cu128"),
        (
            linux(RTX_5090, cuda=(12, 8)),
            "torch==2.13.0+cu128",
            "https://download.pytorch.org/whl/cu128",
        ),
        (
            linux(RTX_5090, cuda=(12, 6)),
            "torch==2.13.0+cu128",
            "https://download.pytorch.org/whl/cu128",
        ),
        (
            linux(tb.Gpu("NVIDIA GPU 0")),
            "torch==2.13.0+cu130",
            "https://download.pytorch.org/whl/cu130",
        ),
        # a driver older than every build of its major version: minor version compatibility
        (
            linux(RTX_4070, cuda=(12, 2)),
            "torch==2.13.0+cu126",
            "https://download.pytorch.org/whl/cu126",
        ),
        # too old a driver, or too old a GPU: the CPU
        (linux(RTX_4070, cuda=(11, 8)), "torch==2.13.0+cpu", CPU_INDEX),
        (linux(RTX_4070, cuda=None), "torch==2.13.0+cpu", CPU_INDEX),
        (linux(tb.Gpu("Tesla K80", (3, 7))), "torch==2.13.0+cpu", CPU_INDEX),
    ],
)
def test_the_build_for_each_computer(machine: Any, requirement: str, index: str | None) -> None:
    choice = tb.choose(machine)
    assert (choice.requirement, choice.index_url) == (requirement, index)
    assert choice.reason


def test_the_reasons_say_why() -> None:
    assert tb.choose(linux()).reason == (
        "no NVIDIA GPU (no NVIDIA driver found: libnvidia-ml.so.1): the CPU build"
    )
    assert tb.choose(linux(RTX_4070, cuda=(12, 9))).reason == (
        "found NVIDIA GeForce RTX 4070; driver 580.95.05 supports CUDA 12.9: the CUDA 12.8 build"
    )
    assert "minor version compatibility" in tb.choose(linux(RTX_4070, cuda=(12, 2))).reason
    old = tb.choose(linux(RTX_4070, driver="470.82", cuda=(11, 4))).reason
    assert "needs CUDA 12.6 or newer" in old
    assert "update the NVIDIA driver" in old
    assert (
        "no CUDA build of torch 2.13.0 supports" in tb.choose(linux(tb.Gpu("K80", (3, 7)))).reason
    )
    assert "Apple silicon" in tb.choose(tb.Machine("Darwin", "arm64")).reason
    assert "pip will fail" in tb.choose(tb.Machine("Darwin", "x86_64")).reason
    # two GPUs that no one build serves: the newest build for one of them, and the other is named
    mixed = tb.choose(linux(GTX_1080, RTX_5090))
    assert mixed.requirement == "torch==2.13.0+cu130"
    assert mixed.reason.endswith("the CUDA 13.0 build, which NVIDIA GeForce GTX 1080 cannot use")


def test_the_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tb, "this_machine", lambda look_for_gpus=True: linux(RTX_4070))
    assert tb.pick({}).requirement == "torch==2.13.0+cu130"
    assert tb.pick({"BARNRAISE_TORCH": "auto"}).requirement == "torch==2.13.0+cu130"
    cpu = tb.pick({"BARNRAISE_TORCH": "CPU "})
    assert (cpu.requirement, cpu.index_url, cpu.reason) == (
        "torch==2.13.0+cpu",
        CPU_INDEX,
        "BARNRAISE_TORCH=cpu",
    )
    cu126 = tb.pick({"BARNRAISE_TORCH": "cu126"})
    assert cu126.pip_arguments() == [
        "torch==2.13.0+cu126",
        "--index-url",
        "https://download.pytorch.org/whl/cu126",
    ]
    default = tb.pick({"BARNRAISE_TORCH": "default"})
    assert default.pip_arguments() == ["torch==2.13.0"]  # pip's configured index, as before
    with pytest.raises(tb.UnknownBuild, match="use one of auto, cpu, cu130, cu128, cu126, default"):
        tb.pick({"BARNRAISE_TORCH": "cu999"})
    mac = tb.Machine("Darwin", "arm64")
    assert tb.choose(mac, "cpu").index_url is None
    with pytest.raises(tb.UnknownBuild, match="no CUDA builds for macOS"):
        tb.choose(mac, "cu130")


def test_the_choice_is_a_plain_tuple_for_other_callers() -> None:
    requirement, index_url, reason = tb.choose(linux())
    assert (requirement, index_url) == ("torch==2.13.0+cpu", CPU_INDEX)
    assert isinstance(reason, str)


class FakeNvml:
    """``libnvidia-ml`` through ctypes: functions taking ctypes arguments, returning a status."""

    def __init__(self, *, init: int = 0, gpus: int = 1) -> None:
        self.init, self.gpus, self.calls = init, gpus, []
        self.nvmlDeviceGetHandleByIndex_v2 = self._function(self._handle)
        self.nvmlDeviceGetName = self._function(self._name)
        self.nvmlDeviceGetCudaComputeCapability = self._function(self._capability)
        self.nvmlErrorString = self._function(lambda status: b"Driver Not Loaded")

    class _function:
        def __init__(self, body: Any) -> None:
            self.body, self.argtypes, self.restype = body, None, None

        def __call__(self, *args: Any) -> Any:
            return self.body(*args)

    def nvmlInit_v2(self) -> int:
        self.calls.append("init")
        return self.init

    def nvmlShutdown(self) -> int:
        self.calls.append("shutdown")
        return 0

    def nvmlSystemGetDriverVersion(self, buffer: Any, size: Any) -> int:
        buffer.value = b"580.95.05"
        return 0

    def nvmlSystemGetCudaDriverVersion(self, number: Any) -> int:
        number._obj.value = 12080
        return 0

    def nvmlDeviceGetCount_v2(self, count: Any) -> int:
        count._obj.value = self.gpus
        return 0

    def _handle(self, index: int, handle: Any) -> int:
        handle._obj.value = 1000 + index
        return 0

    def _name(self, handle: Any, buffer: Any, size: int) -> int:
        buffer.value = b"NVIDIA H200"
        return 0

    def _capability(self, handle: Any, major: Any, minor: Any) -> int:
        major._obj.value, minor._obj.value = 9, 0
        return 0


def test_nvml_through_ctypes() -> None:
    library = FakeNvml(gpus=2)
    found = tb._ask_nvml(tb.Machine("Linux", "x86_64"), library)
    assert found.driver == "580.95.05"
    assert found.cuda == (12, 8)
    assert found.gpus == (tb.Gpu("NVIDIA H200", (9, 0)), tb.Gpu("NVIDIA H200", (9, 0)))
    assert library.calls == ["init", "shutdown"]
    assert tb.choose(found).requirement == "torch==2.13.0+cu128"

    failing = FakeNvml(init=9)
    found = tb._ask_nvml(tb.Machine("Linux", "x86_64"), failing)
    assert found.gpus == ()
    assert found.note == "NVML: Driver Not Loaded (error 9)"
    assert failing.calls == ["init"]


def test_no_nvml_library_here_is_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> Any:
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", missing)
    found = tb._ask_nvml(tb.Machine("Linux", "x86_64"))
    assert found.gpus == ()
    assert found.note == "no NVIDIA driver found: libnvidia-ml.so.1: cannot open shared object file"
    assert tb.choose(found).requirement == "torch==2.13.0+cpu"


def test_dev_py_installs_the_choice_first_without_dependencies(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.syspath_prepend(str(PACKAGING))  # dev.py imports its neighbours by name
    monkeypatch.setitem(sys.modules, "torch_build", tb)
    dev = load("dev")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.touch()  # an environment exists: no new one is made
    monkeypatch.setattr(dev, "VENV", tmp_path / ".venv")
    monkeypatch.setattr(dev, "STAMP", tmp_path / ".venv" / ".barnraise-setup")
    monkeypatch.setattr(dev, "_venv_bin", lambda name: python)
    monkeypatch.setattr(dev, "_compile_bytecode", lambda: None)
    ran: list[list[str]] = []
    monkeypatch.setattr(dev, "_run", lambda cmd, **kw: ran.append([str(p) for p in cmd]) or 0)
    monkeypatch.setattr(tb, "this_machine", lambda look_for_gpus=True: linux())
    monkeypatch.delenv("BARNRAISE_TORCH", raising=False)

    dev.setup()
    torch_step, project_step = ran
    assert torch_step[-4:] == ["--no-deps", "torch==2.13.0+cpu", "--index-url", CPU_INDEX]
    assert project_step[-2:] == ["-e", ".[dev,docs]"]
    ran.clear()
    dev.setup()
    assert ran == []  # the same build: nothing to do

    monkeypatch.setenv("BARNRAISE_TORCH", "cu126")
    dev.setup()  # another build: set up again
    assert ran[0][-3:] == [
        "torch==2.13.0+cu126",
        "--index-url",
        "https://download.pytorch.org/whl/cu126",
    ]
    monkeypatch.setenv("BARNRAISE_TORCH", "rocm")
    with pytest.raises(SystemExit, match=r"BARNRAISE_TORCH=rocm names no torch 2\.13\.0 build"):
        dev.setup()
