"""What a diloco peer keeps in host memory, per parameter: 16 bytes with ``topk`` and overlap (the
anchor, the base, the residual and the buffer the next one is written into), 20 with momentum,
through rounds and landings, plus 8 while its outer state is packed for a downloader. What a
round's end and a landing allocate besides, counted by tracemalloc (numpy's arrays are traced),
is one tensor at a time, never a copy of the model."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from core.training.diloco.state import DilocoState
from core.training.state import TrainingState

LAYERS, WIDTH = 16, 128
"""Sixteen tensors of 16k values: one tensor is 1/16 of the model."""


@pytest.fixture
def traced() -> Iterator[None]:
    tracemalloc.start()
    yield
    tracemalloc.stop()


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*(torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(LAYERS)))


def steps(net: torch.nn.Module, diloco: DilocoState, count: int) -> None:
    for _ in range(count):
        net(torch.randn(2, WIDTH)).sum().backward()
        assert diloco.inner_step()


@pytest.mark.usefixtures("traced")
@pytest.mark.parametrize(("momentum", "kept"), [(0.0, 16), (0.9, 20)])
def test_bytes_per_parameter_through_rounds(momentum: float, kept: int) -> None:
    net = model()
    state = TrainingState(net, torch.optim.SGD(net.parameters(), lr=0.01))
    count = sum(p.numel() for p in net.parameters())
    diloco = DilocoState(state, outer_lr=1.0, outer_momentum=momentum, overlap=True, sparse=True,
                         clip_norm=None)  # fmt: skip
    transient = []
    for _ in range(3):  # the working buffers exist from the first round on
        steps(net, diloco, 2)
        tracemalloc.reset_peak()
        start = tracemalloc.get_traced_memory()[0]
        delta = diloco.end_round()
        left = diloco.feedback()
        for d, f in zip(delta, left, strict=True):  # an exchange: the mean, and what it lacks
            np.multiply(d, np.float32(0.5), out=f)
            np.multiply(d, np.float32(0.5), out=d)
        diloco.land(delta, left, [])
        current, peak = tracemalloc.get_traced_memory()
        transient.append((peak - max(start, current)) / count)
    arrays = [*diloco.anchor, *diloco.base, *(diloco.residual or []), *(diloco.spare or [])]
    if momentum:
        arrays += diloco.outer.buffers
    steady = sum(a.nbytes for a in arrays) / count
    print(f"kept {steady:.2f} B/parameter, transient {max(transient):.3f}")
    assert steady == kept
    # one tensor's copies at most beyond what is kept (a tensor is 1/16 of the model)
    assert max(transient) <= 2 * 4 / LAYERS + 0.05  # and a little bookkeeping
    packed = diloco.packed()
    assert packed.data.nbytes == 8 * count  # anchor and momentum, while a downloader is served
