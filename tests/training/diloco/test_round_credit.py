"""RoundCredit and its Allowance: a claim whose record names the backbone's anchor is paid as
replayable; any other only within an allowance of a share of those; and a member whose records
and receipts disagree on it is caught."""

from __future__ import annotations

import hashlib

import pytest

from core.training.credit.book import CreditBook
from core.training.credit.checks.standing import Standings
from core.training.credit.scores import WorkScores
from core.training.diloco.checks.allowance import RECENT, SHARE, Allowance
from core.training.diloco.checks.credit import RoundCredit
from core.training.progress.landed import BEGAN_CHARS, Landed

ROUND = 64
"""Samples a member computes in a round."""


def state(epoch: int) -> str:
    return hashlib.sha256(str(epoch).encode()).hexdigest()


def began(epoch: int) -> str:
    return state(epoch)[:BEGAN_CHARS]


@pytest.mark.parametrize(
    ("judged", "paid", "asked", "taken", "left"),
    [
        (0, [], 8, False, 0.0),  # nothing judged yet: no room
        (800, [], 100, True, 0.0),  # an eighth of 800
        (800, [], 101, False, 100.0),  # a claim over what is left waits whole
        (800, [60], 40, True, 0.0),
        (800, [60], 41, False, 40.0),
    ],
)
def test_what_the_allowance_pays(
    judged: int, paid: list[int], asked: int, *, taken: bool, left: float
) -> None:
    assert SHARE == 0.125
    allowance = Allowance()
    allowance.judged("a", judged)
    for samples in paid:
        assert allowance.take("a", samples)
    assert allowance.take("a", asked) is taken
    assert allowance.left("a") == pytest.approx(left)
    assert allowance.left("b") == 0.0  # each member has its own


def test_an_allowance_is_a_share() -> None:
    with pytest.raises(ValueError, match="share in"):
        Allowance(1.5)
    with pytest.raises(ValueError, match="at least 1 round"):
        Allowance(recent=0)


def test_an_allowance_holds_the_share_of_the_recent_rounds_only() -> None:
    """A member honest for a thousand rounds that then fakes a streak labelled unreplayable is
    paid for an eighth of its last ``RECENT`` rounds, not of all thousand; its later honest
    rounds make room again, an eighth of each."""
    allowance = Allowance()
    for _ in range(1000):
        allowance.judged("m", ROUND)
    assert allowance.left("m") == pytest.approx(SHARE * RECENT * ROUND)
    paid = 0
    while allowance.take("m", ROUND):
        paid += 1
    assert paid == int(SHARE * RECENT) == 8
    for _ in range(8):
        allowance.judged("m", ROUND)
    assert allowance.take("m", ROUND)
    assert not allowance.take("m", ROUND)


def credit(states: dict[int, str] | None = None) -> tuple[RoundCredit, Standings]:
    standings = Standings(0.1)
    standings.passed("m", 0)  # trusted: its claims are paid while its replays pass
    held = {e: state(e) for e in range(1000)} if states is None else states
    return RoundCredit(WorkScores(hold=10.0, newcomer_hold=30.0), standings, held.get), standings


def test_a_round_labelled_replayable_from_the_backbones_anchor_is_paid() -> None:
    rounds, _ = credit()
    assert rounds.supported("m", 3, ROUND, 0.0, began(3)) == ROUND
    assert rounds.allowance.left("m") == pytest.approx(SHARE * ROUND)
    assert rounds.mislabeled() == {}


@pytest.mark.parametrize(
    "label",
    [None, began(4), "f" * BEGAN_CHARS],  # says so; another epoch's anchor; another state
)
def test_a_round_no_replay_can_judge_is_paid_within_the_allowance(label: str | None) -> None:
    rounds, _ = credit()
    assert rounds.supported("m", 3, ROUND, 0.0, label) is None  # no room yet: it waits
    for epoch in range(4, 12):
        assert rounds.supported("m", epoch, ROUND, 0.0, began(epoch)) == ROUND
    assert rounds.supported("m", 3, ROUND, 0.0, label) == ROUND  # eight rounds made room


def test_an_epoch_whose_anchor_the_backbone_did_not_hold_is_not_judged() -> None:
    rounds, _ = credit(states={})
    assert rounds.supported("m", 3, ROUND, 0.0, began(3)) is None


def test_a_newcomers_claims_still_wait_for_its_first_passed_replay() -> None:
    rounds, _ = credit()
    assert rounds.supported("newcomer", 3, ROUND, 0.0, began(3)) is None
    assert rounds.allowance.left("newcomer") == 0.0


@pytest.mark.parametrize("found_first", [True, False])
def test_a_member_whose_records_and_receipt_disagree_is_caught(found_first: bool) -> None:
    """The check found the round unreplayable before or after the claim labelled replayable was
    paid: either way the member is named (the backbone then fails it and signs evidence)."""
    rounds, _ = credit()
    if found_first:
        rounds.unreplayable("m", 3)
        assert rounds.supported("m", 3, ROUND, 0.0, began(3)) == 0
        assert "its receipt said it could not" in rounds.why("m", 3)
    else:
        assert rounds.supported("m", 3, ROUND, 0.0, began(3)) == ROUND
        rounds.unreplayable("m", 3)
    assert rounds.mislabeled() == {"m": 3}
    assert rounds.mislabeled() == {}  # named once


def test_an_honest_round_found_unreplayable_is_paid_from_the_allowance_and_names_nobody() -> None:
    rounds, _ = credit()
    for epoch in range(8):
        assert rounds.supported("m", epoch, ROUND, 0.0, began(epoch)) == ROUND
    rounds.unreplayable("m", 8)  # its record says so too
    assert rounds.supported("m", 8, ROUND, 0.0, None) == ROUND
    assert rounds.mislabeled() == {}


@pytest.mark.parametrize("faked", [0.1, 0.5, 0.9])
def test_a_member_that_labels_its_faked_rounds_unreplayable_gains_at_most_the_share(
    faked: float,
) -> None:
    """It computes its other rounds honestly (they pass any replay) and claims a full round for
    each faked one, labelled so that no check judges it. Through the credit book, as the
    backbone pays: its credit stays within (1 + SHARE) of what it computed, while an honest
    member beside it, whose network drops one round in twenty, is paid in full."""
    rounds, standings = credit()
    standings.passed("honest", 0)
    book = CreditBook(rounds)
    computed = {"m": 0, "honest": 0}
    paid = {"m": 0, "honest": 0}
    epochs = 400
    for epoch in range(epochs):
        fake = epoch % 10 < round(10 * faked)  # ``faked`` of every ten rounds
        computed["m"] += 0 if fake else ROUND
        computed["honest"] += ROUND
        dropped = epoch % 20 == 19  # an honest round no replay can judge
        book.claim("m", [Landed(epoch, ROUND, None if fake else began(epoch))], None, 1.0)
        book.claim("honest", [Landed(epoch, ROUND, None if dropped else began(epoch))], None, 1.0)
        for share in [*book.take(epoch), *(s for ss in book.late(epoch - 1).values() for s in ss)]:
            paid[share.peer] += share.samples
    assert paid["m"] <= (1 + SHARE) * computed["m"] + ROUND
    assert paid["honest"] >= 0.99 * computed["honest"]
    assert rounds.mislabeled() == {}
