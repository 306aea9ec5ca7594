"""Members that die or stall at every stage of a round: the others finish, and say exactly what happened."""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from core.averaging import Averager, AveragingResult
from core.averaging.round.reducer import PartReducer
from core.averaging.round.tensors import Span
from core.averaging.round.transfer import Transfer
from core.codecs import NONE
from tests.averaging.conftest import QUICK, MakeAveragers
from tests.support.leaks import HANG_GUARD

SIZE = 4
SHAPE = (4096 * 12,)  # 12 chunks of 4096 values: failures can land between chunks


def inputs() -> list[np.ndarray]:
    return [np.full(SHAPE, float(i + 1), dtype=np.float32) for i in range(SIZE)]


async def kill(averager: Averager) -> None:
    await averager.close()
    await averager.dht.close()
    await averager.host.close()


def check_honest(
    result: AveragingResult, values: np.ndarray, own: float, allowed: set[float]
) -> None:
    """Every value is its own original or one of the allowed means, and ``missing`` is exactly the
    ranges that kept the original."""
    assert not result.complete
    kept = np.isclose(values, own)
    valid = kept.copy()
    for mean in allowed:
        valid |= np.isclose(values, mean)
    assert valid.all(), (
        f"neither {own} nor one of {allowed}: {np.unique(values[~valid])[:5]} {result}"
    )
    reported = np.zeros(values.size, dtype=bool)
    for start, end in result.missing:
        reported[start:end] = True
    if own not in allowed:
        np.testing.assert_array_equal(reported, kept)


async def run_round(
    averagers: list[Averager], victim: int, before_run: Callable[[], Awaitable[None]] | None = None
) -> tuple[list[AveragingResult | BaseException], list[np.ndarray]]:
    """One round in which every member but ``victim`` runs; no survivor may have needed the round's
    whole ``allreduce_timeout``: each failure has its own, shorter timeout (or none, if a closed
    connection tells at once), and a round that waited for the whole of it says so in its errors."""
    pending = await asyncio.gather(*(a.prepare("faulty", timeout=HANG_GUARD) for a in averagers))
    if before_run is not None:
        await before_run()
    tensors = inputs()
    outcomes = await asyncio.gather(
        *(
            p.run([t])
            for i, (p, t) in enumerate(zip(pending, tensors, strict=True))
            if i != victim or before_run is None
        ),
        return_exceptions=True,
    )
    for outcome in outcomes:
        if isinstance(outcome, AveragingResult):
            assert not [e for e in outcome.errors if "all-reduce did not finish" in e], outcome
    return list(outcomes), tensors


ALL = sum(range(1, SIZE + 1)) / SIZE  # 2.5


async def test_a_member_that_dies_before_sending(make_averagers: MakeAveragers) -> None:
    averagers = await make_averagers(SIZE, replace(QUICK, target_group_size=SIZE))
    victim = 3
    outcomes, tensors = await run_round(averagers, victim, lambda: kill(averagers[victim]))
    survivors = (1 + 2 + 3) / 3
    for index, outcome in enumerate(outcomes):
        assert isinstance(outcome, AveragingResult)
        check_honest(outcome, tensors[index], float(index + 1), {survivors})
        assert averagers[victim].host.peer_id in outcome.excluded or outcome.errors
        assert outcome.missing  # the victim's own part could not be averaged


@pytest.fixture
def sabotage(
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[[str, Any, Callable[..., Awaitable[Any]]], None]:
    """Replace a Transfer method for one member only (the others keep the real one).

    The replacement takes ``(self, original, ...)`` and then what the method takes: one that takes
    anything else would fail when called, and the member would fail some other way than planned."""

    def install(name: str, victim_peer: Any, replacement: Callable[..., Awaitable[Any]]) -> None:
        original = getattr(Transfer, name)
        takes = list(inspect.signature(original).parameters)[1:]
        given = list(inspect.signature(replacement).parameters)[2:]
        assert given == takes, f"Transfer.{name} takes {takes}; its replacement takes {given}"

        async def dispatch(self: Transfer, *args: Any, **kwargs: Any) -> Any:
            if self.plan.me.peer == victim_peer:
                return await replacement(self, original, *args, **kwargs)
            return await original(self, *args, **kwargs)

        monkeypatch.setattr(Transfer, name, dispatch)

    return install


async def test_a_member_that_dies_while_sending(
    make_averagers: MakeAveragers, sabotage: Any
) -> None:
    # The survivors give a slow sender seconds, not QUICK's 0.6 s: the victim's closed connections
    # tell them at once, and on a loaded machine a healthy member's first chunk can take longer than
    # 0.6 s, after which reducers average alone and the values are no longer the means checked here.
    patient_senders = replace(
        QUICK,
        target_group_size=SIZE,
        sender_timeout=5.0,
        reducer_timeout=8.0,
        allreduce_timeout=30.0,
    )
    averagers = await make_averagers(SIZE, patient_senders)
    victim = averagers[3]

    sent: list[int] = []
    dying: list[asyncio.Task[None]] = []

    async def send_a_little_then_die(
        self: Transfer, original: Any, stream: Any, part: int, spans: list[Any]
    ) -> None:
        await original(self, stream, part, spans[:1])  # one chunk, then the machine goes away
        sent.append(part)
        await asyncio.sleep(0.05)  # (enough for that chunk to leave, if the machine lets it)
        if not dying:
            # a task of its own: the round cancels this sender once its streams break, and the
            # machine must go away all the same
            dying.append(asyncio.create_task(self.host.close()))
        await asyncio.wait(dying)

    sabotage("_send_part", victim.host.peer_id, send_a_little_then_die)
    outcomes, tensors = await run_round(averagers, -1)
    await asyncio.gather(*dying)
    assert sent, "the victim died before it sent anything"
    survivors = (1 + 2 + 3) / 3
    for index in range(3):
        outcome = outcomes[index]
        assert isinstance(outcome, AveragingResult)
        check_honest(outcome, tensors[index], float(index + 1), {ALL, survivors})
        assert victim.host.peer_id in outcome.excluded or outcome.errors


async def test_a_reducer_that_dies_midway(make_averagers: MakeAveragers, sabotage: Any) -> None:
    averagers = await make_averagers(SIZE, replace(QUICK, target_group_size=SIZE))
    victim = averagers[2]

    async def serve_a_little_then_die(
        self: Transfer, original: Any, ctx: Any, request: Any, stream: Any
    ) -> Any:
        reducer = self.reducer
        spans = self.plan.spans[self.plan.index]
        self._tasks.spawn("take", self._take(stream, request.sender, spans, request.weight))
        outcome = await reducer.result(0)
        await stream.send_data(outcome.data)
        await stream.send([0, outcome.weight, request.sender in outcome.included])
        await self.host.close()
        await asyncio.sleep(30)  # hangs, as a handler of a machine that went away would

    sabotage("serve", victim.host.peer_id, serve_a_little_then_die)
    outcomes, tensors = await run_round(averagers, -1)
    for index in (0, 1, 3):
        outcome = outcomes[index]
        assert isinstance(outcome, AveragingResult)
        # the victim also stops sending its own data once its host is gone
        check_honest(outcome, tensors[index], float(index + 1), {ALL, (1 + 2 + 4) / 3})
        assert any("reducer" in error for error in outcome.errors)
        assert outcome.averaged_elements > 0


async def test_a_sender_that_is_too_slow_is_left_out(
    make_averagers: MakeAveragers, sabotage: Any
) -> None:
    averagers = await make_averagers(SIZE, replace(QUICK, target_group_size=SIZE))
    victim = averagers[1]

    dawdled: list[int] = []

    async def dawdle(
        self: Transfer, original: Any, stream: Any, part: int, spans: list[Any]
    ) -> None:
        dawdled.append(part)
        await asyncio.sleep(QUICK.sender_timeout * 3)
        await original(self, stream, part, spans)

    sabotage("_send_part", victim.host.peer_id, dawdle)
    outcomes, tensors = await run_round(averagers, -1)
    assert dawdled, "the victim never started sending"
    without_victim = (1 + 3 + 4) / 3
    for index, outcome in enumerate(outcomes):
        assert isinstance(outcome, AveragingResult)
        assert not outcome.complete
        reason = outcome.excluded[victim.host.peer_id]
        if index == 1:  # the victim learns it from the first averaged chunk that lacks its data
            assert "without our data" in reason
        else:
            assert "no data for chunk 0" in reason
            check_honest(outcome, tensors[index], float(index + 1), {ALL, without_victim})


async def test_a_sender_whose_sending_fails_says_so(
    make_averagers: MakeAveragers, sabotage: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """An error of ours while sending (not the network's) shows in the round's result and the log:
    the reducers only see a sender that sends nothing."""
    averagers = await make_averagers(SIZE, replace(QUICK, target_group_size=SIZE))
    victim = averagers[2]

    async def break_down(
        self: Transfer, original: Any, stream: Any, part: int, spans: list[Any]
    ) -> None:
        raise RuntimeError("the encoder broke")

    sabotage("_send_part", victim.host.peer_id, break_down)
    with caplog.at_level(logging.ERROR, logger="core.averaging.round.transfer"):
        outcomes, tensors = await run_round(averagers, -1)
    without_victim = (1 + 2 + 4) / 3
    for index, outcome in enumerate(outcomes):
        assert isinstance(outcome, AveragingResult)
        assert not outcome.complete
        if index == 2:
            failures = [e for e in outcome.errors if "sending failed" in e]
            assert len(failures) == SIZE - 1, outcome.errors  # one per other reducer
            assert all("RuntimeError: the encoder broke" in e for e in failures), failures
        else:
            assert "no data for chunk 0" in outcome.excluded[victim.host.peer_id]
            check_honest(outcome, tensors[index], float(index + 1), {ALL, without_victim})
    logged = [r for r in caplog.records if r.exc_info and "the encoder broke" in str(r.exc_info[1])]
    assert len(logged) == SIZE - 1, caplog.records


async def test_a_reducer_held_up_past_the_sender_timeout_still_reads_what_came_meanwhile() -> None:
    """A garbage-collection pause or a starved process holds the loop past ``sender_timeout`` while a
    sender's chunk waits in a socket: the overdue timer runs before the chunk is read, and must not
    leave that sender out (a CI run on a loaded machine saw every reducer average alone)."""
    timeout = 0.2
    reducer = PartReducer([Span(0, 0, 4, NONE)], {0, 1, 2}, 3, timeout)
    reducer.contribute(0, 0, np.ones(4, np.float32), 1.0)
    time.sleep(timeout * 2)  # noqa: ASYNC251 - blocking the loop is the stall under test
    stall_over = time.monotonic()
    for _ in range(3):  # reading a frame off a socket takes a few turns of the loop
        await asyncio.sleep(0)
    reducer.contribute(1, 0, np.full(4, 3.0, np.float32), 1.0)
    outcome = await reducer.result(0)
    assert outcome.included == frozenset({0, 1})
    # sender 2 sent nothing: it is still left out, once the loop has listened for the whole timeout
    assert list(reducer.excluded) == [2]
    assert time.monotonic() - stall_over >= timeout * 0.9


async def test_a_reducer_that_is_too_slow_is_given_up_on(
    make_averagers: MakeAveragers, sabotage: Any
) -> None:
    averagers = await make_averagers(SIZE, replace(QUICK, target_group_size=SIZE))
    victim = averagers[0]

    async def stall(self: Transfer, original: Any, ctx: Any, request: Any, stream: Any) -> Any:
        await asyncio.sleep(QUICK.reducer_timeout * 2)
        return await original(self, ctx, request, stream)

    sabotage("serve", victim.host.peer_id, stall)
    outcomes, tensors = await run_round(averagers, -1)
    for index in (1, 2, 3):
        outcome = outcomes[index]
        assert isinstance(outcome, AveragingResult)
        check_honest(outcome, tensors[index], float(index + 1), {ALL})
        assert any("timed out" in error for error in outcome.errors)


async def test_memory_stays_bounded_when_rounds_keep_failing(make_averagers: MakeAveragers) -> None:
    config = replace(QUICK, target_group_size=3, sender_timeout=0.2, reducer_timeout=0.4)
    averagers = await make_averagers(3, config)
    tracemalloc.start()
    try:
        sizes = []
        for round_index in range(8):
            pending = await asyncio.gather(
                *(a.prepare(f"fail.{round_index}", timeout=5) for a in averagers)
            )
            pending[2].cancel()  # one member never runs: every round fails
            tensors = [np.ones(40000, np.float32) for _ in range(2)]
            results = await asyncio.gather(
                *(p.run([t]) for p, t in zip(pending[:2], tensors, strict=True))
            )
            assert not any(r.complete for r in results)
            assert all(len(a.registry) == 0 for a in averagers)
            gc.collect()
            sizes.append(tracemalloc.get_traced_memory()[0])
        assert sizes[-1] - sizes[2] < 2_000_000, sizes  # no growth from round to round
    finally:
        tracemalloc.stop()
