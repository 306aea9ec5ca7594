"""Landed: the epochs (diloco: rounds) whose work a peer saw land, as its progress record lists them.

A record carries the samples of its peer's last ``RECENT`` landed epochs, so that a reader that
misses up to ``RECENT - 1`` records still finds every one of them (the credit book,
``core.training.credit.book``, credits each once). ``LandedLog`` is the peer's own side: what it
keeps for its record.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from core.util.errors import WireFormatError

RECENT = 16
"""Landed epochs a record carries: a reader may miss 15 of a peer's records in a row and still
credit every epoch (records are read every second or so; epochs take tens of seconds or more)."""
MAX_SAMPLES = 2**53
"""The coordinator's bound on a sample count (JSON's exact integers)."""


@dataclass(frozen=True, slots=True)
class Landed:
    """One epoch (diloco: round) whose work this peer saw land, and the samples it brought."""

    epoch: int
    samples: int

    def to_wire(self) -> list[int]:
        return [self.epoch, self.samples]


def landed_to_wire(landed: Iterable[Landed]) -> list[list[int]]:
    return [item.to_wire() for item in landed]


def landed_from_wire(value: Any) -> tuple[Landed, ...]:
    """Raise ``WireFormatError`` unless ``value`` is at most ``RECENT`` pairs [epoch, samples] of
    whole numbers, epochs distinct, samples below ``MAX_SAMPLES``."""
    if not isinstance(value, list) or len(value) > RECENT:
        raise WireFormatError(f"landed epochs are a list of at most {RECENT}")
    found: list[Landed] = []
    for item in value:
        if not isinstance(item, list) or len(item) != 2:
            raise WireFormatError("a landed epoch is [epoch, samples]")
        epoch, samples = item
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (epoch, samples)):
            raise WireFormatError("a landed epoch counts with whole numbers")
        if epoch < 0 or not 0 <= samples < MAX_SAMPLES:
            raise WireFormatError("a landed epoch's numbers are out of range")
        found.append(Landed(epoch, samples))
    if len({item.epoch for item in found}) != len(found):
        raise WireFormatError("an epoch is listed twice among the landed ones")
    return tuple(found)


class LandedLog:
    """What a peer keeps of its own landed epochs, for its record: the last ``RECENT``."""

    def __init__(self) -> None:
        self._items: OrderedDict[int, Landed] = OrderedDict()

    def add(self, epoch: int, samples: int) -> None:
        """The work of ``epoch`` landed with ``samples``. An epoch landed again (after a rollback
        numbered epochs anew) replaces the old entry; readers credit it once anyway."""
        self._items.pop(epoch, None)
        self._items[epoch] = Landed(epoch, samples)
        while len(self._items) > RECENT:
            self._items.popitem(last=False)

    def items(self) -> tuple[Landed, ...]:
        return tuple(self._items.values())
