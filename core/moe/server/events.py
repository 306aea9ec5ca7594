"""What an expert server tells its owner: ready (where, which experts, what it restored), what it
served so far (now and then), stopped. ``barnraise experts`` prints each as a JSON line.

The ready line is a peer's ``ready`` line (``core.worker.events``: ``{"event": "ready",
"address": ..., "role": "experts", ...}``), so whatever reads peers' lines (``barnraise swarm``'s
children) reads an expert server's address the same way and skips the fields it does not know;
the engine takes it as its peer being ready. This module imports no torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

ROLE = "experts"


@dataclass(frozen=True)
class ExpertsReady:
    """The server answers calls and (unless paused) announces its experts."""

    address: str
    uids: list[str]
    restored: dict[str, int] = field(default_factory=dict)
    """Experts loaded from a checkpoint, and their update count there (a takeover)."""
    role: str = ROLE


@dataclass(frozen=True)
class ExpertsServed:
    """Running totals of what the server's experts computed (all experts together)."""

    forward_samples: int
    backward_samples: int
    forward_batches: int
    backward_batches: int
    compute_seconds: float
    updates: int
    """Optimizer steps of the hosted experts, counting those before a restore."""
    checkpoints: int
    """Checkpoints written by this server so far."""
    paused: bool


@dataclass(frozen=True)
class ExpertsStopped:
    """The server stopped; ``saved``: the experts checkpointed as it stopped."""

    saved: list[str] = field(default_factory=list)
    untrained: list[str] = field(default_factory=list)
    """Experts that never learned (no trainer chose them): they have no checkpoint, and need none,
    since a server that takes one over builds it alike from its uid."""


ExpertsEvent = ExpertsReady | ExpertsServed | ExpertsStopped

EVENT_NAMES: dict[type[ExpertsEvent], str] = {
    ExpertsReady: "ready",
    ExpertsServed: "served",
    ExpertsStopped: "stopped",
}


def to_json(event: ExpertsEvent) -> dict[str, Any]:
    """``{"event": name, field: value, ...}``, ready for ``json.dumps``."""
    return {"event": EVENT_NAMES[type(event)], **dataclasses.asdict(event)}
