"""Landed: the epochs (diloco: rounds) whose work a peer saw land, as its progress record lists them.

A record carries the samples of its peer's last ``RECENT`` landed epochs, so that a reader that
misses up to ``RECENT - 1`` records still finds every one of them (the credit book,
``core.training.credit.book``, credits each once). ``LandedLog`` is the peer's own side: what it
keeps for its record.

Where diloco rounds are replayed, an entry also says where its round began (``began``): the first
``BEGAN_CHARS`` characters of the digest of the outer state it started from, for a round a checker
can replay from it, and nothing for one it cannot (``core.training.diloco.checks.credit``). The
member says so in every record, before any check is drawn: a round it labels replayable and
files as not is caught when checked, and a round it labels not replayable is paid only within an
allowance.
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
BEGAN_CHARS = 16
"""Hexadecimal characters of the outer state's digest an entry names (64 bits: a state is told
from another by them; nothing is proved by them, the checker compares them with its own)."""
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True, slots=True)
class Landed:
    """One epoch (diloco: round) whose work this peer saw land, and the samples it brought."""

    epoch: int
    samples: int
    began: str | None = None
    """Where a replayable round began (``BEGAN_CHARS`` of its outer state's digest); None: the
    round cannot be replayed, or its mode keeps no round receipts."""

    def to_wire(self) -> list[int | str]:
        if self.began is None:
            return [self.epoch, self.samples]
        return [self.epoch, self.samples, self.began]


def landed_to_wire(landed: Iterable[Landed]) -> list[list[int | str]]:
    return [item.to_wire() for item in landed]


def landed_from_wire(value: Any) -> tuple[Landed, ...]:
    """Raise ``WireFormatError`` unless ``value`` is at most ``RECENT`` entries [epoch, samples] or
    [epoch, samples, began] (whole numbers, epochs distinct, samples below ``MAX_SAMPLES``; began
    ``BEGAN_CHARS`` lowercase hexadecimal characters)."""
    if not isinstance(value, list) or len(value) > RECENT:
        raise WireFormatError(f"landed epochs are a list of at most {RECENT}")
    found: list[Landed] = []
    for item in value:
        if not isinstance(item, list) or len(item) not in (2, 3):
            raise WireFormatError("a landed epoch is [epoch, samples] or [epoch, samples, began]")
        epoch, samples = item[0], item[1]
        began = item[2] if len(item) == 3 else None
        if began is not None and not _is_began(began):
            raise WireFormatError(
                f"where a landed round began is {BEGAN_CHARS} lowercase hexadecimal characters"
            )
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (epoch, samples)):
            raise WireFormatError("a landed epoch counts with whole numbers")
        if epoch < 0 or not 0 <= samples < MAX_SAMPLES:
            raise WireFormatError("a landed epoch's numbers are out of range")
        found.append(Landed(epoch, samples, began))
    if len({item.epoch for item in found}) != len(found):
        raise WireFormatError("an epoch is listed twice among the landed ones")
    return tuple(found)


class LandedLog:
    """What a peer keeps of its own landed epochs, for its record: the last ``RECENT``."""

    def __init__(self) -> None:
        self._items: OrderedDict[int, Landed] = OrderedDict()

    def add(self, epoch: int, samples: int, began: str | None = None) -> None:
        """The work of ``epoch`` landed with ``samples`` (``began``: the digest of the outer state
        a replayable round began from, cut to ``BEGAN_CHARS``). An epoch landed again (after a
        rollback numbered epochs anew) replaces the old entry; readers credit it once anyway."""
        if began is not None and not _is_began(began := began[:BEGAN_CHARS]):
            raise ValueError(f"not an outer state's digest: {began!r}")
        self._items.pop(epoch, None)
        self._items[epoch] = Landed(epoch, samples, began)
        while len(self._items) > RECENT:
            self._items.popitem(last=False)

    def items(self) -> tuple[Landed, ...]:
        return tuple(self._items.values())


def _is_began(value: object) -> bool:
    return isinstance(value, str) and len(value) == BEGAN_CHARS and set(value) <= _HEX
