"""Pausing the training loop: within one layer, no partial gradients left, resume goes on."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch

from core.training.trainer import Trainer
from core.worker.bridge import TrainingBridge
from core.worker.control import TrainingControl
from core.worker.errors import Interrupted
from tests.support.leaks import HANG_GUARD, wait_until


class SlowLayer(torch.nn.Module):
    """A layer that takes a while, so that a pause lands in the middle of a microbatch."""

    def __init__(self, started: threading.Event) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.started = started

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.started.set()
        threading.Event().wait(0.05)
        return self.linear(x)


class CountingOptimizer:
    """Stands in for the collaborative optimizer: counts what the loop hands it."""

    epoch = 0

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.steps: list[int] = []

    async def step(self, batch_size: int, loss: float | None = None) -> None:
        assert all(p.grad is not None for p in self.model.parameters())
        self.model.zero_grad(set_to_none=True)
        self.steps.append(batch_size)


def batches():
    while True:
        yield torch.randn(4, 8)


def test_interrupt_stops_forward_and_backward() -> None:
    bridge = TrainingBridge()
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    handles = bridge.watch(model)
    loss = model(torch.randn(2, 4)).sum()
    bridge.interrupt()
    with pytest.raises(Interrupted):
        loss.backward()
    with pytest.raises(Interrupted):
        model(torch.randn(2, 4))
    bridge.clear_interrupt()
    model(torch.randn(2, 4)).sum().backward()
    for handle in handles:
        handle.remove()
    bridge.close()


async def test_pause_drops_the_current_microbatch_and_resume_goes_on() -> None:
    started = threading.Event()
    model = torch.nn.Sequential(SlowLayer(started), SlowLayer(started), SlowLayer(started))
    bridge = TrainingBridge()
    control = TrainingControl(bridge)
    optimizer = CountingOptimizer(model)
    trainer = Trainer(
        model,
        optimizer,  # type: ignore[arg-type]
        bridge,
        batches(),
        lambda m, batch: m(batch).pow(2).mean(),
        control=control,
    )
    stop = asyncio.Event()
    loop = asyncio.create_task(trainer.run(stop=stop))
    await wait_until(lambda: len(optimizer.steps) >= 2)
    started.clear()
    await asyncio.to_thread(started.wait)  # a microbatch is in its forward pass now
    control.pause()
    await asyncio.wait_for(control.parked(), HANG_GUARD)
    steps, samples = len(optimizer.steps), trainer.samples
    assert trainer.interrupted >= 1
    assert all(p.grad is None for p in model.parameters())  # partial gradients dropped
    # an observation window, not a wait: a worker that went on would step in it (a busy machine can
    # make this check less sharp, never make it fail)
    await asyncio.sleep(0.3)
    assert len(optimizer.steps) == steps  # nothing computed while paused
    control.resume()
    await wait_until(lambda: len(optimizer.steps) >= steps + 2)
    assert trainer.samples == samples + 4 * (len(optimizer.steps) - steps)
    control.set_duty(0.5)
    stop.set()
    control.close()
    await asyncio.wait_for(loop, HANG_GUARD)
    trainer.close()
    await bridge.aclose()


def test_duty_must_be_a_share() -> None:
    control = TrainingControl(TrainingBridge())
    with pytest.raises(ValueError, match="duty"):
        control.set_duty(0)
    control.bridge.close()
