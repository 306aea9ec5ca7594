"""A slow device's round ends at the round's time: its round's end reads the parameters beside the
microbatch in flight instead of waiting behind it, so it reaches the round's exchange with the
others; that microbatch's step counts in the next round. Late work (a round missed) lands later,
at full weight, and the report says how many rounds late."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from typing import Any

import numpy as np

from core.worker.bridge import TrainingBridge
from tests.support.leaks import HANG_GUARD
from tests.training.diloco.conftest import MakeDPeer, end_rounds, settle


async def test_a_round_ends_beside_the_microbatch_in_flight(make_dpeer: MakeDPeer) -> None:
    peer = await make_dpeer(overlap=True)
    await peer.train(2, seed=0)
    theta = np.frombuffer(peer.parameters(), dtype=np.float32).copy()
    released = threading.Event()
    started = threading.Event()

    def microbatch() -> None:  # a slow device's forward and backward, holding its worker
        started.set()
        released.wait(HANG_GUARD)

    averager = peer.optimizer.links.averager
    real_average = averager.average
    looking = asyncio.Event()

    async def average(*args: Any, **kwargs: Any) -> Any:
        looking.set()
        return await real_average(*args, **kwargs)

    averager.average = average  # type: ignore[method-assign]
    computing = asyncio.ensure_future(peer.bridge.run(microbatch))
    assert await asyncio.to_thread(started.wait, HANG_GUARD)
    try:
        # the round ends while the worker computes: it does not wait for the microbatch, and
        # neither does its exchange, which looks for its group meanwhile
        await asyncio.wait_for(peer.optimizer.end_round(), HANG_GUARD)
        await asyncio.wait_for(looking.wait(), HANG_GUARD)
        assert not computing.done()
        # what went out is the work up to the round's end: its two steps
        base = np.concatenate([b.reshape(-1) for b in peer.optimizer.diloco.base])
        np.testing.assert_array_equal(base, theta)
    finally:
        released.set()
        await computing
    exchange = peer.optimizer._exchange
    assert exchange is not None
    await exchange  # the landing (which moves the parameters) waited for the worker
    assert peer.optimizer.epoch == 1


async def test_beside_runs_while_the_workers_are_busy() -> None:
    bridge = TrainingBridge()
    released = threading.Event()
    busy = asyncio.ensure_future(bridge.run(released.wait, HANG_GUARD))
    try:
        name = await asyncio.wait_for(
            bridge.run_beside(lambda: threading.current_thread().name), HANG_GUARD
        )
        assert name.startswith("beside")
        assert not busy.done()
    finally:
        released.set()
        await busy
        await bridge.aclose()


async def test_work_that_missed_its_round_lands_later_and_says_how_late(
    make_dpeer: MakeDPeer,
) -> None:
    peers = [await make_dpeer(matchmaking=5.0) for _ in range(3)]
    await settle(peers)
    *on_time, late = peers
    for seed, peer in enumerate(peers):
        await peer.train(2, seed=seed)
    await end_rounds(on_time)  # the late one is not there: the two land without it
    for peer in peers:  # from now on whoever looks waits little for others
        peer.optimizer.config = replace(peer.optimizer.config, matchmaking_time=1.0)
    assert [p.optimizer.epoch for p in on_time] == [1, 1]
    assert [r.late for r in on_time[0].optimizer.reports] == [0]
    await end_rounds([late])  # it came after: it takes their anchor, finds nobody, carries
    assert late.optimizer.epoch == 1
    assert not late.optimizer.reports
    for seed, peer in enumerate(peers):
        await peer.train(1, seed=10 + seed)
    for peer in peers:
        peer.optimizer.config = replace(peer.optimizer.config, matchmaking_time=10.0)
    await end_rounds(peers)
    assert [p.optimizer.epoch for p in peers] == [2, 2, 2]
    assert len({p.anchor() for p in peers}) == 1
    report = late.optimizer.reports[-1]
    # its two rounds' work, at full weight, one round late
    assert (report.samples, report.late) == (12, 1)
    assert [p.optimizer.reports[-1].late for p in on_time] == [0, 0]
