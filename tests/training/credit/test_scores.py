"""WorkScores: credit for what a diloco member's updates show, as a table of cases."""

from __future__ import annotations

import pytest

from core.averaging import Alignment
from core.training.credit.metrics import MetricsAggregator
from core.training.credit.scores import (
    ACCUSE_BELOW,
    FULL,
    MIN_COSINE,
    WINDOW,
    WorkScores,
)
from core.training.progress import Landed


def sent(weight: float, projection: float, cosine: float = 0.8) -> Alignment:
    """A sender's sums with this projection on the others' direction and this cosine."""
    reference2 = 1.0
    norm2 = (projection / cosine) ** 2 if cosine else 1.0
    return Alignment(weight, projection, norm2, reference2)


def honest_round(liar: tuple[float, float] | None = None) -> dict[str, Alignment]:
    """Three honest members of 100 samples (projections 0.9, 1.0, 1.1) and one ``(claim,
    projection)``, or a fourth honest one."""
    found = {"a": sent(100, 0.9), "b": sent(100, 1.0), "c": sent(100, 1.1)}
    found["x"] = sent(*liar) if liar is not None else sent(100, 1.0)
    return found


@pytest.mark.parametrize(
    ("liar", "credited_share"),
    [
        ((100, 1.0), 1.0),  # honest
        ((1000, 1.0), 0.0),  # claims 10x what it computed: caught, credited nothing
        ((10000, 1.0), 0.0),  # 100x
        ((100, 0.0), 0.0),  # computes nothing
        ((100, 0.1), 0.0),  # computes a tenth of what it claims
        ((300, 1.0), 1 / 3),  # claims 3x: credited what it computed
        ((100, 0.4), 0.4),  # computes 40 %: credited that
        ((100, ACCUSE_BELOW + 0.05), ACCUSE_BELOW + 0.05),  # just above the floor
        ((100, ACCUSE_BELOW - 0.05), 0.0),  # just below: caught
        ((100, -3.0), 0.0),  # a flipped update
        ((150, 1.0), 1.0),  # a little above: within FULL, credited as claimed
    ],
)
def test_credit_is_what_the_updates_show(liar: tuple[float, float], credited_share: float) -> None:
    scores = WorkScores(hold=10.0, newcomer_hold=30.0)
    for epoch in range(WINDOW):
        scores.observe(epoch, honest_round(liar))
    claim = int(liar[0])
    credit = scores.supported("x", WINDOW - 1, claim, now=0.0)
    # the round's median is 0.95 of an honest member's, not 1: within 5 %
    assert credit == pytest.approx(claim * credited_share, abs=claim * 0.05)
    assert scores.supported("a", WINDOW - 1, 100, now=0.0) == 100
    accused = scores.accusations()
    assert ("x" in accused) == (credited_share == 0)
    assert scores.accusations() == {}  # once


def test_one_bad_round_costs_an_honest_member_nothing() -> None:
    scores = WorkScores(hold=10.0, newcomer_hold=30.0)
    for epoch in range(WINDOW):
        scores.observe(epoch, honest_round((100, 0.0) if epoch == 2 else None))
    assert scores.supported("x", 2, 100, now=0.0) == 100
    assert scores.accusations() == {}


def test_a_turncoat_loses_its_credit_within_the_window() -> None:
    scores = WorkScores(hold=10.0, newcomer_hold=30.0)
    for epoch in range(10):
        scores.observe(epoch, honest_round((1000, 1.0) if epoch >= 5 else None))
    assert scores.supported("x", 4, 100, now=0.0) == 100
    assert scores.supported("x", 9, 1000, now=0.0) == 0
    assert "x" in scores.accusations()


@pytest.mark.parametrize(
    "round_",
    [
        {"a": sent(100, 1.0), "b": sent(100, 1.0)},  # a pair: no majority sets the median
        {p: sent(100, 1.0, cosine=MIN_COSINE / 2) for p in "abcd"},  # no shared direction
        {p: sent(100, -1.0) for p in "abcd"},  # everyone away from everyone
    ],
)
def test_a_round_that_proves_nothing_scores_no_one(round_: dict[str, Alignment]) -> None:
    scores = WorkScores(hold=10.0, newcomer_hold=30.0)
    assert scores.observe(0, round_) == {}
    assert scores.standing("a") is None


def test_waiting_for_the_round_then_crediting() -> None:
    scores = WorkScores(hold=10.0, newcomer_hold=30.0)
    # a newcomer's claim waits for its first scored round
    assert scores.supported("x", 0, 1000, now=100.0) is None
    scores.observe(0, honest_round((300, 1.0)))
    assert scores.supported("x", 0, 300, now=101.0) == pytest.approx(100, abs=5)
    # a known member's claim waits for its round, at most ``hold`` seconds
    assert scores.supported("a", 1, 100, now=110.0) is None
    assert scores.supported("a", 1, 100, now=115.0) is None
    assert scores.supported("a", 1, 100, now=121.0) == 100  # by its standing
    # a round the backbone saw without the member: its standing judges at once
    scores.observe(2, {"a": sent(100, 1.0), "b": sent(100, 1.0), "c": sent(100, 1.0)})
    assert scores.supported("x", 2, 300, now=122.0) == pytest.approx(100, abs=5)


def test_a_member_never_scored_is_credited_after_the_newcomers_wait() -> None:
    scores = WorkScores(hold=10.0, newcomer_hold=30.0)
    assert scores.supported("y", 3, 500, now=0.0) is None
    assert scores.supported("y", 3, 500, now=29.0) is None
    assert scores.supported("y", 3, 500, now=31.0) == 500
    assert scores.of("y").unscored == 500


def test_a_recovered_member_can_be_accused_again() -> None:
    scores = WorkScores(hold=10.0, newcomer_hold=30.0)
    epoch = 0
    for liar in [(100, 0.0), (100, 1.0), (100, 0.0)]:
        for _ in range(WINDOW):
            scores.observe(epoch, honest_round(liar))
            epoch += 1
        accused = scores.accusations()
        assert ("x" in accused) == (liar[1] == 0.0)
    standing = scores.standing("x")
    assert standing is not None
    assert standing < FULL


def test_a_round_that_proved_nothing_holds_no_newcomer() -> None:
    """Two trainers: no round can prove anything, and nobody's credit waits for one."""
    scores = WorkScores(hold=10.0, newcomer_hold=30.0)
    scores.observe(0, {"a": sent(100, 1.0), "b": sent(100, 1.0)})
    assert scores.supported("a", 0, 100, now=0.0) == 100
    assert scores.of("a").unscored == 100
    # a round the backbone has not seen yet still waits
    assert scores.supported("a", 1, 100, now=0.0) is None


def test_a_newcomer_outside_a_proved_round_waits_for_its_own() -> None:
    scores = WorkScores(hold=10.0, newcomer_hold=30.0)
    scores.observe(0, honest_round())
    assert scores.supported("new", 0, 100, now=0.0) is None  # the backbone's group was another
    scores.observe(1, honest_round() | {"new": sent(300, 1.0)})
    assert scores.supported("new", 0, 90, now=1.0) == pytest.approx(30, abs=1)


def test_a_round_at_rest_leaves_the_standing_to_the_rounds_that_proved_something() -> None:
    """Once the loss is flat a fast member's update overshoots; those rounds judge nobody."""
    scores = WorkScores(hold=10.0, newcomer_hold=30.0)
    for epoch in range(WINDOW):
        scores.observe(epoch, honest_round())
    for epoch in range(WINDOW, 2 * WINDOW):
        flat = {p: sent(100, 1.0, cosine=0.3) for p in "abc"} | {"x": sent(400, -0.5, cosine=-0.3)}
        assert scores.observe(epoch, flat) == {}
    assert scores.cosines[2 * WINDOW - 1] == pytest.approx(0.3)
    assert scores.supported("x", 2 * WINDOW - 1, 400, now=0.0) == 400


@pytest.mark.parametrize("kind", ["copies", "nothing"])
def test_tiny_identities_set_no_median_the_honest_are_scored_by(kind: str) -> None:
    """As many identities as honest members, claiming a thousandth of a sample each: copying an
    honest update (a thousand times its score per sample) or sending nothing. Counted one per
    sender, the copies set the median per sample, and every honest member scored a thousandth."""
    scores = WorkScores(hold=10.0, newcomer_hold=30.0)
    crowd = {f"s{i}": sent(0.1, 1.0 if kind == "copies" else 0.0) for i in range(4)}
    for epoch in range(WINDOW):
        ratios = scores.observe(epoch, {**honest_round(), **crowd})
        assert 0.9 <= min(ratios[p] for p in "abcx") <= max(ratios[p] for p in "abcx") <= 1.2
    for peer in "abcx":
        assert scores.supported(peer, WINDOW - 1, 100, now=0.0) == 100
    assert set(scores.accusations()) == (set() if kind == "copies" else set(crowd))


def test_identities_alone_prove_nothing() -> None:
    """Two honest members and tiny identities: not a majority of votes. As many as them from
    the claims alone; any number past the last confirmed round's typical claim."""
    scores = WorkScores(hold=10.0, newcomer_hold=30.0)
    pair = {"a": sent(100, 0.9), "b": sent(100, 1.0)}
    assert scores.observe(0, {**pair, "s0": sent(0.1, 1.0), "s1": sent(0.1, 1.0)}) == {}
    crowd = {f"s{i}": sent(0.1, 1.0) for i in range(10)}
    assert scores.observe(1, {**pair, **crowd}, confirmed=100.0) == {}


def test_half_of_the_senders_inflated_is_held_by_the_confirmed_claim() -> None:
    """As many senders as honest ones claiming 100x and copying: by the last confirmed round's
    typical claim they hold one vote each, the honest members' median holds, and they are caught."""
    scores = WorkScores(hold=10.0, newcomer_hold=30.0)
    inflated = {f"i{i}": sent(10_000, 1.0) for i in range(4)}
    for epoch in range(WINDOW):
        ratios = scores.observe(epoch, {**honest_round(), **inflated}, confirmed=100.0)
        # the inflated score per sample is a hundredth of the honest one: the median falls
        # between the two halves, and every honest member stays above the full standing
        assert min(ratios[p] for p in "abcx") >= FULL
    assert set(scores.accusations()) == set(inflated)


@pytest.mark.parametrize(
    ("weight", "recorded", "credited_at_most", "accused"),
    [
        (100, 100, 100, False),  # honest: the record is the round's weight
        (100.4, 100, 100, False),  # a weight that is not whole: the record rounds it
        (100, 120, 100, False),  # a little above: cut to the weight, no proof of a lie
        (25, 100_000, 25, True),  # records x1000 with the round's weight x0.25
        (100, 150, 100, True),  # records x1.5 beside an honest round
    ],
)
def test_credit_is_never_more_than_the_weight_the_round_saw(
    weight: float, recorded: int, credited_at_most: int, accused: bool
) -> None:
    scores = WorkScores(hold=10.0, newcomer_hold=30.0)
    # the member's work is honest for the weight it declares (a projection of weight/100)
    for epoch in range(WINDOW):
        scores.observe(epoch, honest_round((weight, weight / 100)))
    credit = scores.supported("x", WINDOW - 1, recorded, now=0.0)
    assert credit is not None
    assert credit <= credited_at_most
    assert credit >= credited_at_most * 0.9  # what the round saw is paid
    found = scores.record_accusations()
    assert ("x" in found) == accused
    assert scores.record_accusations() == {}  # once
    # a round the backbone saw without it: the claim times the share the rounds seen supported
    scores.observe(WINDOW + 3, {"a": sent(100, 1.0), "b": sent(100, 1.0), "c": sent(100, 1.0)})
    unseen = scores.supported("x", WINDOW + 3, recorded, now=100.0)
    assert unseen is not None
    assert unseen <= credited_at_most + 1


def test_an_honest_record_is_paid_in_full_in_rounds_the_backbone_did_not_see() -> None:
    scores = WorkScores(hold=10.0, newcomer_hold=30.0)
    for epoch in range(WINDOW):
        scores.observe(epoch, honest_round())
        assert scores.supported("x", epoch, 100, now=0.0) == 100
    scores.observe(WINDOW + 3, {"a": sent(100, 1.0), "b": sent(100, 1.0), "c": sent(100, 1.0)})
    assert scores.supported("x", WINDOW + 3, 100, now=100.0) == 100
    assert scores.record_accusations() == {}


def test_a_share_cut_by_the_scores_carries_its_claim_and_why_to_the_report() -> None:
    scores = WorkScores(hold=10.0, newcomer_hold=30.0)
    aggregator = MetricsAggregator(grace=0.0, support=scores)
    access = None  # no pass needed to be credited (only to be reported)
    for epoch in range(WINDOW):
        scores.observe(epoch, honest_round((25, 0.25)))  # declares 25 in the round
        aggregator.credit.claim("x", [Landed(epoch, 100)], access, 1.0)  # records claim 100
        aggregator.credit.claim("a", [Landed(epoch, 100)], access, 1.0)
        shares = {s.peer: s for s in aggregator.credit.take(epoch, now=0.0)}
        assert (shares["x"].samples, shares["x"].claimed) == (25, 100)
        assert "cut to the weight its round carried (25 samples" in shares["x"].note
        assert (shares["a"].samples, shares["a"].claimed, shares["a"].note) == (100, None, "")
    last = 2 * WINDOW
    for epoch in range(WINDOW, last + 1):  # its whole weight, a third of the work shown
        scores.observe(epoch, honest_round((100, 0.3)))
    aggregator.credit.claim("x", [Landed(last, 100)], access, 1.0)
    [share] = [s for s in aggregator.credit.take(last, now=0.0) if s.peer == "x"]
    assert (share.samples, share.claimed) == (pytest.approx(30, abs=3), 100)
    assert "its updates show 0.3" in share.note


@pytest.mark.parametrize(
    ("receipt", "recorded", "credit", "accused"),
    [
        (3200, 3200, 3200, False),  # an honest member of another group: its record, whole
        (3200, 6400, 3200, True),  # twice what its receipt backs: cut, and accused
        (0, 3200, 0, True),  # claims a round it kept no receipt of
        (0, 0, 0, False),  # kept none and claims none: it did not send that round
    ],
)
def test_a_receipt_bounds_the_claim_of_a_round_the_backbone_did_not_see(
    receipt: int, recorded: int, credit: int, accused: bool
) -> None:
    scores = WorkScores(hold=10.0, newcomer_hold=30.0)
    scores.backed("x", 4, receipt)
    assert scores.receipted("x", 4)
    assert scores.bounded("x", 4, recorded) == credit
    assert ("x" in scores.record_accusations()) == accused


def test_what_the_backbones_part_saw_stays_the_authority_over_a_receipt() -> None:
    scores = WorkScores(hold=10.0, newcomer_hold=30.0)
    scores.observe(4, {"x": sent(100, 1.0), "a": sent(100, 1.0), "b": sent(100, 1.0)})
    scores.backed("x", 4, 1000)
    assert not scores.receipted("x", 4)
    assert scores.bounded("x", 4, 1000) == 100
    scores.backed("y", 5, 100)  # a receipt first, then the part saw the round
    scores.observe(5, {"y": sent(80, 1.0), "a": sent(100, 1.0), "b": sent(100, 1.0)})
    assert not scores.receipted("y", 5)
    assert scores.bounded("y", 5, 100) == 80
