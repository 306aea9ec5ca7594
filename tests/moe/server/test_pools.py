"""TaskPool: batches by size or by age, bounded queue answered "busy", results split per call."""

from __future__ import annotations

import asyncio

import pytest
import torch

from core.moe.server.pools import TaskPool
from core.net.errors import InvalidRequestError, ResourceExhaustedError


def pool(max_batch: int = 4, max_queue: int = 8, max_wait: float = 1.0) -> TaskPool:
    return TaskPool("e.forward", max_batch=max_batch, max_queue=max_queue, max_wait=max_wait)


def rows(n: int, start: float = 0.0) -> list[torch.Tensor]:
    return [torch.arange(start, start + n).reshape(n, 1)]


async def test_ready_when_full_or_when_the_oldest_waited_long_enough() -> None:
    p = pool(max_batch=4, max_wait=1.0)
    assert not p.ready(0.0)
    assert p.due_at() is None
    p.submit(rows(1), now=10.0)
    p.submit(rows(2), now=10.5)
    assert not p.ready(10.9)
    assert p.due_at() == 11.0
    assert p.ready(11.0)  # the oldest call has waited max_wait
    p.submit(rows(1), now=10.6)
    assert p.ready(10.6)  # a full batch waits


async def test_batch_takes_whole_calls_in_order_and_splits_results() -> None:
    p = pool(max_batch=4)
    first = p.submit(rows(2, 0), now=0.0)
    second = p.submit(rows(1, 10), now=0.1)
    third = p.submit(rows(2, 20), now=0.2)  # would exceed max_batch: waits for the next batch
    batch = p.take()
    assert batch.size == 3
    assert p.queued == 2
    assert p.batches == 1
    (merged,) = batch.merged()
    assert merged.flatten().tolist() == [0.0, 1.0, 10.0]
    batch.deliver([merged * 2])
    assert (await first)[0].flatten().tolist() == [0.0, 2.0]
    assert (await second)[0].flatten().tolist() == [20.0]
    assert not third.done()
    assert p.take().size == 2


async def test_full_queue_is_busy_at_once_and_frees_room_when_taken() -> None:
    p = pool(max_batch=4, max_queue=4)
    p.submit(rows(3), now=0.0)
    with pytest.raises(ResourceExhaustedError, match="busy"):
        p.submit(rows(2), now=0.0)
    assert p.queued == 3  # the refused call left nothing behind
    p.take()
    p.submit(rows(2), now=0.0)


async def test_oversized_or_inconsistent_calls_are_invalid() -> None:
    p = pool(max_batch=4)
    with pytest.raises(InvalidRequestError):
        p.submit(rows(5), now=0.0)
    with pytest.raises(InvalidRequestError, match="differ"):
        p.submit([torch.zeros(2, 1), torch.zeros(3, 1)], now=0.0)
    assert p.queued == 0


async def test_abandoned_calls_are_skipped_and_fail_all_answers_the_rest() -> None:
    p = pool()
    gone = p.submit(rows(2), now=0.0)
    waiting = p.submit(rows(1), now=0.1)
    gone.cancel()
    assert p.oldest() == 0.1
    assert p.queued == 1
    p.fail_all(RuntimeError("closing"))
    with pytest.raises(RuntimeError, match="closing"):
        await waiting
    assert p.queued == 0
    assert p.take().tasks == []


async def test_a_wrong_sized_result_fails_the_batch() -> None:
    p = pool()
    call = p.submit(rows(2), now=0.0)
    p.take().deliver([torch.zeros(3, 1)])
    with pytest.raises(RuntimeError, match="3 rows for 2"):
        await asyncio.wait_for(call, 5)
