"""Which findings a member signs: facts at once, a screen's findings once the same sender was found
in enough epochs lately (pure: findings in, findings out)."""

from __future__ import annotations

import pytest

from core.averaging import Finding
from core.net import Identity
from core.training.moderation.repeated import HELD, REPEATS, WINDOW, Found, RepeatedFindings

HONEST, LIAR = Identity.generate().peer_id, Identity.generate().peer_id


def found(peer: object, epoch: int, statistic: str = "clip_weight", chunk: int = 0) -> Found:
    finding = Finding(peer, 0, chunk, statistic, 0.1, "")  # type: ignore[arg-type]
    return Found(f"grads.{epoch}", b"g", epoch, finding)


def epochs(signed: list[Found]) -> list[int]:
    return [item.epoch for item in signed]


@pytest.mark.parametrize(
    ("seen", "signed_at"),
    [
        ([3], None),  # once: an honest outlier
        ([3, 5], None),
        ([3, 3, 3], None),  # three chunks of one round are one epoch
        ([2, 3, 4], 4),  # three epochs in a row
        ([1, 5, 10], 10),  # three within the window
        ([1, 5, 11], None),  # the first fell out of it
        ([1, 5, 11, 12], 12),
        ([2, 30, 60, 90], None),  # an honest peer's outliers, far apart
    ],
)
def test_a_screens_finding_is_signed_once_its_sender_was_found_in_enough_epochs(
    seen: list[int], signed_at: int | None
) -> None:
    assert (REPEATS, WINDOW) == (3, 10)
    rule = RepeatedFindings()
    first = None
    for epoch in seen:
        signed = rule.admit([found(LIAR, epoch)])
        if signed and first is None:
            first = epoch
            # everything held within the window goes with it
            assert epochs(signed) == [e for e in seen if e <= epoch and epoch - e < WINDOW]
    assert first == signed_at


def test_facts_are_signed_at_once_and_a_caught_sender_is_signed_while_it_goes_on() -> None:
    rule = RepeatedFindings()
    assert epochs(rule.admit([found(HONEST, 1, "nonfinite")])) == [1]
    assert epochs(rule.admit([found(HONEST, 1, "reducer_mismatch")])) == [1]
    for epoch in (1, 2):
        assert rule.admit([found(LIAR, epoch, "norm_ratio")]) == []
    assert rule.held(LIAR) == 2
    assert epochs(rule.admit([found(LIAR, 3, "opposed")])) == [1, 2, 3]
    assert rule.held(LIAR) == 0
    assert epochs(rule.admit([found(LIAR, 4)])) == [4]  # still at it: signed at once
    assert epochs(rule.admit([found(LIAR, 4 + WINDOW)])) == [4 + WINDOW]
    assert rule.admit([found(LIAR, 5 + 3 * WINDOW)]) == []  # quiet for long: a fresh start
    # an honest outlier found in two epochs, in the same rounds as the liar, is never signed
    both = [found(HONEST, 40), found(LIAR, 40), found(HONEST, 41), found(LIAR, 41)]
    assert {str(i.finding.peer) for i in rule.admit(both)} == {str(LIAR)}


def test_what_is_held_is_bounded() -> None:
    rule = RepeatedFindings()
    assert rule.admit([found(LIAR, 1, chunk=c) for c in range(10 * HELD)]) == []
    assert rule.held(LIAR) == HELD
    with pytest.raises(ValueError, match="at least once"):
        RepeatedFindings(repeats=0)
