"""The rule that deals a round's members into groups: as many groups as the size asks, never more
than members able to lead, balanced, each with a leader, the same for everyone who sees the same
members, drawn anew each round, with the members able to lead ranked within each group."""

from __future__ import annotations

import pytest

from core.training.diloco.groups import Member, bucket_key, plan_groups


def members(trainers: int, clients: int = 0) -> list[Member]:
    return [Member(f"t{i}", True) for i in range(trainers)] + [
        Member(f"c{i}", False) for i in range(clients)
    ]


@pytest.mark.parametrize(
    ("trainers", "clients", "size", "count", "sizes"),
    [
        (5, 0, None, 1, [5]),  # no group size: one group
        (5, 0, 16, 1, [5]),
        (16, 0, 16, 1, [16]),
        (17, 0, 16, 2, [8, 9]),
        (65, 0, 16, 5, [13, 13, 13, 13, 13]),  # 64 trainers and the backbone
        (6, 0, 2, 3, [2, 2, 2]),  # five volunteers and the backbone in groups of two
        (3, 3, 2, 3, [2, 2, 2]),  # a client in each group, with someone to lead it
        (1, 5, 2, 1, [6]),  # one member able to lead: one group, larger than asked
        (2, 6, 2, 2, [4, 4]),
    ],
)
def test_groups_are_balanced_and_each_has_a_leader(
    trainers: int, clients: int, size: int | None, count: int, sizes: list[int]
) -> None:
    everyone = members(trainers, clients)
    groups = plan_groups(everyone, 7, size)
    assert groups.count == count
    assert sorted(groups.sizes) == sorted(sizes)
    assert set(groups.of) == {m.peer for m in everyone}
    for group in range(count):
        assert any(m.leads for m in everyone if groups.of[m.peer] == group)
    for member in everyone:
        assert groups.size_of(member.peer) == groups.sizes[groups.of[member.peer]]
    # those able to lead are ranked within their group from 0 (its leader) on; clients are not
    assert set(groups.ranks) == {m.peer for m in everyone if m.leads}
    for group in range(count):
        ranks = sorted(r for peer, r in groups.ranks.items() if groups.of[peer] == group)
        assert ranks == list(range(len(ranks)))


def test_everyone_who_sees_the_same_members_deals_them_alike_and_anew_each_round() -> None:
    everyone = members(40)
    one = plan_groups(everyone, 3, 16)
    assert plan_groups(list(reversed(everyone)), 3, 16) == one  # the order read does not matter
    assert plan_groups(everyone + everyone[:5], 3, 16) == one  # nor a record read twice
    assert plan_groups(everyone, 4, 16).of != one.of  # the next round mixes the groups


def test_the_key_of_a_group() -> None:
    single = plan_groups(members(3), 0, 16)
    assert bucket_key("diloco.0", single, "t1") == "diloco.0"
    several = plan_groups(members(20), 0, 16)
    keys = {bucket_key("diloco.0", several, f"t{i}") for i in range(20)}
    assert keys == {"diloco.0.g2.0", "diloco.0.g2.1"}


@pytest.mark.parametrize(("trainers", "clients"), [(64, 0), (40, 24), (20, 3)])
def test_a_view_one_member_short_moves_at_most_one_member_a_group(
    trainers: int, clients: int
) -> None:
    """Members read records a moment apart: one that misses a member (or sees one more) must
    still agree with the others about nearly everyone's group, or the round falls apart."""
    everyone = members(trainers, clients)
    full = plan_groups(everyone, 11, 16)
    for missing in everyone:
        short = plan_groups([m for m in everyone if m != missing], 11, 16)
        if short.count != full.count:
            continue  # another number of groups: other keys altogether (a rare boundary)
        moved = [p for p, group in short.of.items() if group != full.of[p]]
        assert len(moved) <= full.count, (missing.peer, moved)
