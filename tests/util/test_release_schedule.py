"""When the engine hands freed memory back: after enough churn, spaced by time and by its own cost,
and never holding up the event loop: only the young generations are collected on the loop, and the
trim runs on a worker thread while the loop goes on.

The schedule's decisions run on a fake clock and fake parts whose cost the test sets, so that a
slow machine (a full collection of this process's heap can take seconds under load) changes nothing.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import weakref

import pytest

from core.util import memory
from core.util.memory import ReleaseSchedule, collect_young_garbage, trim_free_heap


class _Costly:
    """A collection and a trim that take ``collect`` and ``trim`` seconds of the fake timer."""

    def __init__(self, collect: float = 0.0, trim: float = 0.0) -> None:
        self.costs = {"collect": collect, "trim": trim}
        self.now = 0.0
        self.calls: list[str] = []

    def collect(self) -> None:
        self._spend("collect")

    def trim(self) -> None:
        self._spend("trim")

    def _spend(self, part: str) -> None:
        self.calls.append(part)
        self.now += self.costs[part]

    def timer(self) -> float:
        return self.now

    def schedule(
        self, *, after_events: int, min_interval: float, max_share: float
    ) -> ReleaseSchedule:
        return ReleaseSchedule(
            after_events=after_events,
            min_interval=min_interval,
            max_share=max_share,
            collect=self.collect,
            trim=self.trim,
            timer=self.timer,
        )


async def test_releases_after_enough_churn_then_waits_the_interval() -> None:
    fake = _Costly()
    schedule = fake.schedule(after_events=10, min_interval=5.0, max_share=1.0)
    assert not schedule.due(9, now=100.0)
    assert schedule.due(10, now=100.0)
    await schedule.release(10, now=100.0)
    assert schedule.releases == 1
    assert fake.calls == ["collect", "trim"]
    assert not schedule.due(30, now=104.0)  # churn enough, too soon
    assert not schedule.due(19, now=200.0)  # late enough, too little churn since the last one
    assert schedule.due(20, now=105.0)


@pytest.mark.parametrize(
    ("collect", "trim", "max_share", "next_at"),
    [
        # nothing to speak of: the interval decides
        (0.0, 0.0, 0.01, 1.0),
        # a collection of 2 s allowed 1 % of the time: the next waits 200 s, not the 1 s interval
        (2.0, 0.0, 0.01, 200.0),
        # the trim counts though it runs off the loop: it takes the machine's time all the same
        (0.0, 2.0, 0.01, 200.0),
        (0.25, 1.75, 0.5, 4.0),
    ],
)
async def test_a_costly_release_spaces_the_next_one_by_its_share_of_time(
    collect: float, trim: float, max_share: float, next_at: float
) -> None:
    fake = _Costly(collect, trim)
    schedule = fake.schedule(after_events=1, min_interval=1.0, max_share=max_share)
    await schedule.release(1, now=0.0)
    assert not schedule.due(1000, now=next_at - 0.5)
    assert schedule.due(1000, now=next_at)


async def test_the_loop_collects_only_the_young_generations_and_a_worker_thread_trims(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop_thread = threading.get_ident()
    calls: list[tuple[str, int | None, bool]] = []

    def collect(generation: int = 2) -> int:
        calls.append(("collect", generation, threading.get_ident() == loop_thread))
        return 0

    def trim() -> bool:
        calls.append(("trim", None, threading.get_ident() == loop_thread))
        return True

    monkeypatch.setattr(gc, "collect", collect)  # what the real ``collect_young_garbage`` asks
    schedule = ReleaseSchedule(after_events=1, trim=trim)
    await schedule.release(1, now=0.0)
    # (part, generation asked for, on the loop's thread)
    assert calls == [
        ("collect", memory.YOUNG, True),  # generations 0 and 1: cheap whatever the heap's size
        ("trim", None, False),
    ]
    assert memory.YOUNG < 2  # never the full collection, which costs the whole heap


async def test_the_loop_runs_on_while_the_trim_does_and_no_release_starts_meanwhile() -> None:
    loop = asyncio.get_running_loop()
    trimming = asyncio.Event()
    finish = threading.Event()

    def trim() -> None:
        loop.call_soon_threadsafe(trimming.set)
        finish.wait(timeout=60.0)  # a guard against a hang only: the test sets it

    schedule = ReleaseSchedule(after_events=1, trim=trim, collect=lambda: None)
    release = asyncio.create_task(schedule.release(1, now=0.0))
    await trimming.wait()  # heard on the loop while the worker thread is still trimming
    assert not release.done()
    assert not schedule.due(1000, now=1e9)  # one release at a time
    finish.set()
    await release
    assert schedule.releases == 1
    assert schedule.due(1000, now=1e9)


def test_the_real_parts_collect_young_cycles_and_trim_on_glibc() -> None:
    class Node:
        other: object = None

    gc.disable()  # only the release may collect the cycle, which stays in the youngest generation
    try:
        a, b = Node(), Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
        collect_young_garbage()
    finally:
        gc.enable()
    assert gone() is None
    assert trim_free_heap() is sys.platform.startswith("linux")


@pytest.mark.parametrize(
    "kwargs", [{"after_events": 0}, {"min_interval": 0.0}, {"max_share": 0.0}, {"max_share": 1.5}]
)
def test_nonsense_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="required"):
        ReleaseSchedule(**kwargs)  # type: ignore[arg-type]
