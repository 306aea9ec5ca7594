"""The inner learning-rate schedule follows the collaboration: its clock is the steps per round of
the rounds that landed, which a newcomer takes with the outer parameters; a peer's own steps move
it only within the current round, at most a round's worth."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.training.diloco.optimizer import DilocoConfig
from core.training.diloco.state import SCHEDULE_KEY, DilocoState
from core.training.state import TrainingState
from tests.training.diloco.conftest import MakeDPeer, end_rounds


def peer() -> tuple[DilocoState, torch.nn.Module]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    # a linear warm-up over 100 steps: the learning rate says where the clock stands
    state = TrainingState(model, optimizer, lr_lambda=lambda step: min(1.0, step / 100))
    diloco = DilocoState(state, outer_lr=1.0, outer_momentum=0.0, overlap=False, sparse=False,
                         clip_norm=None)  # fmt: skip
    return diloco, model


def steps(diloco: DilocoState, model: torch.nn.Module, count: int) -> float:
    """``count`` inner steps; the learning rate of the last."""
    for _ in range(count):
        model(torch.ones(1, 4)).sum().backward()
        assert diloco.inner_step()
    return float(diloco.state.optimizer.param_groups[0]["lr"])


def test_a_fast_peer_does_not_run_ahead_of_the_collaboration() -> None:
    diloco, model = peer()
    assert steps(diloco, model, 10) == 0.09  # its first round: its own steps (0 to 9)
    diloco.land_alone(diloco.end_round(), per_round=10.0)
    assert diloco.schedule == 10.0
    # a round in which it takes 40 steps, where the collaboration takes 10 a round: its clock
    # stops at the round's end instead of running 4 rounds ahead
    assert steps(diloco, model, 40) == 0.20
    diloco.land_alone(diloco.end_round(), per_round=10.0)
    assert diloco.schedule == 20.0
    assert steps(diloco, model, 1) == 0.20  # the next round starts where the collaboration is


def test_a_newcomer_starts_where_the_collaboration_is() -> None:
    old, old_model = peer()
    for _ in range(5):
        steps(old, old_model, 8)
        old.land_alone(old.end_round(), per_round=8.0)
    packed = old.packed()
    assert packed.metadata[SCHEDULE_KEY] == 40.0
    new, new_model = peer()
    arrays = []
    at = 0
    for shape in packed.shapes:
        size = int(np.prod(shape)) * 4
        arrays.append(packed.data[at : at + size].view("<f4").reshape(shape).copy())
        at += size
    new.rebase(packed.version, arrays, packed.metadata[SCHEDULE_KEY])
    # not a warm-up from zero: the rate the collaboration trains at
    assert steps(new, new_model, 1) == 0.40


def test_the_clock_is_kept_in_checkpoints() -> None:
    diloco, model = peer()
    steps(diloco, model, 6)
    diloco.land_alone(diloco.end_round(), per_round=6.0)
    assert diloco.outer_state()[SCHEDULE_KEY] == 6.0
    again, _ = peer()
    again.restart(1, [np.zeros_like(a) for a in again.anchor], schedule=6.0)
    assert again.schedule_clock() == 6.0


async def test_rounds_ended_by_their_count_take_the_steps_they_are_given(
    make_dpeer: MakeDPeer,
) -> None:
    """Where rounds end every so many steps (``steps_per_round``) the schedule moves by that many
    at each landing, not by what the peer's speed makes of a round on the clock."""
    counted = await make_dpeer(steps_per_round=7.0)
    await counted.train(3, seed=0)
    await end_rounds([counted])  # alone: it lands its own pseudo-gradient
    assert counted.optimizer.epoch == 1
    assert counted.optimizer.diloco.schedule == 7.0
    with pytest.raises(ValueError, match="steps_per_round"):
        DilocoConfig(round_seconds=10.0, steps_per_round=0.0)
