"""``compare``: the engine's landed epochs beside the coordinator's credit, without a coordinator:
the window, the coordinator's limit, and the summary's words."""

from __future__ import annotations

from core.account.replies import CreditedEpochs
from core.api import CreditDifference
from core.engine.credit import CHECKED, HELD, NOT_CREDITED, NOT_REPORTED, compare, since
from core.net import Identity
from core.stats import LANDED_KEPT, LandedRow

PEER = Identity.generate().peer_id


def rows(*pairs: tuple[int, int]) -> list[LandedRow]:
    return [LandedRow(str(PEER), epoch, samples, 1.0) for epoch, samples in pairs]


def credited(
    epochs: dict[int, int], newest: int | None, *, listed: int | None = None
) -> CreditedEpochs:
    total = sum(epochs.values()) + 1000  # older epochs, outside the window
    return CreditedEpochs(PEER, total, epochs, len(epochs) if listed is None else listed, newest)


def test_the_window_starts_at_the_oldest_epoch_kept() -> None:
    kept = rows((7, 10), (5, 20), (6, 30))  # in arrival order, not by epoch
    assert since(kept) == 5
    assert since([]) == 0
    check = compare("p", kept, credited({4: 99, 5: 20, 6: 30, 7: 10}, 7))
    assert (check.matches, check.epochs, check.since, check.credited_total) == (True, 3, 5, 1159)
    assert check.summary == "Your counts match the project's: 60 samples over 3 epochs."


def test_nothing_kept_compares_nothing() -> None:
    check = compare("p", [], credited({1: 5}, 1))
    assert (check.matches, check.epochs, check.since, check.differences) == (True, 0, None, [])
    assert "1,005 samples in all" in check.summary


def test_epochs_beyond_a_full_answer_are_not_judged() -> None:
    epochs = dict.fromkeys(range(LANDED_KEPT), 1)
    kept = rows(*((epoch, 1) for epoch in range(LANDED_KEPT + 2)))
    full = compare("p", kept, credited(epochs, LANDED_KEPT + 1, listed=LANDED_KEPT))
    assert (full.matches, full.epochs) == (True, LANDED_KEPT)


def test_no_report_yet_and_no_credit_are_told_apart() -> None:
    check = compare("p", rows((1, 8), (2, 8), (3, 8)), credited({1: 8}, 2))
    assert check.differences == [
        CreditDifference(2, 8, 0, NOT_CREDITED),
        CreditDifference(3, 8, 0, NOT_REPORTED),
    ]
    assert check.summary == (
        "16 samples differ: 1 epoch not reported yet (8 samples); 1 epoch not credited "
        "(8 samples). The other 1 epoch matches."
    )
    never = compare("p", rows((0, 8)), credited({}, None))
    assert never.differences == [CreditDifference(0, 8, 0, NOT_REPORTED)]
    assert never.summary.endswith("Check again in a minute.")


def test_in_a_project_that_checks_work_an_uncredited_epoch_may_be_held() -> None:
    """The backbone holds a claim until a check of its peer passes (a newcomer's first, one that
    could not reach it) and tells nobody: where the project checks work, "not credited" says
    that it may still come, beside the other causes."""
    answer = credited({1: 8}, 2)
    check = compare("p", rows((1, 8), (2, 8), (3, 8)), answer, checked=True)
    assert check.differences == [
        CreditDifference(2, 8, 0, HELD),
        CreditDifference(3, 8, 0, NOT_REPORTED),
    ]
    assert "1 epoch not credited yet (8 samples)" in check.summary
    assert "may still come" in HELD
    unchecked = compare("p", rows((1, 8), (2, 8)), answer)
    assert unchecked.differences == [CreditDifference(2, 8, 0, NOT_CREDITED)]


def test_an_epoch_the_checks_cut_says_why() -> None:
    answer = credited({1: 8, 2: 2}, 2)
    answer.notes[2] = (8, "cut to the weight its round carried (2 samples; the record claimed 8)")
    check = compare("p", rows((1, 8), (2, 8)), answer)
    [difference] = check.differences
    assert (difference.epoch, difference.local, difference.credited) == (2, 8, 2)
    assert difference.reason.startswith(CHECKED)
    assert "8 samples claimed" in difference.reason
    assert "the weight its round carried" in difference.reason
    assert "1 epoch cut by the work checks (6 samples)" in check.summary
