"""DiLoCo's algorithm on a small task, in one process (the averaging done by hand, as the real
round does it: the mean of the members' pseudo-gradients): four workers reach the loss of one
large-batch run on the same samples, within a stated tolerance, and their outer parameters are
identical after every round."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch

from core.training.diloco.state import DilocoState
from core.training.state import TrainingState

INPUTS, CLASSES, WORKERS, MICRO = 16, 4, 4, 16
ROUNDS, INNER = 8, 20


def teacher(seed: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    w = torch.randn(INPUTS, CLASSES, generator=torch.Generator().manual_seed(1))
    x = torch.randn(count, INPUTS, generator=torch.Generator().manual_seed(100 + seed))
    return x, (x @ w).argmax(dim=1)


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(INPUTS, 32), torch.nn.ReLU(), torch.nn.Linear(32, CLASSES)
    )


def loss(net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(net(x), y)


@pytest.fixture
def one_thread() -> Iterator[None]:
    """A tiny model gains nothing from threads, and on a busy machine they wait on each other."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.usefixtures("one_thread")
def test_four_workers_reach_the_large_batch_loss_with_identical_anchors() -> None:
    held_x, held_y = teacher(0, 2048)
    data = [teacher(1 + w, ROUNDS * INNER * MICRO) for w in range(WORKERS)]
    nets = [model() for _ in range(WORKERS)]
    workers = [
        DilocoState(
            TrainingState(net, torch.optim.AdamW(net.parameters(), lr=3e-3)),
            outer_lr=0.7,
            outer_momentum=0.9,
            overlap=False,
            sparse=False,
            clip_norm=None,
        )
        for net in nets
    ]
    for r in range(ROUNDS):
        for (x, y), net, state in zip(data, nets, workers, strict=True):
            for step in range(INNER):
                at = (r * INNER + step) * MICRO
                loss(net, x[at : at + MICRO], y[at : at + MICRO]).backward()  # type: ignore[no-untyped-call]
                assert state.inner_step()
        deltas = [state.end_round() for state in workers]
        mean = [
            np.mean(np.stack(parts), axis=0, dtype=np.float32)
            for parts in zip(*deltas, strict=True)
        ]
        for state in workers:
            state.land([m.copy() for m in mean], state.feedback(), [])
        anchors = {b"".join(a.tobytes() for a in state.anchor) for state in workers}
        assert len(anchors) == 1, f"round {r}: the workers' outer parameters differ"

    # one large-batch run on exactly the same samples: a step on every worker's microbatch
    reference = model()
    optimizer = torch.optim.AdamW(reference.parameters(), lr=3e-3)
    for step in range(ROUNDS * INNER):
        at = step * MICRO
        x = torch.cat([d[0][at : at + MICRO] for d in data])
        y = torch.cat([d[1][at : at + MICRO] for d in data])
        optimizer.zero_grad()
        loss(reference, x, y).backward()  # type: ignore[no-untyped-call]
        optimizer.step()

    with torch.no_grad():
        start = float(loss(model(), held_x, held_y))
        ours = float(loss(nets[0], held_x, held_y))
        theirs = float(loss(reference, held_x, held_y))
    print(f"held-out loss: start {start:.4f}, diloco {ours:.4f}, large batch {theirs:.4f}")
    assert theirs < 0.5 * start  # the task is learnt
    assert ours <= 1.10 * theirs
