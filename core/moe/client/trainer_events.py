"""What a DMoE trainer tells its owner: ready (where), progress now and then, stopped.

``barnraise peer`` with a ``dmoe`` manifest prints each as one JSON line. The ready line is a
peer's ``ready`` line (``{"event": "ready", "address": ..., "role": "moe-trainer"}``), so the
swarm's child reader takes its address as from any peer. ``progress`` summarises the steps since
the previous one, so a reader can follow the loss without seeing every step. This module imports
no torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from core.util.errors import WireFormatError

ROLE = "moe-trainer"


@dataclass(frozen=True)
class MoETrainerReady:
    address: str
    role: str = ROLE


@dataclass(frozen=True)
class MoEProgress:
    """The steps applied since the previous report, and the totals so far."""

    steps: int
    """Optimizer steps applied so far (all reports together)."""
    samples: int
    loss: float
    """Mean training loss of the steps since the previous report."""
    samples_per_second: float
    failed: int
    """Batches skipped so far because too few experts answered or the network failed them."""
    staleness: float
    """Mean steps applied by other batches while a step of this report was in flight."""
    experts_answered: float
    """Share of expert calls that were answered, since the start (1.0: none failed)."""


@dataclass(frozen=True)
class MoEAccuracy:
    """The share of held-out digits classified right, measured after ``steps`` steps (through the
    experts, which may have learned meanwhile from other trainers)."""

    steps: int
    accuracy: float


@dataclass(frozen=True)
class MoETrainerStopped:
    steps: int


MoETrainerEvent = MoETrainerReady | MoEProgress | MoEAccuracy | MoETrainerStopped

EVENT_NAMES: dict[type[MoETrainerEvent], str] = {
    MoETrainerReady: "ready",
    MoEProgress: "progress",
    MoEAccuracy: "accuracy",
    MoETrainerStopped: "stopped",
}
_BY_NAME = {name: kind for kind, name in EVENT_NAMES.items()}


def to_json(event: MoETrainerEvent) -> dict[str, Any]:
    """``{"event": name, field: value, ...}``, ready for ``json.dumps``."""
    return {"event": EVENT_NAMES[type(event)], **dataclasses.asdict(event)}


def report_from_json(data: object) -> MoEProgress | MoEAccuracy | None:
    """The progress or accuracy report in a JSON line, None for another event;
    ``WireFormatError`` if it is broken."""
    if not isinstance(data, dict):
        return None
    kind = {"progress": MoEProgress, "accuracy": MoEAccuracy}.get(data.get("event"))  # type: ignore[arg-type]
    if kind is None:
        return None
    values: dict[str, Any] = {}
    for f in dataclasses.fields(kind):
        value = data.get(f.name)
        convert = int if f.type == "int" else float
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise WireFormatError(f"a {data['event']} line's {f.name} is {value!r}, not a number")
        values[f.name] = convert(value)
    report: MoEProgress | MoEAccuracy = kind(**values)
    return report
