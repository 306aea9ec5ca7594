"""A leader told what weight makes a round worth closing (a collaborative step's target batch).

Short of it, the leader waits past its patience for the members the caller expects; holding it, the
leader closes at its patience without them. Both read the weights the followers send in their join
requests."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace

import pytest

from core.averaging import Averager, AveragingResult
from tests.averaging.conftest import PATIENT, MakeAveragers, random_tensors
from tests.support.leaks import HANG_GUARD, poll_until

# a patience of 0.3 s, learned or not: far below the 1.5 s by which the last member is late
SHORT_PATIENCE = replace(
    PATIENT,
    target_group_size=None,
    min_group_size=2,
    min_matchmaking_time=0.3,
    max_matchmaking_time=0.3,
)


async def grads_round(
    averager: Averager, seed: int, weight: float, delay: float = 0.0
) -> AveragingResult:
    await asyncio.sleep(delay)
    return await averager.average(
        random_tensors(seed),
        weight=weight,
        round_key="grads.7",
        timeout=HANG_GUARD,
        target_size=3,
        enough=100.0,
    )


async def test_a_group_short_of_the_weight_waits_for_the_expected_members(
    make_averagers: MakeAveragers,
) -> None:
    """The member that was still finishing its microbatch when the target was reached arrives
    1.5 s late: the leader, holding 80 of the 100, waits for it instead of closing a short round
    at its patience."""
    first, second, late = await make_averagers(3, SHORT_PATIENCE)
    results = await asyncio.gather(
        grads_round(first, 1, 40.0),
        grads_round(second, 2, 40.0, delay=0.05),
        grads_round(late, 3, 40.0, delay=1.5),
    )
    assert {r.group_id for r in results} == {results[0].group_id}
    assert len(results[0].members) == 3
    assert all(r.group_weight == 120.0 for r in results)


async def test_a_group_holding_the_weight_closes_without_the_missing_member(
    make_averagers: MakeAveragers,
) -> None:
    """Two members bring 120 of the 100 needed; the third expected never comes (a peer killed
    since its last report). The leader closes at its patience, long before its 30 s timeout."""
    first, second = await make_averagers(2, SHORT_PATIENCE)
    async with asyncio.timeout(HANG_GUARD / 2):  # waiting for the third would take HANG_GUARD
        results = await asyncio.gather(grads_round(first, 4, 60.0), grads_round(second, 5, 60.0))
    assert results[0].group_id == results[1].group_id
    assert len(results[0].members) == 2
    assert results[0].group_weight == 120.0


async def test_a_candidate_that_cannot_be_reached_is_not_tried_again(
    make_averagers: MakeAveragers, caplog: pytest.LogCaptureFixture
) -> None:
    """The best-ranked peer declared itself and was killed: its declaration stays in the DHT. The
    two live peers try it once each. Trying it again would make the leader send its follower
    away each time, to a peer that is gone, while it waits for the weight."""
    caplog.set_level(logging.DEBUG, logger="core.averaging.matchmaking")
    gone, first, second = await make_averagers(3, SHORT_PATIENCE)
    timeout = 4.0  # short of the weight, a leader waits about this long for the third member

    async def grads(averager: Averager, seed: int) -> AveragingResult:
        return await averager.average(random_tensors(seed), weight=40.0, round_key="grads.7",
                                      timeout=timeout, target_size=3, enough=100.0)  # fmt: skip

    search = asyncio.create_task(grads(gone, 6))  # first, so ranked first
    key = gone.matchmaker._key("grads.7")
    await poll_until(lambda: first.dht.get(key, latest=True), lambda found: found is not None)
    search.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await search
    await gone.host.close()  # killed: its address refuses connections from now on
    results = await asyncio.gather(grads(first, 7), grads(second, 8))
    assert results[0].group_id == results[1].group_id
    assert len(results[0].members) == 2
    tries = caplog.text.count(f"joining {gone.host.peer_id} failed")
    assert 1 <= tries <= 2
