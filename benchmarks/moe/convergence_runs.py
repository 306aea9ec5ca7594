"""The runs of the ``convergence`` part (``convergence.py``): the models, one asynchronous run of
the local ffn, one of a DMoE model on loopback expert servers, and what a run reports.

``Scenario`` holds the workers in flight, the mean delay of one batch (spread over the ``PASSES`` =
8 passes of a batch through four layers, forward and backward) and the per-request failure rate.
``run_ffn`` is asynchronous SGD with delayed, possibly dropped batches, on this event loop;
``run_dmoe`` is ``AsyncMoETrainer`` on four ``RemoteMixtureOfExperts`` layers served by
``loopback_experts.LoopbackSwarm`` with ``ServerFaults``. Both return ``summarise_run``'s section:
figures and every curve. ``convergence``'s docstring says how this maps to the paper.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.moe.loopback_experts import LoopbackSwarm


@dataclass(frozen=True, slots=True)
class Scenario:
    """Workers in flight, mean delay of one batch (eight passes) and per-request failure rate."""

    name: str
    workers: int
    batch_delay: float
    failure_rate: float

    @property
    def pass_delay(self) -> float:
        """Mean delay of one forward or backward pass through one layer (one expert request)."""
        return self.batch_delay / PASSES


LAYERS = 4
PASSES = 2 * LAYERS
"""Forward and backward through each of the four layers: what one batch's delay is spread over."""
SCENARIOS = {
    "low": Scenario("low", workers=16, batch_delay=0.1, failure_rate=0.0),
    "high": Scenario("high", workers=64, batch_delay=1.0, failure_rate=0.0),
    "failures": Scenario("failures", workers=16, batch_delay=0.1, failure_rate=0.1),
}
EVAL_RETRIES = 5


SYNCHRONOUS = Scenario("synchronous", workers=1, batch_delay=0.0, failure_rate=0.0)
"""The reference: the ffn trained one batch at a time, with no delay and no staleness."""


# ---- models ----------------------------------------------------------------------------------------


def quarter_block(hidden: int) -> Any:
    """The DMoE expert: ``LayerNorm(x + W2·gelu(W1·x))`` with ``W1`` of ``hidden -> hidden``."""
    from torch import Tensor, nn

    class QuarterFeedForward(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Linear(hidden, hidden)
            self.outer = nn.Linear(hidden, hidden)
            self.norm = nn.LayerNorm(hidden, eps=1e-12)

        def forward(self, x: Tensor) -> Tensor:
            h = nn.functional.gelu(self.inner(x), approximate="tanh")
            out: Tensor = self.norm(x + self.outer(h))
            return out

    return QuarterFeedForward()


def expert_backend(uid: str, hidden: int, lr: float) -> Any:
    """A hosted quarter-size expert, initialised from its uid (as ``ExpertSpec`` does), with Adam."""
    import torch

    from core.moe.grid import uid_seed
    from core.moe.server.backend import ExpertBackend

    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(uid_seed(uid))
        module = quarter_block(hidden)
    finally:
        torch.random.set_rng_state(state)
    return ExpertBackend(
        uid,
        module,
        torch.optim.Adam(module.parameters(), lr=lr),
        input_shapes=[[hidden]],
        output_shapes=[[hidden]],
        max_batch=1024,
    )


def stacked_model(blocks: Sequence[Any], hidden: int) -> Any:
    """``Linear(64, H)`` + ReLU, the blocks in turn, ``Linear(H, 10)``."""
    from torch import Tensor, nn

    from core.moe.client.digits import CLASSES, PIXELS

    class Stacked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = nn.Linear(PIXELS, hidden)
            self.blocks = nn.ModuleList(blocks)
            self.head = nn.Linear(hidden, CLASSES)

        def forward(self, pixels: Tensor) -> Tensor:
            x = nn.functional.relu(self.encoder(pixels))
            for block in self.blocks:
                x = block(x)
            out: Tensor = self.head(x)
            return out

    return Stacked()


def grid_for(experts: int, layer: int) -> Any:
    """Layer ``layer``'s grid of ``experts`` slots: square (16 -> 4x4, 64 -> 8x8), else 1-d."""
    from core.moe.grid import ExpertGrid

    side = round(experts**0.5)
    shape = (side, side) if side * side == experts else (experts,)
    return ExpertGrid(f"conv{experts}l{layer}", shape)


# ---- one run ----------------------------------------------------------------------------------------


@dataclass
class Curves:
    """What one run records, step by step."""

    losses: list[float]
    staleness: list[int]
    processed: list[int]
    """Batches finished (applied or dropped) when each step was applied."""
    accuracy: list[tuple[int, int, float]]
    """(applied steps, batches processed, test accuracy) at each evaluation."""


def accuracy_of(model: Any, digits: Any) -> float:
    import torch

    with torch.no_grad():
        predicted = model(digits.test_x).argmax(dim=1)
    return float((predicted == digits.test_y).float().mean())


async def run_ffn(
    args: argparse.Namespace, scenario: Scenario, digits: Any, *, lr: float | None = None
) -> dict[str, Any]:
    """Asynchronous SGD of the local feed-forward model: ``workers`` batches in flight, delayed
    (Adam at ``lr``, by default the shared ``--convergence-lr``)."""
    import copy

    import torch
    from torch.nn import functional

    from core.moe.client.digits import digit_batches
    from core.moe.server.experts import ExpertSpec

    seed = args.convergence_seed
    hidden = args.convergence_hidden
    torch.manual_seed(seed)
    spec = ExpertSpec(kind="ffn", hidden=hidden)
    model = stacked_model([spec.module(f"ffn.{i}") for i in range(LAYERS)], hidden)
    lr = args.convergence_lr if lr is None else lr
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    batches = digit_batches(digits.train_x, digits.train_y, args.convergence_batch, seed=seed)
    rng = random.Random(seed)
    curves = Curves([], [], [], [])
    total = args.convergence_steps
    started_batches = 0
    applied = 0
    dropped = 0
    eval_every = args.convergence_eval_every

    async def worker() -> None:
        nonlocal started_batches, applied, dropped
        replica = copy.deepcopy(model)
        mine = list(replica.parameters())
        while started_batches < total:
            started_batches += 1
            inputs, targets = next(batches)
            # the delay and the failures of this batch's eight passes, drawn when it starts
            delay = sum(
                rng.expovariate(1 / scenario.pass_delay) if scenario.pass_delay > 0 else 0.0
                for _ in range(PASSES)
            )
            failed = sum(rng.random() < scenario.failure_rate for _ in range(PASSES)) > 0
            with torch.no_grad():
                for theirs, master in zip(mine, model.parameters(), strict=True):
                    theirs.copy_(master)
            start = applied
            loss = functional.cross_entropy(replica(inputs), targets)
            grads = torch.autograd.grad(loss, mine)
            await asyncio.sleep(delay)
            if failed:
                dropped += 1
                continue
            for master, grad in zip(model.parameters(), grads, strict=True):
                master.grad = grad
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            applied += 1
            curves.losses.append(loss.item())
            curves.staleness.append(applied - 1 - start)
            curves.processed.append(applied + dropped)
            if applied % eval_every == 0:
                curves.accuracy.append((applied, applied + dropped, accuracy_of(model, digits)))

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(scenario.workers)))
    wall = time.perf_counter() - started
    if not curves.accuracy or curves.accuracy[-1][0] != applied:
        curves.accuracy.append((applied, applied + dropped, accuracy_of(model, digits)))
    return summarise_run(
        "ffn", scenario, curves, args, wall=wall, applied=applied, dropped=dropped, extra={"lr": lr}
    )


async def run_dmoe(
    args: argparse.Namespace, scenario: Scenario, digits: Any, experts: int
) -> dict[str, Any]:
    """``AsyncMoETrainer`` on four remote mixtures served on loopback with injected faults."""
    import copy
    import itertools

    import torch
    from torch.nn import functional

    from core.moe.client.beam_search import MoEBeamSearch
    from core.moe.client.calls import MoEError
    from core.moe.client.digits import digit_batches
    from core.moe.client.layer import RemoteMixtureOfExperts
    from core.moe.client.trainer import AsyncMoETrainer, StepReport

    seed = args.convergence_seed
    hidden = args.convergence_hidden
    lr = args.convergence_lr
    grids = [grid_for(experts, layer) for layer in range(LAYERS)]
    swarm = await LoopbackSwarm.start(
        [(grid, lambda uid: expert_backend(uid, hidden, lr)) for grid in grids],
        servers=args.convergence_servers,
        workers=scenario.workers + 1,  # one more for the test evaluations
        mean_latency=scenario.pass_delay,
        failure_rate=scenario.failure_rate,
        seed=seed,
    )
    try:
        torch.manual_seed(seed)
        layers = [
            RemoteMixtureOfExperts(
                hidden=hidden,
                grid=grid,
                host=swarm.client,
                bridge=swarm.bridge,
                search=MoEBeamSearch(swarm.dht, grid, cache_ttl=600.0),
                k=min(args.convergence_k, grid.size),
                forward_timeout=30.0,
                backward_timeout=30.0,
            )
            for grid in grids
        ]
        model = stacked_model(layers, hidden)
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        curves = Curves([], [], [], [])
        trainer: AsyncMoETrainer | None = None
        loop = asyncio.get_running_loop()
        evaluations: list[asyncio.Future[None]] = []
        eval_lock = asyncio.Lock()
        # its own gates, encoder and head (loaded from snapshots); its layers' callers are shared
        eval_model = copy.deepcopy(model)

        async def evaluate(state: dict[str, Any], steps: int, processed: int) -> None:
            async with eval_lock:  # one evaluation at a time, on the bridge's spare worker
                eval_model.load_state_dict(state)
                accuracy = None
                for _ in range(EVAL_RETRIES):  # every expert of some row may have failed
                    try:
                        accuracy = await swarm.bridge.run(accuracy_of, eval_model, digits)
                        break
                    except MoEError:
                        continue
                curves.accuracy.append((steps, processed, -1.0 if accuracy is None else accuracy))

        def on_step(report: StepReport) -> None:
            assert trainer is not None
            processed = report.step + trainer.stats.failed
            curves.losses.append(report.loss)
            curves.staleness.append(report.staleness)
            curves.processed.append(processed)

        applied = [0]  # optimizer steps so far, counted by the hook below

        def after_step(*_: Any) -> None:
            # on a trainer worker, under the trainer's step lock: the parameters are consistent
            applied[0] += 1
            steps = applied[0]
            if steps % args.convergence_eval_every == 0:
                state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                failed = trainer.stats.failed if trainer is not None else 0
                loop.call_soon_threadsafe(
                    lambda: evaluations.append(
                        asyncio.ensure_future(evaluate(state, steps, steps + failed))
                    )
                )

        optimizer.register_step_post_hook(after_step)
        trainer = AsyncMoETrainer(
            model,
            functional.cross_entropy,
            optimizer,
            # exactly as many batches as the ffn gets: the run ends when they are used up
            itertools.islice(
                digit_batches(digits.train_x, digits.train_y, args.convergence_batch, seed=seed),
                args.convergence_steps,
            ),
            bridge=swarm.bridge,
            concurrency=scenario.workers,
            balancing_weight=args.convergence_balancing,
            on_step=on_step,
            max_consecutive_failures=50,
        )
        started = time.perf_counter()
        await trainer.run(args.convergence_steps)  # applied + dropped = the batches given
        wall = time.perf_counter() - started
        await asyncio.gather(*evaluations)
        steps = trainer.stats.steps
        if not curves.accuracy or curves.accuracy[-1][0] != steps:
            await evaluate(
                {k: v.detach().clone() for k, v in model.state_dict().items()},
                steps,
                steps + trainer.stats.failed,
            )
        curves.accuracy.sort()
        calls: dict[str, Any] = {"forward": 0, "backward": 0, "failed": 0, "too_few": 0}
        for layer in layers:
            snapshot = layer.stats.snapshot()
            for method in ("forward", "backward"):
                calls[method] += snapshot["calls"].get(method, 0)
                calls["failed"] += sum(snapshot["failures"][method].values())
            calls["too_few"] += snapshot["too_few"]
        extra = {
            "lr": lr,
            "experts_per_layer": experts,
            "grid": list(grids[0].shape),
            "servers": args.convergence_servers,
            "expert_calls": calls,
            "injected": swarm.fault_counts(),
            "failures_by_kind": dict(trainer.stats.failures),
            "max_in_flight": trainer.stats.max_in_flight,
            "expert_updates": sum(
                backend.updates for server in swarm.servers for backend in server.backends.values()
            ),
        }
        return summarise_run(
            f"dmoe-{experts}",
            scenario,
            curves,
            args,
            wall=wall,
            applied=trainer.stats.steps,
            dropped=trainer.stats.failed,
            extra=extra,
        )
    finally:
        await swarm.close()


def summarise_run(
    name: str,
    scenario: Scenario,
    curves: Curves,
    args: argparse.Namespace,
    *,
    wall: float,
    applied: int,
    dropped: int,
    extra: dict[str, Any],
) -> dict[str, Any]:
    smooth = moving_mean(curves.losses, args.convergence_smooth)
    stale = sorted(curves.staleness)
    tail = curves.losses[-args.convergence_smooth :]
    return {
        "model": name,
        "scenario": scenario.name,
        "steps": applied,
        "dropped": dropped,
        "wall_s": round(wall, 2),
        "load_after": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else [],
        "steps_per_s": round(applied / wall, 2) if wall > 0 else None,
        # Little's law: the workers are always busy, so a batch took workers x wall / batches on
        # average, its delay plus the waits for this machine's CPU
        "mean_batch_s": round(scenario.workers * wall / (applied + dropped), 3)
        if applied + dropped
        else None,
        "final_loss": round(statistics.mean(tail), 4) if tail else None,
        "final_accuracy": curves.accuracy[-1][2] if curves.accuracy else None,
        "last3_accuracy": round(statistics.mean(a for _, _, a in curves.accuracy[-3:]), 4)
        if curves.accuracy
        else None,
        "best_accuracy": max(a for _, _, a in curves.accuracy) if curves.accuracy else None,
        "staleness": {
            "mean": round(statistics.mean(stale), 2) if stale else None,
            "p50": stale[len(stale) // 2] if stale else None,
            "p90": stale[int(0.9 * (len(stale) - 1))] if stale else None,
            "max": stale[-1] if stale else None,
        },
        **extra,
        "curves": {
            "loss": [round(x, 4) for x in curves.losses],
            "loss_smoothed": [round(x, 4) for x in smooth],
            "staleness": curves.staleness,
            "batches_processed": curves.processed,
            "accuracy": [
                {"steps": s, "batches_processed": p, "accuracy": round(a, 4)}
                for s, p, a in curves.accuracy
            ],
        },
    }


def moving_mean(values: Sequence[float], window: int) -> list[float]:
    """The mean of the last ``window`` values at each position (fewer at the start)."""
    out: list[float] = []
    total = 0.0
    for index, value in enumerate(values):
        total += value
        if index >= window:
            total -= values[index - window]
        out.append(total / min(index + 1, window))
    return out
