"""Budget: a bucket of a share of the clock, which checks empty and time fills."""

from __future__ import annotations

import pytest

from core.training.credit.checks.budget import BURST, Budget
from core.util.clock import FakeClock


@pytest.mark.parametrize(
    ("share", "idle", "spent", "ahead", "allows", "level"),
    [
        (0.5, 0.0, 0.0, 0.0, True, 0.5 * BURST),  # starts full
        (0.5, 86400.0, 0.0, 0.0, True, 0.5 * BURST),  # a quiet day saves no more than that
        (0.5, 0.0, 0.5 * BURST, 0.0, False, 0.0),  # emptied
        (0.5, 0.0, 0.5 * BURST + 100.0, 0.0, False, -100.0),  # a check may overdraw it
        (0.05, 0.0, 0.0, 0.05 * BURST, False, 0.05 * BURST),  # checks under way count
        (0.05, 0.0, 0.0, 0.05 * BURST - 1.0, True, 0.05 * BURST),
        (0.0, 1e6, 0.0, 0.0, False, 0.0),  # no share, never
    ],
)
def test_what_a_budget_allows(
    share: float, idle: float, spent: float, ahead: float, *, allows: bool, level: float
) -> None:
    clock = FakeClock(monotonic_start=100.0)
    budget = Budget(share, clock)
    clock.advance(idle)
    budget.spend(spent)
    assert budget.allows(ahead) is allows
    assert budget.level() == pytest.approx(level)


def test_it_fills_at_its_share_of_the_clock() -> None:
    clock = FakeClock(monotonic_start=100.0)
    budget = Budget(0.5, clock)
    budget.spend(0.5 * BURST + 30.0)  # 30 s owed
    clock.advance(59.0)
    assert not budget.allows()  # 29.5 s refilled: still owed
    clock.advance(2.0)
    assert budget.allows()
    assert budget.level() == pytest.approx(0.5)


def test_no_bound_allows_everything_and_a_negative_share_is_refused() -> None:
    budget = Budget(float("inf"), FakeClock())
    budget.spend(1e9)
    assert budget.allows(1e9)
    for share in (-0.1, float("nan")):
        with pytest.raises(ValueError, match="share of the time"):
            Budget(share, FakeClock())


def test_one_that_starts_empty_allows_a_check_once_its_share_has_filled_for_it() -> None:
    clock = FakeClock(monotonic_start=100.0)
    budget = Budget(0.025, clock, full=False)
    assert budget.level() == pytest.approx(0.0)
    clock.advance(400.0)
    assert not budget.allows(14.0)  # 10 s filled, a 14 s replay waits
    clock.advance(200.0)
    assert budget.allows(14.0)
