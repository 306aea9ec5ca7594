"""Columns: how the groups of one round become one average (a two-level all-reduce).

A round with more members than a group holds forms several groups. Their vectors are cut into the
same equal slots (``RoundPlan.slots``), and in each group one member reduces each slot. Before a
reducer sends a slot's mean back to its group, it averages it with the reducers of the same slot
in the other groups (the slot's *column*), each group weighted by the samples it averaged over,
and sends back the column's mean instead. So every member of every group takes the same mean of
everyone's work: one model, not one per group.

What a member uploads stays what it uploads in one group, plus a little: its data to the group's
reducers (``(g - 1) / g`` of a contribution in a group of ``g``), the means of its slots back to
them (``g - 1`` times a slot's mean: about one contribution's worth), and in the column a slot's
mean out and back (two slots' worth, ``2 / g`` of a mean). Nothing grows with the number of groups
but the column's matchmaking, which waits for the groups the caller expects.

A column that does not form (no other group came) leaves the group's own mean, which is then the
round's; a chunk the column did not average (its reducer there failed) goes back averaged over
nothing, so that every group's members keep their own values there and send them again later,
rather than land means that differ from group to group. A group the column left out (it was late,
or screened out) lands the others' mean and its members keep all of their data for a later round.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from core.codecs import Codec
from core.codecs.arrays import F32

if TYPE_CHECKING:
    from core.averaging.result import AveragingResult

Combine = Callable[[int, list[F32], float, Codec], Awaitable["AveragingResult | None"]]
"""Average one slot's chunks (``list[F32]``, in place) over the slot's column, weighted by the
group's samples, in the given codec: the column's result, or None when no column formed."""


MAX_SLOTS = 256
"""A leader's slot count beyond this is refused (a group is at most a few dozen members)."""


@dataclass(frozen=True)
class ColumnRequest:
    """What a caller says of a round that may form several groups (``Averager.average``)."""

    key: str
    """The round's own key, the same in every group (a group may meet under a key of its own)."""
    slots: int
    """Equal slots a group deals the vector in (the configured group size: one slot a member
    in a full group); the same for every member of the round."""
    groups: int
    """How many groups the caller expects in the round: with more than one, a group's leader
    deals slots, and each slot's column waits for that many reducers."""
    timeout: float
    """How long a column's matchmaking may take (at most)."""
    until: float | None = None
    """The event loop's time (``loop.time()``) by which the column must have formed, when the
    caller's rounds give every member one deadline (None: ``timeout`` from when its slot is
    ready)."""
    rank: int | None = None
    """Our group's place in the round's plan, when the caller planned the groups: each column
    gathers at the reducer of the first planned group (``Matchmaker.form_group``); None: at
    whichever reducer came first."""


@dataclass(frozen=True)
class Columns:
    """A round of several groups, as one member's transfer sees it."""

    slots: int
    """Equal slots the vector is cut into, the same in every group."""
    combine: Combine
    seconds: float
    """How much longer than a reducer's own work a member may wait for a slot's first mean."""


@dataclass
class ColumnChunk:
    """One chunk's fate in its column."""

    landed: bool
    """The column averaged it (False: nobody's mean, the chunk lands nowhere)."""
    ours: bool
    """Our group's values are in that mean."""


@dataclass
class ColumnOutcome:
    chunks: list[ColumnChunk] = field(default_factory=list)
    weight: float = 0.0
    """The weight the column averaged over (every group's samples)."""
    formed: bool = True
    """False: no other group met us, and the group's own mean stands."""


def column_outcome(
    result: AveragingResult | None, counts: list[int], weight: float
) -> ColumnOutcome:
    """What the column's ``result`` did to each chunk of a slot (chunks of ``counts`` values, in
    order); ``weight``: the group's own, which stands when no column formed."""
    if result is None or len(result.members) < 2:
        return ColumnOutcome([ColumnChunk(True, True) for _ in counts], weight, formed=False)
    outcome = ColumnOutcome(weight=result.group_weight)
    start = 0
    for count in counts:
        end = start + count
        landed = not _overlaps(result.missing, start, end)
        ours = landed and not _overlaps(result.left_out, start, end)
        outcome.chunks.append(ColumnChunk(landed, ours))
        start = end
    return outcome


def _overlaps(ranges: list[tuple[int, int]], start: int, end: int) -> bool:
    return any(lo < end and start < hi for lo, hi in ranges)
