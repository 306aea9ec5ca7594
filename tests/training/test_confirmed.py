"""What counts as confirmed: the confirming key's word, a quorum of the members of its last rounds
by the weight it listed, and never what fresh identities' records say (``progress.confirmed``)."""

from __future__ import annotations

from typing import cast

import pytest

from core.config.roles import BACKBONE
from core.dht import DHTNode
from core.training.progress import LEFT, PeerProgress, ProgressBoard
from core.training.progress.confirmed import (
    MAX_MEMBERS,
    MISSED,
    NOTHING,
    Confirmation,
    Listing,
    Strikes,
    by_records,
    confirm,
    member_tag,
    members_of,
)
from core.util.errors import WireFormatError

A, B, C, D, X, Y = "peer-a", "peer-b", "peer-c", "peer-d", "sybil-x", "sybil-y"
LISTED = members_of({A: 100.0, B: 100.0, C: 100.0, D: 1.0})
"""The round the backbone last confirmed: three members of weight 100, one of weight 1."""
AT_5 = Confirmation(5, "d5", 1.0, LISTED)


def record(peer: str, epoch: int, anchor: str = "", role: str = "trainer") -> PeerProgress:
    return PeerProgress(peer, epoch, 10, 1.0, 2.0, role, anchor=anchor)


@pytest.mark.parametrize(
    ("records", "epoch", "digest", "by"),
    [
        ([], 5, "d5", "backbone"),
        # fresh identities announcing anything confirm nothing, however many
        ([record(f"sybil-{i}", 9, "evil") for i in range(50)], 5, "d5", "backbone"),
        # members carrying more than half of the listed weight confirm the next epoch
        ([record(A, 6, "d6"), record(B, 6, "d6")], 6, "d6", "members"),
        # ... and the furthest such one
        ([record(A, 8, "d8"), record(B, 8, "d8"), record(C, 7, "d7")], 8, "d8", "members"),
        # exactly half is not more than half
        ([record(A, 6, "d6"), record(B, 6, "other")], 5, "d5", "backbone"),
        # a light member and identities do not make a quorum
        ([record(A, 6, "d6"), record(D, 6, "d6"), record(X, 6, "d6")], 5, "d5", "backbone"),
        # members that left count for nothing
        ([record(A, 6, "d6"), record(B, 6, "d6", role=LEFT)], 5, "d5", "backbone"),
        # older epochs never take a confirmation back
        ([record(A, 3, "d3"), record(B, 3, "d3"), record(C, 3, "d3")], 5, "d5", "backbone"),
    ],
)
def test_what_is_confirmed(records: list[PeerProgress], epoch: int, digest: str, by: str) -> None:
    found = confirm(AT_5, records)
    assert (found.epoch, found.digest, found.by) == (epoch, digest, by)
    assert found.members == {member_tag(p) for p in (A, B, C, D)}
    assert found.digest_at(epoch) == digest
    assert found.digest_at(epoch + 1) is None


def test_without_a_confirmation_nothing_is_confirmed() -> None:
    assert confirm(None, [record(A, 4, "d4")]) == NOTHING
    assert NOTHING.digest_at(-1) is None
    # a confirmation that lists nobody: only its own word
    assert confirm(Confirmation(2, "d2", 1.0), [record(A, 3, "d3")]).epoch == 2


@pytest.mark.parametrize(
    ("epochs", "confirmed"),
    [([], -1), ([4], 4), ([5, 4], 5), ([5, 4, 4], 4), ([9, 5, 5, 4], 5), ([9, 9, 4, 4], 9)],
)
def test_a_project_without_a_confirming_key_follows_half_of_the_records(
    epochs: list[int], confirmed: int
) -> None:
    records = [record(f"p{i}", e) for i, e in enumerate(epochs)]
    records.append(record("gone", 99, role=LEFT))
    found = by_records(records)
    assert (found.epoch, found.by) == (confirmed, "records" if epochs else "nobody")


def moved(peer: str, epoch: int, role: str = "trainer") -> PeerProgress:
    """A record of a peer whose state the collaboration moved (it finished an epoch)."""
    return PeerProgress(peer, epoch, 10, 1.0, 2.0, role, last_epoch=epoch - 1)


@pytest.mark.parametrize(
    ("records", "confirmed"),
    [
        # a lone backbone after a spell with no trainer, and two newcomers at their initial
        # weights started together: the backbone's epoch, not the newcomers'
        ([record("bb", 7, role=BACKBONE), record("n1", 0), record("n2", 0)], 7),
        # so with trainers that finished an epoch there
        ([moved("t1", 7), record("n1", 0), record("n2", 0), record("n3", 0)], 7),
        # among the peers whose state moved, half of them still decide
        ([moved("t1", 9), moved("t2", 5), moved("t3", 5), record("n1", 0)], 5),
        ([record("bb", 7, role=BACKBONE), moved("t1", 8), moved("t2", 8), record("n1", 0)], 8),
        # nobody has moved yet (a new collaboration): everyone counts
        ([record("n1", 0), record("n2", 0), record("n3", 2)], 0),
        # a backbone that left counts no more than any record of a peer that left
        ([record("bb", 7, role=LEFT), record("n1", 0), record("n2", 0)], 0),
    ],
)
def test_newcomers_at_their_initial_weights_do_not_outvote_those_whose_state_moved(
    records: list[PeerProgress], confirmed: int
) -> None:
    assert by_records(records).epoch == confirmed


def test_a_confirmation_travels_and_bad_ones_are_refused() -> None:
    again = Confirmation.from_wire(AT_5.to_wire())
    assert again == AT_5
    assert again.order < Confirmation(6, "", 0.0).order < Confirmation(0, "", 0.0, rollback=1).order
    tag = member_tag(A)
    for bad in (
        [5, "d5", 1.0, []],  # four values
        [-1, "d5", 1.0, [], 0],
        [5, "x" * 65, 1.0, [], 0],
        [5, "d5", float("nan"), [], 0],
        [5, "d5", 1.0, [[tag, -1.0]], 0],
        [5, "d5", 1.0, [["short", 1.0]], 0],
        [5, "d5", 1.0, [[tag, 1.0], [tag, 2.0]], 0],
        [5, "d5", 1.0, [[tag, 1.0]] * (MAX_MEMBERS + 1), 0],
        [True, "d5", 1.0, [], 0],
    ):
        with pytest.raises(WireFormatError):
            Confirmation.from_wire(bad)


def test_members_are_listed_heaviest_first_without_the_weightless() -> None:
    listed = members_of({A: 3.0, B: 0.0, C: 7.0, D: float("inf")})
    assert listed == ((member_tag(C), 7.0), (member_tag(A), 3.0))
    many = members_of({f"p{i}": float(i + 1) for i in range(MAX_MEMBERS + 10)})
    assert len(many) == MAX_MEMBERS
    assert min(w for _, w in many) == 11.0


def tags(*weighted: tuple[str, float]) -> set[tuple[str, float]]:
    return {(member_tag(peer), weight) for peer, weight in weighted}


@pytest.mark.parametrize(
    ("rounds", "present", "listed"),
    [
        # one round: its members
        ([(0, {A: 10.0, B: 10.0})], {A, B}, tags((A, 10.0), (B, 10.0))),
        # the groups change: the members of the last rounds, each at its newest weight
        (
            [(0, {A: 10.0, B: 10.0}), (1, {C: 8.0}), (2, {A: 6.0})],
            {A, B, C},
            tags((A, 6.0), (B, 10.0), (C, 8.0)),
        ),
        # a member of no round of the last LISTED_ROUNDS (here 3) is dropped
        (
            [(0, {A: 10.0}), (1, {B: 10.0}), (2, {C: 10.0}), (3, {D: 10.0})],
            {A, B, C, D},
            tags((B, 10.0), (C, 10.0), (D, 10.0)),
        ),
        # one whose record is gone (it left) is dropped; the round's own senders are kept
        ([(0, {A: 10.0, B: 10.0}), (1, {C: 10.0})], {A}, tags((A, 10.0), (C, 10.0))),
        # the weightless and the non-finite are not members
        ([(0, {A: 0.0, B: float("nan"), C: 5.0})], {A, B, C}, tags((C, 5.0))),
        # after a rollback (a lower epoch lands), what was seen past it is of another history
        ([(4, {A: 10.0}), (5, {B: 10.0}), (2, {C: 10.0})], {A, B, C}, tags((C, 10.0))),
    ],
)
def test_a_confirmation_lists_the_members_of_the_backbones_last_rounds(
    rounds: list[tuple[int, dict[str, float]]], present: set[str], listed: set[tuple[str, float]]
) -> None:
    listing = Listing(rounds=3)
    found: tuple[tuple[str, float], ...] = ()
    for epoch, weights in rounds:
        found = listing.landed(epoch, weights, present)
    assert set(found) == listed
    with pytest.raises(ValueError, match="at least one round"):
        Listing(rounds=0)


def test_a_round_the_backbones_group_missed_is_confirmed_by_the_other_groups() -> None:
    """Groups of two: the backbone's group changes every round. Its last round (epoch 5) held
    A alone; the round of epoch 6 failed for the backbone and A, and B, C and D landed it. Listed
    from its last round only, nobody confirms epoch 6 (the backbone would not know it is behind,
    and would strike the three as they stay ahead); listed from its last rounds, they do."""
    listing = Listing()
    for epoch, weights in ((3, {B: 10.0, C: 10.0}), (4, {D: 10.0}), (5, {A: 10.0})):
        listed = listing.landed(epoch, weights, {A, B, C, D})
    ahead = [record(A, 6, "d6"), record(B, 7, "d7"), record(C, 7, "d7"), record(D, 7, "d7")]
    one_round = confirm(Confirmation(6, "d6", 1.0, members_of({A: 10.0})), ahead)
    assert (one_round.epoch, one_round.by) == (6, "backbone")
    found = confirm(Confirmation(6, "d6", 1.0, listed), ahead)
    assert (found.epoch, found.digest, found.by) == (7, "d7", "members")


def test_a_peer_ahead_of_the_confirmed_epoch_for_long_loses_its_standing() -> None:
    strikes = Strikes(limit=3, grace=10.0)
    confirmed = confirm(AT_5, [])
    ahead = [record(X, 6), record(Y, 9), record(A, 7), record(B, 5)]
    assert strikes.read(confirmed, ahead, now=0.0, away=True) == []
    assert strikes.read(confirmed, ahead, now=5.0, away=True) == []
    assert strikes.read(confirmed, ahead, now=9.0, away=True) == []  # within the grace
    # members run ahead while the backbone is away; peers at the confirmed epoch are fine
    assert strikes.read(confirmed, ahead, now=10.0, away=True) == [X, Y]
    assert strikes.read(confirmed, ahead, now=11.0, away=True) == []  # struck once
    assert strikes.struck == {X, Y}
    # with the backbone there, a member ahead of its word for that long is struck too
    assert strikes.read(confirmed, ahead, now=12.0, away=False) == []
    assert strikes.read(confirmed, ahead, now=13.0, away=False) == []
    assert strikes.read(confirmed, ahead, now=30.0, away=False) == [A]


def test_a_peer_that_falls_back_in_line_starts_over() -> None:
    strikes = Strikes(limit=2, grace=0.0)
    confirmed = confirm(AT_5, [])
    assert strikes.read(confirmed, [record(X, 6)], now=0.0, away=False) == []
    # an honest landing, confirmed
    assert strikes.read(confirmed, [record(X, 5)], now=1.0, away=False) == []
    assert strikes.read(confirmed, [record(X, 6)], now=2.0, away=False) == []
    assert strikes.read(confirmed, [record(X, 6)], now=3.0, away=False) == [X]
    # a read that misses a record (a lookup that timed out) neither counts nor breaks the run
    assert strikes.read(confirmed, [record(Y, 6)], now=4.0, away=False) == []
    assert strikes.read(confirmed, [], now=5.0, away=False) == []
    assert strikes.read(confirmed, [record(X, 5)], now=6.0, away=False) == []
    assert strikes.read(confirmed, [record(Y, 6)], now=7.0, away=False) == [Y]
    # ...for a while: a peer whose records stopped coming has left
    assert strikes.read(confirmed, [record(C, 6)], now=8.0, away=False) == []
    assert strikes.read(confirmed, [], now=8.0 + MISSED + 1.0, away=False) == []
    assert strikes.read(confirmed, [record(C, 6)], now=10.0 + MISSED, away=False) == []
    assert strikes.read(confirmed, [record(C, 6)], now=11.0 + MISSED, away=False) == [C]
    # where nothing anchors the epoch, nobody is struck
    nothing = by_records([])
    assert Strikes(limit=1, grace=0.0).read(nothing, [record(Y, 50)], now=0.0, away=True) == []


class _Node:
    """What a progress board reads of its DHT node before any call (``confirmed_claim`` makes
    none)."""

    peer_id = "me"

    class rules:  # the attribute a DHT node has
        @staticmethod
        def add_schema(schema: object) -> None:
            del schema


def test_the_confirmed_claim_is_the_typical_claim_of_the_listed_round() -> None:
    board = ProgressBoard(cast(DHTNode, _Node()), "collab", confirmers={"backbone"})
    assert board.confirmed_claim() is None  # nothing read: the round's claims alone
    board.confirmation = Confirmation(5, "d5", 1.0, ())
    assert board.confirmed_claim() is None  # a confirmation listing nobody bounds nothing
    board.confirmation = AT_5
    assert board.confirmed_claim() == 100.0  # three members of 100 and one of 1
