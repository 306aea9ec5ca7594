"""The pure rules of checked work: whether a recomputation matches a receipt, which epochs are
checked, and what of each claim is credited."""

from __future__ import annotations

import numpy as np
import pytest

from core.net.errors import (
    DeadlineExceededError,
    DialError,
    InvalidRequestError,
    PermissionDeniedError,
    RemoteInternalError,
    ResourceExhaustedError,
    UnavailableError,
    UnknownMethodError,
)
from core.training.credit.book import CreditBook
from core.training.credit.checks.fingerprint import to_bytes
from core.training.credit.checks.receipts import WorkReceipt
from core.training.credit.checks.standing import UNJUDGED, Standings
from core.training.credit.checks.tolerance import compare
from core.training.credit.checks.verdict import refused
from core.training.credit.metrics import MetricsAggregator
from core.training.progress import Landed

RNG = np.random.default_rng(0)
TRUE = RNG.normal(size=64) * 1e-2


def receipt(loss: float, fingerprint: np.ndarray) -> WorkReceipt:
    return WorkReceipt(8, bytes(32), loss, to_bytes(fingerprint), 0)


@pytest.mark.parametrize(
    ("precision", "loss", "fingerprint", "verdict"),
    [
        ("float32", 2.0, TRUE, None),
        ("float32", 2.0 + 1e-4, TRUE * (1 + 1e-3), None),  # rounding
        ("float32", 2.1, TRUE, "work_loss"),
        ("float32", 2.0, TRUE * 1.2, "work_gradient"),
        ("float32", 2.0, np.zeros(64), "work_gradient"),  # computed nothing
        ("float32", 2.0, -TRUE, "work_gradient"),
        ("bfloat16", 2.03, TRUE + RNG.normal(size=64) * 1e-3, None),  # half precision's rounding
        ("bfloat16", 2.0, TRUE + RNG.normal(size=64) * 1e-2, "work_gradient"),  # another batch
        ("float16", 2.0, TRUE * 0.85, None),
        ("float16", 2.0, TRUE * 0.7, "work_gradient"),
    ],
)
def test_a_recomputation_matches_its_receipt_within_the_precisions_tolerance(
    precision: str, loss: float, fingerprint: np.ndarray, verdict: str | None
) -> None:
    claimed = receipt(loss, fingerprint.astype(np.float32))
    compared = compare(
        claimed, np.frombuffer(claimed.fingerprint, "<f4").astype(float), 2.0, TRUE, precision
    )
    found = compared.mismatch
    assert (found.statistic if found else None) == verdict
    assert (compared.margin > 1) == (found is not None)
    if found is not None:
        assert found.value > 1


def test_untouched_parameters_match_when_both_sides_are_zero() -> None:
    zeros = np.zeros(64)
    assert compare(receipt(1.0, zeros), zeros, 1.0, zeros, "float32").mismatch is None


def test_a_newcomer_is_checked_until_a_check_passes_then_at_random() -> None:
    s = Standings(0.1)
    assert s.due("a", draw=0.99)  # a newcomer: always
    s.unjudged("a", 0)
    assert s.due("a", draw=0.99)  # still: nothing vouched for it yet
    s.passed("a", 1)
    assert not s.due("a", draw=0.99)
    assert s.due("a", draw=0.05)
    s.failed("a")
    assert not s.due("a", draw=0.0)  # caught: nothing more to check


def judge(s: Standings, events: list[tuple[str, int]]) -> None:
    """What checks of peer ``a`` found, in order, at an epoch: passed, failed, unreached, apart."""
    for kind, at in events:
        if kind == "passed":
            s.passed("a", at)
        elif kind == "failed":
            s.failed("a")
        elif kind == "unreached":
            s.unreached("a", at)
        else:
            s.unjudged("a", at)


@pytest.mark.parametrize(
    ("events", "epoch", "credit"),
    [
        ([], 3, None),  # a newcomer never checked: waits
        ([("passed", 5)], 3, 8),
        ([("passed", 5)], 9, 8),  # in good standing: as claimed
        ([("passed", 5), ("failed", 7)], 3, 0),  # caught: nothing from now on
        ([("failed", 1)], 9, 0),
        ([("unreached", 4)], 3, None),
        ([("unreached", 4)] * 10, 3, None),  # never reached: held, not paid
        ([("unreached", 4), ("passed", 4)], 3, 8),  # the same check, made again, passed: paid
        # another epoch's pass does not answer it: a member that hides from the checks of the
        # epochs it faked and passes the others is not paid for them
        ([("unreached", 4), ("passed", 5)], 3, None),
        ([("passed", 2), ("unreached", 4), ("passed", 5)], 9, None),
        ([("passed", 2), ("unreached", 4), ("passed", 5), ("passed", 4)], 9, 8),
        # trusted: paid on trust while its checks judge it, held once UNJUDGED in a row did not
        ([("passed", 5)] + [("apart", 6)] * (UNJUDGED - 1), 9, 8),
        ([("passed", 5)] + [("apart", 6)] * UNJUDGED, 9, None),
        ([("passed", 5)] + [("apart", 6)] * UNJUDGED + [("passed", 7)], 9, 8),
    ],
)
@pytest.mark.parametrize("waited", [0.0, 1e6])
def test_what_the_checks_support(
    events: list[tuple[str, int]], epoch: int, credit: int | None, waited: float
) -> None:
    """However long a claim has waited: a wait pays nothing (a fresh identity is free)."""
    s = Standings(0.1)
    assert s.supported("a", epoch, 8, 1000.0) is None  # a newcomer: the wait begins
    judge(s, events)
    assert s.supported("a", epoch, 8, 1000.0 + waited) == credit


def test_an_open_check_that_expires_takes_back_what_trust_paid_and_pays_nothing_up_to_now() -> None:
    s = Standings(0.1)
    judge(s, [("passed", 5), ("unreached", 8), ("unreached", 9)])
    assert s.open_checks() == [("a", 8), ("a", 9)]
    s.expired("a", 7, newest=10)  # not open: nothing happens
    assert s.withdrawals() == {}
    s.expired("a", 8, newest=10)
    assert s.withdrawals() == {"a": 5}  # paid on trust after epoch 5: taken back
    assert s.withdrawals() == {}
    assert s.open_checks() == []  # the withdrawal covers epoch 9's too
    # checked up to 5 (a claim of it still waiting is paid), nothing after it up to 10
    assert [s.supported("a", e, 8, 0.0) for e in (5, 6, 9, 10, 11)] == [None, 0, 0, 0, None]
    assert "could not reach it" in s.why("a", 9)
    assert s.why("a", 11) == ""
    s.passed("a", 12)  # starts over as a newcomer: paid from its next passed check
    assert [s.supported("a", e, 8, 0.0) for e in (5, 9, 11)] == [8, 0, 8]
    assert not s.of("a").caught  # nobody accused it
    judge(s, [("unreached", 13)])
    s.expired("a", 13, newest=15)
    assert s.withdrawals() == {"a": 12}  # each time


def test_what_an_expired_check_takes_back_says_why_and_is_not_paid_again() -> None:
    s = Standings(0.1)
    aggregator = MetricsAggregator(grace=0.0, support=s)
    book = aggregator.credit
    s.passed("a", 0)
    for epoch in range(1, 4):  # paid on trust
        book.claim("a", [Landed(epoch, 8)], None, 1.0)
        assert [x.peer for x in book.take(epoch, now=1.0)] == ["a"]
    s.unreached("a", 3)
    book.claim("a", [Landed(4, 8)], None, 1.0)
    assert book.take(4, now=1.0) == []  # a check of it is open: held
    s.expired("a", 3, newest=4)
    (peer, after), *rest = s.withdrawals().items()
    assert (peer, after, rest) == ("a", 0, [])
    taken = aggregator.withdraw(peer, after, now=2.0)
    assert [m.epoch for m in taken] == [1, 2, 3]
    assert all("could not reach it" in m.contributions[0].note for m in taken)
    assert book.late(4, now=3.0) == {}  # not paid, and not paid later
    assert book.withheld == 8
    s.passed("a", 6)
    book.claim("a", [Landed(2, 8), Landed(4, 8), Landed(5, 8)], None, 1.0)
    assert [(x.epoch, x.samples) for v in book.late(5, now=4.0).values() for x in v] == [(5, 8)]


def test_a_caught_peer_has_no_open_check_and_is_withdrawn_once() -> None:
    s = Standings(0.1)
    judge(s, [("passed", 1), ("unreached", 3), ("failed", 4)])
    assert s.open_checks() == []
    assert s.withdrawals() == {"a": 1}
    s.failed("a")
    assert s.withdrawals() == {}


def test_no_checks_credit_every_claim_as_made() -> None:
    assert Standings(0.0).supported("a", 3, 8, now=0.0) == 8
    assert not Standings(0.0).due("a", draw=0.0)


def test_the_credit_book_holds_a_share_until_a_check_and_releases_it_late() -> None:
    s = Standings(0.5)
    book = CreditBook(s)
    book.claim("a", [Landed(0, 8)], None, 1.0)
    book.claim("b", [Landed(0, 16)], None, 1.0)
    assert book.claimed("a", 0) == 8
    assert book.take(0, now=100.0) == []  # both wait
    s.passed("a", 0)
    s.failed("b")
    late = book.late(0, now=101.0)
    assert [(x.peer, x.samples) for x in late[0]] == [("a", 8)]
    assert book.withheld == 16
    assert book.credited("a", 0)
    assert book.credited("b", 0)
    assert book.late(0, now=102.0) == {}


def test_a_caught_peer_loses_the_credit_given_on_trust_since_its_last_passed_check() -> None:
    s = Standings(0.1)
    aggregator = MetricsAggregator(grace=0.0, support=s)
    book = aggregator.credit
    s.passed("a", 0)
    s.passed("b", 0)
    for epoch in range(5):  # both vouched for at epoch 0, then credited as claimed
        book.claim("a", [Landed(epoch, 8)], None, 1.0)
        book.claim("b", [Landed(epoch, 16)], None, 1.0)
        assert {x.peer for x in book.take(epoch, now=1.0)} == {"a", "b"}
    s.passed("b", 2)
    assert s.withdrawals() == {}  # nobody caught
    s.failed("b")  # its check of epoch 4
    s.failed("b")  # and of another: named once
    assert s.withdrawals() == {"b": 2}
    assert s.withdrawals() == {}
    taken = aggregator.withdraw("b", 2, now=5.0)
    assert [(m.epoch, m.samples, m.withdrawn, m.late) for m in taken] == [
        (3, 16, True, False),
        (4, 16, True, False),
    ]
    assert [part.peer for m in taken for part in m.contributions] == ["b", "b"]
    assert all(m.contribution_report()["withdrawn"] for m in taken)
    assert book.withdrawn == 32
    assert aggregator.withdraw("b", 2, now=6.0) == []  # taken once
    # the withdrawn epochs stay credited: a record listing them again gets nothing
    book.claim("b", [Landed(3, 16), Landed(5, 16)], None, 1.0)
    assert book.take(3, now=7.0) == []
    assert book.take(5, now=7.0) == []  # caught: nothing from now on
    assert book.withheld == 16


def test_a_held_newcomer_that_comes_back_and_passes_is_paid_by_the_credit_book() -> None:
    s = Standings(0.1)
    book = CreditBook(s)
    book.claim("a", [Landed(0, 8), Landed(1, 8)], None, 1.0)
    assert book.take(1, now=100.0) == []
    assert book.late(1, now=1e6) == {}  # gone a long time, unchecked: held
    assert book.withheld == 0  # held, not cut
    s.passed("a", 7)  # back under the same identity, and its round replayed
    late = book.late(1, now=1000.0)
    assert {e: [(x.peer, x.samples) for x in v] for e, v in late.items()} == {
        0: [("a", 8)],
        1: [("a", 8)],
    }


@pytest.mark.parametrize(
    ("error", "remote", "verdict"),
    [
        (UnknownMethodError, True, True),  # "no such method": it was reached, and refused
        (InvalidRequestError, True, True),
        (PermissionDeniedError, True, True),
        (RemoteInternalError, True, True),
        (UnavailableError, True, False),  # closing: asked again
        (ResourceExhaustedError, True, False),  # busy: asked again
        (DeadlineExceededError, False, False),  # a timeout
        (DialError, False, False),  # a dial that failed
        (UnknownMethodError, False, False),  # raised here, not by the member
    ],
)
def test_what_counts_as_refusing_a_check(error: type, remote: bool, verdict: bool) -> None:
    exc = error("x", remote=True) if remote else error("x")
    assert refused(exc) == verdict
