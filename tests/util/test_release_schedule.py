"""When the engine hands freed memory back: after enough churn, spaced by time and by its own cost.

The schedule's decisions run on a fake clock and a fake release whose cost the test sets, so that a
slow machine (a full collection of this process's heap can take seconds under load) changes nothing.
"""

from __future__ import annotations

import gc
import sys
import weakref

import pytest

from core.util.memory import ReleaseSchedule, release_free_memory


class _Costly:
    """A release that takes ``cost`` seconds of the fake timer, counted."""

    def __init__(self, cost: float) -> None:
        self.cost = cost
        self.now = 0.0
        self.calls = 0

    def release(self) -> None:
        self.calls += 1
        self.now += self.cost

    def timer(self) -> float:
        return self.now


def test_releases_after_enough_churn_then_waits_the_interval() -> None:
    fake = _Costly(cost=0.0)
    schedule = ReleaseSchedule(
        after_events=10, min_interval=5.0, max_share=1.0, releaser=fake.release, timer=fake.timer
    )
    assert not schedule.due(9, now=100.0)
    assert schedule.due(10, now=100.0)
    schedule.release(10, now=100.0)
    assert (schedule.releases, fake.calls) == (1, 1)
    assert not schedule.due(30, now=104.0)  # churn enough, too soon
    assert not schedule.due(19, now=200.0)  # late enough, too little churn since the last one
    assert schedule.due(20, now=105.0)


def test_a_costly_release_spaces_the_next_one_by_its_share_of_time() -> None:
    # a release of 2 s allowed 1 % of the time: the next one waits 200 s, not the 1 s interval
    fake = _Costly(cost=2.0)
    schedule = ReleaseSchedule(
        after_events=1, min_interval=1.0, max_share=0.01, releaser=fake.release, timer=fake.timer
    )
    schedule.release(1, now=0.0)
    assert not schedule.due(1000, now=199.0)
    assert schedule.due(1000, now=200.0)


def test_the_real_release_collects_cycles_and_trims_on_glibc() -> None:
    class Node:
        other: object = None

    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    gc.disable()  # only the release may collect the cycle
    try:
        del a, b
        trimmed = release_free_memory()
    finally:
        gc.enable()
    assert gone() is None
    assert trimmed is sys.platform.startswith("linux")


@pytest.mark.parametrize(
    "kwargs", [{"after_events": 0}, {"min_interval": 0.0}, {"max_share": 0.0}, {"max_share": 1.5}]
)
def test_nonsense_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="required"):
        ReleaseSchedule(**kwargs)  # type: ignore[arg-type]
