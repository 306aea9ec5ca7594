"""The torch device a trainer computes on, and why.

A project's device is "auto" (the default the app attaches with) or one asked for by name ("cpu",
"cuda", "cuda:1", "mps"). "auto" is CUDA if torch can use an NVIDIA GPU (or, with a ROCm build
of torch, an AMD GPU, which torch also calls "cuda"), else MPS (Apple silicon) if it can use that,
else the CPU: the rule ``accelerator`` predicts without torch, so the device the app shows before
training starts is the one training takes. When "auto" ends on the CPU, the reason comes from that
detection ("no NVIDIA driver found", "a CPU-only torch"). A device asked for by name that torch
cannot use is a ``TrainingError`` that says why, not a crash deep in torch. Reasons name ROCm, not
CUDA, when torch is a ROCm build (``torch.version.hip`` set), on which Barnraise is untested.
"""

from __future__ import annotations

import torch

from core.worker.accelerator import detect_accelerator, gpu_name
from core.worker.errors import TrainingError

AUTO = "auto"


def training_device(requested: str) -> tuple[torch.device, str]:
    """The device to train on for a project whose device is ``requested``, and the reason."""
    if requested == AUTO:
        return _automatic()
    try:
        device = torch.device(requested)
    except (RuntimeError, ValueError) as exc:
        raise TrainingError(
            f"unknown device {requested!r}: use auto, cpu, cuda, cuda:N or mps ({exc})"
        ) from exc
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise TrainingError(
                f"this project trains on {requested}, but torch cannot use a "
                f"{'GPU through ROCm' if torch.version.hip else 'CUDA GPU'} here "
                f"({_no_cuda()}); set its device to auto to train on what this computer has"
            )
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise TrainingError(
                f"this project trains on {requested}, but torch sees {count} CUDA GPU(s) "
                f"(cuda:0 to cuda:{count - 1})"
            )
        return device, f"the project asks for {requested} ({torch.cuda.get_device_name(device)})"
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise TrainingError(
            f"this project trains on {requested}, but torch cannot use Apple's Metal (MPS) here"
        )
    if device.type not in ("cpu", "mps"):
        raise TrainingError(f"unsupported device {requested!r}: use auto, cpu, cuda, cuda:N or mps")
    return device, f"the project asks for {requested}"


def _automatic() -> tuple[torch.device, str]:
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        if torch.version.hip:
            return torch.device("cuda"), (
                f"torch {torch.__version__} can use {name} through ROCm; Barnraise has not been "
                "tested on ROCm"
            )
        return torch.device("cuda"), f"torch {torch.__version__} can use {name}"
    if torch.backends.mps.is_available():
        return torch.device("mps"), "Apple silicon: torch trains on its GPU through Metal (MPS)"
    return torch.device("cpu"), _on_the_cpu()


def _on_the_cpu() -> str:
    """Why "auto" trains on the CPU: torch can use neither CUDA (nor ROCm) nor MPS here."""
    found = detect_accelerator()
    if found.kind == "cpu":
        return found.reason
    if found.kind == "mps":
        return "torch cannot use Metal (MPS) here (it needs macOS 12.3+)"
    if torch.version.hip:
        # detection cannot see AMD GPUs: it only said that this ROCm build would look for one
        gpus = found.nvml.gpus
        if gpus:
            return (
                f"{_no_cuda()}; it cannot use {gpu_name(gpus[0])}: run the set-up again to "
                "install torch for CUDA"
            )
        return _no_cuda()
    # the driver shows a GPU that torch cannot start (CUDA_VISIBLE_DEVICES, a broken install)
    return f"found {found.name}, but torch cannot use it ({_no_cuda()})"


def _no_cuda() -> str:
    if torch.version.hip:
        return f"torch {torch.__version__} is a ROCm build and finds no usable AMD GPU"
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build"
    return f"torch {torch.__version__} for CUDA {torch.version.cuda} finds no usable GPU"
