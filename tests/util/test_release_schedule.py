"""When the engine hands freed memory back: after enough churn, spaced by time and by its own cost."""

from __future__ import annotations

import pytest

from core.util.memory import ReleaseSchedule


def test_releases_after_enough_churn_then_waits_the_interval() -> None:
    schedule = ReleaseSchedule(after_events=10, min_interval=5.0, max_share=1.0)  # time alone
    assert not schedule.due(9, now=100.0)
    assert schedule.due(10, now=100.0)
    schedule.release(10, now=100.0)
    assert schedule.releases == 1
    assert not schedule.due(30, now=104.0)  # churn enough, too soon
    assert not schedule.due(19, now=200.0)  # late enough, too little churn since the last one
    assert schedule.due(20, now=105.0)


def test_a_costly_release_spaces_the_next_one_by_its_share_of_time() -> None:
    # any real release takes more than a nanosecond: a share of 1e-9 pushes the next one far out
    schedule = ReleaseSchedule(after_events=1, min_interval=1.0, max_share=1e-9)
    schedule.release(1, now=0.0)
    assert not schedule.due(1000, now=1000.0)


@pytest.mark.parametrize(
    "kwargs", [{"after_events": 0}, {"min_interval": 0.0}, {"max_share": 0.0}, {"max_share": 1.5}]
)
def test_nonsense_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="required"):
        ReleaseSchedule(**kwargs)  # type: ignore[arg-type]
