"""Which group of a round each member looks for: a pure rule over the progress records.

A round of more members than ``target_group_size`` forms several groups. Left to one matchmaking
key, the members that come first fill a group and the rest are refused by every member of it, one
after another, until their wait is over; members behind a router (clients, which nobody can dial)
cannot lead a group at all, and are left out whenever the members that can fill the groups first.
So each member works out the round's groups from the records it read: ``ceil(n / size)`` groups of
the ``n`` members (never more than there are members able to lead one), the members dealt out in
an order drawn afresh each round, in runs: those able to lead in one run per group, so that every
group has one, the others in runs too. Each then looks for its group under a key of its own
(``bucket_key``), and expects the group's size. The members able to lead a group are ranked in
the drawn order (``Groups.ranks``): the group gathers at its first (the matchmaking's rank), and
each slot's column at the reducer of the first group, so that nobody waits for whoever happened
to come first.

Members read records a moment apart, so they may see a member more or fewer. Because each group
is a run of the order, such a view moves only the members at the runs' ends (one a group at
most) into another group than the others think: they find a group of others who agree, or none
(their work then waits for the next round, and the records they read then agree again), and the
rest of the round forms as planned. The members of a round are everyone fresh at the round's
epoch or one behind it (a member one round behind catches up first, then joins this round).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Member:
    peer: str
    leads: bool
    """It can lead a group (others can dial it): not a client."""


@dataclass(frozen=True)
class Groups:
    count: int
    """Groups in the round."""
    of: dict[str, int]
    """Each member's group."""
    sizes: tuple[int, ...]
    ranks: dict[str, int]
    """Each member able to lead, its place among those of its group (0: the group's leader)."""

    def size_of(self, peer: str) -> int:
        return self.sizes[self.of[peer]]


def plan_groups(members: Sequence[Member], epoch: int, size: int | None) -> Groups:
    """The round's groups: ``size`` is the most members a group holds (None: one group)."""
    unique = {m.peer: m for m in members}
    everyone = sorted(unique.values(), key=lambda m: _draw(m.peer, epoch))
    leaders = [m for m in everyone if m.leads]
    others = [m for m in everyone if not m.leads]
    count = 1 if size is None else max(1, math.ceil(len(everyone) / size))
    count = max(1, min(count, len(leaders)))
    of: dict[str, int] = {}
    ranks: dict[str, int] = {}
    first: dict[int, int] = {}
    # in runs along the drawn order: a member more or fewer in a view moves only the members at
    # the runs' ends to another group (at most one a group), where dealing in turn would move
    # every member after it. The others' runs go the other way round, so that the groups the
    # leaders' remainder made larger get fewer of them
    for position, member in enumerate(leaders):
        group = position * count // len(leaders)
        ranks[member.peer] = position - first.setdefault(group, position)
        of[member.peer] = group
    for position, member in enumerate(others):
        of[member.peer] = count - 1 - position * count // len(others)
    sizes = tuple(sum(1 for g in of.values() if g == group) for group in range(count))
    return Groups(count, of, sizes, ranks)


def bucket_key(round_key: str, groups: Groups, peer: str) -> str:
    """The matchmaking key of ``peer``'s group (the round's own key when it is one group)."""
    if groups.count == 1:
        return round_key
    return f"{round_key}.g{groups.count}.{groups.of[peer]}"


def _draw(peer: str, epoch: int) -> bytes:
    """A member's place in the round's order: the same for everyone, different every round."""
    return hashlib.blake2b(f"{epoch}:{peer}".encode(), digest_size=8).digest()
