"""Replaying a diloco member's round: what a checker computes, and how near the member's work
must come to it.

A round is replayable when it starts from what every peer holds: the anchor, the inner schedule's
clock, inner moments at zero (``DilocoState(fresh_moments=True)``). With overlap it starts at the
anchor of the round before's end, and that round's landing moves it mid-way to the next anchor,
with its new clock (``Arrival``): what every peer holds too, and the step it came after (the
microbatch computing meanwhile keeps its gradient and steps after the move). Then the
member's work of the round, ``anchor - theta`` before any residual is added, is a function of its
batches alone, one inner step each. ``replay`` computes it on a checker's own replica; ``judge``
compares what the member says it computed with it.

How near honest work lands (``python -m benchmarks.robust.diloco_replay``, the demo's model, a
round of 32 inner steps on the CPU): float32 on the same machine exactly (0), 4 and 12 times the
steps exactly, float16 autocast 1.0 % of the work's norm, bfloat16 2.0 % (1.6 % over 384 steps);
every cheat 63 % or more (a sixteenth of each batch 109 %, one gradient reused 175 %, half the
steps 67 %, twice the steps claimed 63 %, the mean of the others' round 85 %, a partner's update
103 %). ``LIMITS`` sit between: over seven times the honest figures, four times under the nearest
cheat.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from core.optim.outer import F32
from core.training.diloco.state import DilocoState
from core.training.state import TrainingState

LossFn = Callable[[torch.nn.Module, Any], torch.Tensor]

LIMITS = {"float32": 0.05, "bfloat16": 0.15, "float16": 0.15}
"""The largest relative L2 distance of a member's work from its replay that passes, by the
precision it computed in. float32 allows for another device's rounding over a round of steps
(not measured yet: no GPU has run a replay)."""


@dataclass(frozen=True, slots=True)
class RoundStart:
    """Where a round began, as every peer holds it."""

    anchor: Sequence[np.ndarray]
    schedule: float
    """The inner schedule's clock at the round's start (``DilocoState.schedule``)."""
    per_round: float
    """The collaboration's inner steps per round then (``DilocoState.per_round``)."""
    arrival: Arrival | None = None
    """With overlap: where the landing of the round before moved the round to, and when."""

    @property
    def size(self) -> int:
        """The model's values."""
        return sum(a.size for a in self.anchor)


@dataclass(frozen=True, slots=True)
class Arrival:
    """The landing of the round before, mid-way through a round (overlap)."""

    after: int
    """Inner steps taken before it (all of them: it came at the round's end)."""
    anchor: Sequence[np.ndarray]
    schedule: float
    per_round: float
    straddles: bool = False
    """The next step's gradient was computed before it (``RoundOpening.straddles``)."""


@dataclass(frozen=True, slots=True)
class Judged:
    distance: float
    """``|work - replayed| / |replayed|``."""
    limit: float

    @property
    def passed(self) -> bool:
        return self.distance <= self.limit

    @property
    def margin(self) -> float:
        """The distance in units of the limit (above 1 fails)."""
        return self.distance / self.limit


def replica_of(state: TrainingState, clip_norm: float | None) -> DilocoState:
    """A checker's replica around a training state built like a member's: float32, no overlap,
    fresh moments, no outer step of its own (it only replays inner steps), the members' clip."""
    return DilocoState(
        state, outer_lr=1.0, outer_momentum=0.0, overlap=False, sparse=False,
        clip_norm=clip_norm, fresh_moments=True,
    )  # fmt: skip


def replay(
    checker: DilocoState,
    start: RoundStart,
    batches: Iterable[Any],
    loss: LossFn,
    give_way: Callable[[], object] = lambda: None,
) -> F32:
    """On the training thread of the checker's own replica (built like a member's, float32):
    the work of a round that began at ``start`` and took one inner step per batch, flat.
    ``give_way`` is called before each inner step, and may wait (``core.worker.gate``)."""
    checker.start_round_at(start.anchor, start.schedule, start.per_round)
    model = checker.state.model
    model.train()
    arrival = start.arrival
    taken = 0
    for batch in batches:
        give_way()
        here = arrival is not None and taken == arrival.after
        if here and arrival is not None and not arrival.straddles:
            checker.arrive_at(arrival.anchor, arrival.schedule, arrival.per_round)
        loss(model, batch).backward()  # type: ignore[no-untyped-call]
        if here and arrival is not None and arrival.straddles:
            checker.arrive_at(arrival.anchor, arrival.schedule, arrival.per_round)
        checker.inner_step()
        taken += 1
    if arrival is not None and taken <= arrival.after:
        checker.arrive_at(arrival.anchor, arrival.schedule, arrival.per_round)
    work = checker.end_round(decay=False)
    return np.concatenate([w.reshape(-1) for w in work]).astype(np.float32)


def judge(work: np.ndarray, replayed: np.ndarray, precision: str) -> Judged:
    """How far the member's ``work`` lies from the checker's replay; ``ValueError`` for a
    precision nobody computes in or work of another size."""
    if precision not in LIMITS:
        raise ValueError(f"precision is one of {', '.join(LIMITS)}, not {precision!r}")
    if np.shape(work) != np.shape(replayed):
        raise ValueError(f"work of {np.size(work)} values where {np.size(replayed)} belong")
    scale = float(np.linalg.norm(replayed))
    gap = float(np.linalg.norm(np.asarray(work, np.float64) - np.asarray(replayed, np.float64)))
    distance = gap / scale if scale > 0 else (0.0 if gap == 0 else float("inf"))
    return Judged(distance, LIMITS[precision])
