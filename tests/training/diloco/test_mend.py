"""When a peer apart from most may take their outer parameters between round ends (a pure rule)."""

from __future__ import annotations

import pytest

from core.training.diloco.mend import mend_due
from core.training.diloco.optimizer import reads_every

ROUND = 60.0


@pytest.mark.parametrize(
    ("until_end", "idle", "fresh", "due"),
    [
        (30.0, True, True, True),  # halfway: the others' landings are in their records
        (1.0, True, True, True),  # just before the round's end
        (30.1, True, True, False),  # the first half: the others may not have landed yet
        (59.0, True, True, False),
        (10.0, False, True, False),  # an exchange of ours in flight, paused, or repairing
        (10.0, True, False, False),  # tried already with the outer parameters we hold
    ],
)
def test_a_peer_mends_in_the_second_half_when_idle_and_once_per_landing(
    until_end: float, idle: bool, fresh: bool, due: bool
) -> None:
    assert mend_due(until_end=until_end, round_seconds=ROUND, idle=idle, fresh=fresh) is due


@pytest.mark.parametrize(("round_seconds", "every"), [(60.0, 30.0), (15.0, 7.5), (4.0, 5.0)])
def test_the_records_are_read_in_every_rounds_second_half_and_no_more_often_than_needed(
    round_seconds: float, every: float
) -> None:
    """Twice a round (so one read falls in each half, where a peer apart mends), never more
    often than every 5 s: each read brings every peer's record."""
    assert reads_every(round_seconds) == every
