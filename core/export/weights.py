"""The checkpoint to export, and its tensors checked against the manifest's model.

A checkpoint that does not fit the manifest (another project's, or one from before the model
changed) is refused with the first few names that differ and both shapes, rather than torch's
error or, worse, a folder that transformers loads with some weights left random.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from core.export.errors import ExportError
from core.training.checkpoints import Checkpoint, CheckpointStore
from core.training.errors import CheckpointError

SHOWN = 3
"""Names listed in a mismatch's message; the rest are counted."""


def newest_checkpoint(folder: Path) -> Path:
    """The checkpoint of the highest epoch in ``folder`` (a backbone's ``checkpoints``)."""
    if not folder.is_dir():
        raise ExportError(f"no checkpoint folder at {folder}")
    found = CheckpointStore(folder).latest()
    if found is None:
        raise ExportError(f"{folder} holds no checkpoint (files named checkpoint-EPOCH.pt)")
    return found


def read_checkpoint(path: Path) -> Checkpoint:
    """The checkpoint at ``path``; ``ExportError`` naming it when it cannot be read."""
    try:
        return CheckpointStore.load(path)
    except CheckpointError as exc:
        raise ExportError(str(exc)) from None


def checked_state(model: nn.Module, checkpoint: Checkpoint, path: Path) -> dict[str, Tensor]:
    """The checkpoint's model tensors, once they are exactly the names and shapes of ``model``'s."""
    expected = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    state: Mapping[str, Any] = checkpoint.model
    missing = [name for name in expected if name not in state]
    unexpected = [name for name in state if name not in expected]
    not_tensors = [
        name for name in expected if name in state and not isinstance(state[name], Tensor)
    ]
    problems = []
    if missing:
        problems.append(f"it lacks {_names(missing)}")
    if unexpected:
        problems.append(f"it has {_names(unexpected)}, which the model has not")
    if not_tensors:
        problems.append(f"{_names(not_tensors)} are not tensors")
    if not problems:
        wrong = [
            f"{name} {tuple(state[name].shape)} where the model has {shape}"
            for name, shape in expected.items()
            if tuple(state[name].shape) != shape
        ]
        if wrong:
            more = f" and {len(wrong) - SHOWN} more" if len(wrong) > SHOWN else ""
            problems.append(f"shapes differ: {'; '.join(wrong[:SHOWN])}{more}")
    if problems:
        raise ExportError(
            f"checkpoint {path} does not fit the manifest's model: {', '.join(problems)} "
            "(is it this project's checkpoint, from the same model settings?)"
        )
    return {name: state[name] for name in expected}


def _names(names: list[str]) -> str:
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more
