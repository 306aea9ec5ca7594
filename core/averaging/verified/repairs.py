"""Putting back what a reducer we caught lying sent us, once the transfer is over.

Each chunk of a distrusted part gets the aggregate we recomputed from its committed inputs, or our
own input (the chunk then counts as not averaged, as when its reducer fails); the round's result
names the liar among the failed reducers and says what became of its part.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.averaging.round.transfer import Transfer
from core.codecs.arrays import F32


@dataclass(frozen=True)
class Repair:
    """What to put in place of one chunk a lying reducer sent."""

    part: int
    chunk: int
    values: F32 | None
    """The recomputed aggregate, or our own input; None when we sent none (nothing to go back to)."""
    averaged: bool
    """Whether ``values`` is an aggregate of the group's inputs (else the chunk was not averaged)."""


def put_back(transfer: Transfer, repairs: Sequence[Repair], distrusted: Sequence[int]) -> None:
    """Apply ``repairs`` to the transfer's tensors and result; ``distrusted``: the liars' parts."""
    plan, result = transfer.plan, transfer.result
    kept: dict[int, int] = {}
    stuck: dict[int, int] = {}
    for repair in repairs:
        span = plan.spans[repair.part][repair.chunk]
        if repair.values is None:
            stuck[repair.part] = stuck.get(repair.part, 0) + span.count
        elif transfer.overwrite(span, repair.values, averaged=repair.averaged):
            kept[repair.part] = kept.get(repair.part, 0) + span.count
    for part in distrusted:
        peer = plan.members[part].peer
        if peer not in result.failed_reducers:
            result.failed_reducers.append(peer)
        said = f"part {part} (reducer {peer.short()}): caught lying, its values were not used"
        if kept.get(part):
            said += f"; {kept[part]} values kept our own"
        if stuck.get(part):
            said += f"; {stuck[part]} values stay as it sent them (we had no input to go back to)"
        result.errors.append(said)
