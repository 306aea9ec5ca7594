"""Credit by record: every landed epoch of every peer credited once, whatever the pace of the
backbone's readings; late finds reported as late; a gone peer credited from its round's weights,
a live one never (pure: records and a fake clock, no swarm)."""

from __future__ import annotations

from typing import Any

import pytest

from core.net import Identity
from core.training.credit.book import GONE_AFTER, CreditBook
from core.training.credit.checks.standing import Standings
from core.training.credit.metrics import EpochMetrics, MetricsAggregator, PeerContribution
from core.training.progress import RECENT, HeldOut, Landed, LandedLog, PeerProgress
from core.trust.passes import issue_pass
from core.trust.reports import Contribution, EpochReport

BATCH = 32


def record(
    peer: str, landed: list[int], *, samples: int = BATCH, time: float = 0.0
) -> PeerProgress:
    """A trainer's record after it landed the ``landed`` epochs, ``samples`` each."""
    last = landed[-1] if landed else -1
    return PeerProgress(
        peer, last + 1, 0, 16.0, time, "trainer",
        last_epoch=last, last_loss_sum=2.0, last_mini_steps=1, last_samples=samples,
        landed=tuple(Landed(e, samples) for e in landed),
    )  # fmt: skip


def credited(metrics: list[EpochMetrics]) -> dict[str, int]:
    total: dict[str, int] = {}
    for m in metrics:
        for part in m.contributions:
            total[part.peer] = total.get(part.peer, 0) + part.samples
    return total


def test_two_epochs_between_two_readings_are_both_credited() -> None:
    # bob lands epochs 0 to 4; the backbone reads his record after epoch 0, then not again until
    # he has landed 1, 2, 3 and 4: every one of them is credited, each once
    aggregator = MetricsAggregator(grace=0.0)
    reported = aggregator.observe([record("alice", [0]), record("bob", [0])], 1.0)
    reported += aggregator.observe([record("alice", [0, 1]), record("bob", [0, 1, 2, 3, 4])], 2.0)
    reported += aggregator.observe(
        [record("alice", [0, 1, 2, 3, 4]), record("bob", [0, 1, 2, 3, 4])], 3.0
    )
    reported += aggregator.late_credit(3.0)
    assert credited(reported) == {"alice": 5 * BATCH, "bob": 5 * BATCH}
    # epochs 2 and 3 were never anyone's last finished epoch, and are still epochs of their own
    assert sorted({m.epoch for m in reported if not m.late}) == [0, 1, 2, 3, 4]
    assert aggregator.observe([record("bob", [0, 1, 2, 3, 4])], 4.0) == []
    assert aggregator.late_credit(4.0) == []


def test_a_record_read_after_its_epoch_went_out_is_late_credit_with_no_figures() -> None:
    aggregator = MetricsAggregator(grace=0.0)
    (first,) = aggregator.observe([record("alice", [0]), record("bob", [])], 1.0)
    assert credited([first]) == {"alice": BATCH}
    assert aggregator.observe([record("alice", [0]), record("bob", [0])], 2.0) == []
    (late,) = aggregator.late_credit(2.0)
    assert (late.epoch, late.late, late.samples, credited([late])) == (
        0,
        True,
        BATCH,
        {"bob": BATCH},
    )
    body = late.contribution_report()
    assert body["late"] is True
    assert not {"loss", "samples_per_second", "alive_peers"} & set(body)
    assert "late" not in first.contribution_report()
    assert aggregator.late_credit(3.0) == []
    assert aggregator.late_shares == 1


def finished(peer: str, last: int, landed: list[int], samples: int = BATCH) -> PeerProgress:
    """A trainer's record that finished epoch ``last`` and landed only ``landed``."""
    return PeerProgress(
        peer, last + 1, 0, 16.0, 0.0, "trainer",
        last_epoch=last, last_loss_sum=2.0, last_mini_steps=1, last_samples=samples,
        landed=tuple(Landed(e, samples) for e in landed),
    )  # fmt: skip


def test_an_epoch_finished_but_not_landed_waits_for_its_round_before_it_is_reported() -> None:
    # the round of epoch 3 formed no group: alice finished it and carries her samples to the next
    # try at epoch 3; its line goes out when that try lands, with her samples, and never before
    aggregator = MetricsAggregator(grace=1.0)
    assert aggregator.observe([finished("alice", 2, [2])], 1.0) == []
    (two,) = aggregator.observe([finished("alice", 3, [2])], 10.0)
    assert two.epoch == 2
    assert aggregator.observe([finished("alice", 3, [2])], 60.0) == []
    assert aggregator.observe([finished("alice", 3, [2, 3], 2 * BATCH)], 70.0) == []  # the grace
    (three,) = aggregator.observe([finished("alice", 3, [2, 3], 2 * BATCH)], 71.0)
    assert (three.epoch, three.samples, three.late) == (3, 2 * BATCH, False)
    assert aggregator.late_credit(72.0) == []


def test_an_epoch_no_one_landed_is_reported_once_the_trainers_are_past_it() -> None:
    aggregator = MetricsAggregator(grace=1.0)
    assert aggregator.observe([finished("alice", 3, [])], 1.0) == []
    assert aggregator.observe([finished("alice", 3, [])], 30.0) == []
    reported = aggregator.observe([finished("alice", 4, [4])], 31.0)
    assert [(m.epoch, m.samples) for m in reported] == [(3, 0)]
    assert [(m.epoch, m.samples) for m in aggregator.observe([], 32.0)] == [(4, BATCH)]


def test_a_restarted_backbone_credits_what_records_list_but_reports_only_the_newest_epoch() -> None:
    aggregator = MetricsAggregator(grace=0.0)
    done = aggregator.observe([record("alice", [3, 4, 5, 6])], 1.0)
    assert [m.epoch for m in done] == [6]
    late = aggregator.late_credit(1.0)
    assert [(m.epoch, m.late) for m in late] == [(3, True), (4, True), (5, True)]


def test_a_gone_peer_is_credited_from_its_rounds_weights_after_its_record_expired() -> None:
    aggregator = MetricsAggregator(grace=0.0)
    aggregator.observe([record("alice", [0]), record("bob", [0])], 0.0)
    # epoch 1's round averaged both; bob was killed before his record said it landed
    aggregator.witness(1, {"alice": 32.0, "bob": 48.0}, 10.0)
    reported = aggregator.observe([record("alice", [0, 1]), record("bob", [0], time=5.0)], 11.0)
    assert credited(reported) == {"alice": BATCH}
    assert aggregator.late_credit(11.0) == []  # bob's record is still fresh: he may yet say so
    assert aggregator.late_credit(10.0 + GONE_AFTER) == []  # not observed since: nothing settles
    aggregator.observe([record("alice", [0, 1])], 10.0 + GONE_AFTER)
    (late,) = aggregator.late_credit(10.0 + GONE_AFTER)
    assert (late.epoch, credited([late])) == (1, {"bob": 48})
    assert aggregator.credit.witnessed_shares == 1
    aggregator.observe([record("alice", [0, 1])], 100.0)
    assert aggregator.late_credit(100.0) == []


def test_a_live_peers_own_record_is_the_authority_over_a_round_it_did_not_land() -> None:
    # a diloco member that saw its round incomplete carries its samples to the next round and
    # claims them there: the backbone's view of the round must not credit them a second time
    aggregator = MetricsAggregator(grace=0.0)
    reported = aggregator.observe([record("alice", [0]), record("bob", [0])], 0.0)
    aggregator.witness(1, {"alice": 32.0, "bob": 32.0}, 1.0)
    for now in (2.0, 1.0 + GONE_AFTER, 100.0):
        bob = record("bob", [0], time=now)
        reported += aggregator.observe([record("alice", [0, 1]), bob], now)
        reported += aggregator.late_credit(now)
    carried = PeerProgress("bob", 3, 0, 16.0, 101.0, "trainer", last_epoch=2,
                           landed=(Landed(0, 32), Landed(2, 64)))  # fmt: skip
    reported += aggregator.observe([record("alice", [0, 1, 2]), carried], 101.0)
    reported += aggregator.late_credit(101.0)
    assert credited(reported) == {"alice": 3 * BATCH, "bob": 32 + 64}
    assert aggregator.credit.witnessed_shares == 0


def test_a_witnessed_share_already_claimed_is_not_credited_again() -> None:
    book = CreditBook()
    book.claim("bob", [Landed(3, 32)], None, 16.0)
    assert [s.samples for s in book.take(3)] == [32]
    book.witness(3, {"bob": 32.0}, 0.0)
    book.settle_witnesses([], GONE_AFTER + 1)
    assert book.late(3) == {}


def test_an_older_release_record_is_credited_for_its_last_finished_epoch() -> None:
    old = PeerProgress("old", 4, 0, 16.0, 0.0, "trainer", last_epoch=3, last_samples=24)
    aggregator = MetricsAggregator(grace=0.0)
    assert credited(aggregator.observe([old], 1.0)) == {"old": 24}


def test_the_landed_log_keeps_the_recent_epochs_and_one_entry_per_epoch() -> None:
    log = LandedLog()
    for epoch in range(RECENT + 5):
        log.add(epoch, epoch + 1)
    assert [item.epoch for item in log.items()] == list(range(5, RECENT + 5))
    log.add(7, 99)  # landed again after a rollback numbered epochs anew
    assert log.items()[-1] == Landed(7, 99)
    assert len(log.items()) == RECENT


def test_where_a_replayable_round_began_travels_in_the_record_and_reaches_the_support() -> None:
    log = LandedLog()
    log.add(1, 32, "0123456789abcdef" * 4)  # a whole digest is cut to what records carry
    log.add(2, 32)  # a round no replay can judge
    with pytest.raises(ValueError, match="digest"):
        log.add(3, 32, "not a digest")
    wire = record("a", [1]).to_wire()
    wire[-1] = [item.to_wire() for item in log.items()]
    read = PeerProgress.from_wire("a", wire)
    assert read is not None
    assert read.landed == (Landed(1, 32, "0123456789abcdef"), Landed(2, 32))
    seen: list[tuple[int, str | None]] = []

    class Support:
        def supported(
            self, peer: str, epoch: int, samples: int, now: float, began: str | None = None
        ) -> int | None:
            seen.append((epoch, began))
            return samples

        def why(self, peer: str, epoch: int) -> str:
            return ""

    book = CreditBook(Support())
    book.claim("a", read.landed, None, 1.0)
    assert [s.samples for e in (1, 2) for s in book.take(e)] == [32, 32]
    assert seen == [(1, "0123456789abcdef"), (2, None)]


@pytest.mark.parametrize(
    "progress",
    [
        record("a", [1, 2, 3]),
        record("a", []),
        PeerProgress(
            "a", 3, 0, 0.0, 0.0, "backbone", landed=(), held_out=HeldOut(2, 3.5, 0.25, 64)
        ),
        PeerProgress("a", 3, 0, 0.0, 0.0, "backbone", landed=()),
    ],
)
def test_landed_epochs_travel_in_the_record(progress: PeerProgress) -> None:
    assert PeerProgress.from_wire("a", progress.to_wire()) == progress


@pytest.mark.parametrize(
    "landed",
    [
        "many",
        [[1, 32]] * 2,  # an epoch twice
        [[1]],
        [[1, -5]],
        [[-1, 5]],
        [[1, 2**53]],
        [[1.0, 32]],
        [[True, 32]],
        [[e, 1] for e in range(RECENT + 1)],
        [[1, 32, "abc"]],  # where a round began: 16 hexadecimal characters
        [[1, 32, "0123456789ABCDEF"]],
        [[1, 32, 5]],
        [[1, 32, "0" * 16, 1]],
    ],
)
def test_malformed_landed_epochs_make_the_record_malformed(landed: Any) -> None:
    wire = record("a", [1]).to_wire()
    wire[-1] = landed
    assert PeerProgress.from_wire("a", wire) is None


def test_a_cut_share_goes_to_the_coordinator_with_its_claim_and_why() -> None:
    peer = Identity.generate()
    access = issue_pass(Identity.generate(), "p", "alice", peer.peer_id, issued=0.0, lifetime=60)
    cut = PeerContribution(str(peer.peer_id), 25, 1.0, access, 100, "cut to the weight it sent")
    whole = PeerContribution(str(peer.peer_id), 100, 1.0, access)
    for part, claimed, note in ((cut, 100, "cut to the weight it sent"), (whole, None, "")):
        metrics = EpochMetrics(3, None, part.samples, 1.0, 1, 10.0, (part,))
        body = metrics.contribution_report()
        assert ("claimed" in body["contributions"][0]) == (claimed is not None)
        [read] = EpochReport.from_json(body, now=20.0).contributions
        assert isinstance(read, Contribution)
        assert (read.samples, read.claimed, read.note) == (part.samples, claimed, note)


def test_a_withdrawn_share_goes_to_the_coordinator_with_why_though_it_was_paid_as_claimed() -> None:
    """What was claimed travels with the reason, as for a cut share: a coordinator of any
    release reads the entry (one that refuses a note without a claim too)."""
    peer = Identity.generate()
    access = issue_pass(Identity.generate(), "p", "alice", peer.peer_id, issued=0.0, lifetime=60)
    standings = Standings(1.0)
    book = MetricsAggregator(grace=0.0, support=standings).credit
    standings.passed(str(peer.peer_id), 0)
    book.claim(str(peer.peer_id), [Landed(1, 64)], access, 1.0)
    [paid] = book.take(1, now=1.0)
    assert (paid.samples, paid.claimed, paid.note) == (64, None, "")
    standings.failed(str(peer.peer_id))
    [(after, share)] = [(a, s) for p, a in standings.withdrawals().items()
                        for s in book.withdraw(p, a).values()]  # fmt: skip
    assert after == 0
    why = "a work check caught this peer faking work"
    assert (share.samples, share.claimed, share.note) == (64, 64, why)
    part = PeerContribution(share.peer, 64, 1.0, access, share.claimed, share.note)
    body = EpochMetrics(1, None, 64, 0.0, 0, 10.0, (part,), withdrawn=True).contribution_report()
    [read] = EpochReport.from_json(body, now=20.0).contributions
    assert isinstance(read, Contribution)
    assert (read.samples, read.claimed, read.note) == (64, 64, why)
