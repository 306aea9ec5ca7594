"""A diloco round replayed by a checker: with fresh moments and no overlap, a member's work is a
function of the anchor, the schedule and its batches, so an honest round replays to the last bit
on the same machine, and work on part of each batch, or on half the steps, lands far from it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from core.optim.moments import MomentOptimizer
from core.training.diloco.checks.replay import LIMITS, Arrival, RoundStart, judge, replay
from core.training.diloco.state import DilocoState
from core.training.state import TrainingState

Batch = dict[str, torch.Tensor]


def replica(fresh: bool = True, overlap: bool = False) -> DilocoState:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    state = TrainingState(model, torch.optim.AdamW(model.parameters(), lr=0.01))
    return DilocoState(state, outer_lr=0.7, outer_momentum=0.9, overlap=overlap, sparse=False,
                       clip_norm=1.0, fresh_moments=fresh)  # fmt: skip


def batches(count: int, seed: int = 1) -> list[Batch]:
    g = torch.Generator().manual_seed(seed)
    return [
        {"x": torch.randn(32, 6, generator=g), "y": torch.randn(32, 2, generator=g)}
        for _ in range(count)
    ]


def loss(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    return torch.nn.functional.mse_loss(model(batch["x"]), batch["y"])


def member_round(member: DilocoState, data: list[Batch], take: int = 0) -> np.ndarray:
    """One round of a member: an inner step a batch (on its first ``take`` samples: 0, all)."""
    for batch in data:
        part = {k: v[:take] for k, v in batch.items()} if take else batch
        loss(member.state.model, part).backward()  # type: ignore[no-untyped-call]
        member.inner_step()
    return np.concatenate([d.reshape(-1) for d in member.end_round(decay=False)])


def start_of(member: DilocoState) -> RoundStart:
    return RoundStart([a.copy() for a in member.anchor], member.schedule, member.per_round)


def land(member: DilocoState, work: np.ndarray) -> None:
    """The member alone: its own work is the round's (``land_alone``)."""
    ends = np.cumsum([a.size for a in member.anchor])[:-1]
    member.land_alone([w.reshape(a.shape) for w, a in zip(np.split(work, ends), member.anchor,
                                                         strict=True)])  # fmt: skip


@pytest.mark.parametrize("fresh", [True, False])
def test_a_round_replays_exactly_when_its_moments_start_fresh(fresh: bool) -> None:
    """After rounds that moved the anchor and the moments, the next round replays to the bit
    with fresh moments; moments carried from the last round make it another computation (what
    ``fresh_moments`` is for)."""
    member, checker = replica(fresh), replica()
    for seed in (5, 6):
        land(member, member_round(member, batches(4, seed)))
    start = start_of(member)
    data = batches(8)
    work = member_round(member, data)
    replayed = replay(checker, start, data, loss)
    distance = judge(work, replayed, "float32").distance
    if fresh:
        np.testing.assert_array_equal(work, replayed)
        assert distance == 0.0
    else:
        assert distance > 0.01


def steps(member: DilocoState, data: list[Batch]) -> None:
    for batch in data:
        loss(member.state.model, batch).backward()  # type: ignore[no-untyped-call]
        member.inner_step()


@pytest.mark.parametrize(("after", "straddle"), [(0, False), (3, False), (8, False), (3, True)])
@pytest.mark.parametrize("fresh", [True, False])
def test_an_overlapped_round_replays_exactly_across_its_landing(
    after: int, straddle: bool, fresh: bool
) -> None:
    """With overlap and fresh moments a round starts at the anchor, and the round before lands
    after ``after`` of its 8 steps (0: before the first, 8: at its end; ``straddle``: while the
    next step's gradient was computed): a replay from the two anchors, told when the landing
    came, gives the member's work to the bit. Without fresh moments (overlap as it was) the
    round starts from the member's own parameters, which no checker holds, and the same replay
    lands far from it."""
    member, checker = replica(fresh, overlap=True), replica()
    assert member.anchored is fresh
    for seed in (5, 6):  # two rounds that moved the anchor, the schedule and the moments
        steps(member, batches(4, seed))
        land(member, np.concatenate([d.reshape(-1) for d in member.end_round(decay=False)]))
        if fresh:
            member.restart_at_anchor()
    steps(member, batches(4, 7))
    before = np.concatenate([d.reshape(-1) for d in member.end_round(decay=False)])
    if fresh:
        member.restart_at_anchor()
    start = start_of(member)
    data = batches(8)
    steps(member, data[:after])
    if straddle:
        loss(member.state.model, data[after]).backward()  # type: ignore[no-untyped-call]
    land(member, before)  # the round before lands mid-way through this one
    arrived = Arrival(
        after, [a.copy() for a in member.anchor], member.schedule, member.per_round, straddle
    )
    if straddle:
        member.inner_step()
    steps(member, data[after + straddle :])
    work = np.concatenate([d.reshape(-1) for d in member.end_round(decay=False)])
    replayed = replay(checker, RoundStart(start.anchor, start.schedule, start.per_round, arrived),
                      data, loss)  # fmt: skip
    if fresh:
        np.testing.assert_array_equal(work, replayed)
    else:
        assert judge(work, replayed, "float32").margin > 3
    if after not in (0, len(data)):  # the landing told at another step: another computation
        elsewhere = replay(
            replica(), dataclasses.replace(start, arrival=dataclasses.replace(arrived, after=0)),
            data, loss,
        )  # fmt: skip
        assert judge(work, elsewhere, "float32").distance > 1e-4


@pytest.mark.parametrize(
    ("cheat", "why"),
    [("part", "a quarter of each batch"), ("half", "half the steps, all claimed")],
)
def test_lazy_work_lands_far_from_its_replay(cheat: str, why: str) -> None:
    member, checker = replica(), replica()
    start, data = start_of(member), batches(8)
    work = member_round(member, data, take=8) if cheat == "part" else member_round(member, data[:4])
    judged = judge(work, replay(checker, start, data, loss), "float32")
    assert not judged.passed, why
    assert judged.margin > 3, judged


@pytest.mark.parametrize(
    ("work", "replayed", "precision", "passed"),
    [
        ([1.0, 0.0], [1.0, 0.0], "float32", True),
        ([1.04, 0.0], [1.0, 0.0], "float32", True),
        ([1.06, 0.0], [1.0, 0.0], "float32", False),
        ([1.1, 0.0], [1.0, 0.0], "bfloat16", True),
        ([1.1, 0.0], [1.0, 0.0], "float16", True),
        ([0.0, 0.0], [1.0, 0.0], "bfloat16", False),  # nothing sent
        ([0.0, 0.0], [0.0, 0.0], "float32", True),  # nothing to do, nothing done
        ([1.0, 0.0], [0.0, 0.0], "float32", False),
    ],
)
def test_judge(work: list[float], replayed: list[float], precision: str, passed: bool) -> None:
    assert judge(np.array(work), np.array(replayed), precision).passed is passed


def test_judge_refuses_what_it_cannot_compare() -> None:
    with pytest.raises(ValueError, match="precision"):
        judge(np.zeros(2), np.zeros(2), "int8")
    with pytest.raises(ValueError, match="values"):
        judge(np.zeros(3), np.zeros(2), "float32")
    assert set(LIMITS) == {"float32", "bfloat16", "float16"}


def test_reset_moments_of_an_8bit_optimizer_starts_it_afresh() -> None:
    from core.optim.adamw import AdamW

    torch.manual_seed(0)
    model = torch.nn.Linear(300, 40)
    optimizer = AdamW(list(model.parameters()), 0.01, states="8bit")
    assert isinstance(optimizer, MomentOptimizer)
    state = TrainingState(model, optimizer)
    loss(model, {"x": torch.randn(4, 300), "y": torch.randn(4, 40)}).backward()  # type: ignore[no-untyped-call]
    optimizer.step()
    state.reset_optimizer_state()
    fresh = AdamW(list(torch.nn.Linear(300, 40).parameters()), 0.01, states="8bit")
    fresh.ensure_state(list(fresh.param_groups[0]["params"]))
    for p, q in zip(model.parameters(), fresh.param_groups[0]["params"], strict=True):
        mine, theirs = optimizer.state[p], fresh.state[q]
        assert set(mine) == set(theirs)
        for key in mine:
            assert torch.equal(mine[key], theirs[key]), key
