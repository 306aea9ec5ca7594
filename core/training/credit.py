"""Credit by record: every epoch (diloco: every round) whose work landed is credited exactly once,
whatever the pace at which the backbone reads the records.

A record used to carry the totals of its peer's last finished epoch only, so a peer that finished
two epochs between two of the backbone's readings was credited one (the moderated swarm lost 32 of
bob's 160 samples that way on a loaded machine). Now each record also carries ``Landed``: the
samples of the last ``RECENT`` epochs whose work this peer saw land (the update applied, the round
averaged). A reader that misses up to ``RECENT - 1`` records still finds every one of them.

``CreditBook`` is the reader's side. It turns what records claim into one ``Share`` per
(peer, epoch) and never a second, and fills gaps from what averaging rounds showed: a member of an
all-reduce sees the sample weight each sender claimed, which is evidence of work. That evidence is
used only for a peer that is gone (no fresh record ``GONE_AFTER`` seconds after the round): a peer
killed after its round but before its record said so still gets what the round used, while a live
peer's own record stays the authority (a diloco member that did not land a round carries its samples
to the next one and claims them there, so crediting the round too would count them twice).

Where the backbone checks work (``core.training.work``), its ``Standings`` judge each share
before it is handed out (``CreditBook.judge``): a share waits while its peer's claims wait for a
check, and goes out with what the checks support (nothing, for a peer caught faking work).

A share of an epoch that the metrics already reported is *late*: it goes to the coordinator in a
report of its own for that epoch, which adds it (the coordinator counts each (epoch, peer) once).
A share handed out can be *withdrawn* (``withdraw``: its peer was caught faking work) while the book
still remembers it, ``CREDITED_KEPT`` epochs; it stays credited, so it is never handed out again.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from core.trust.passes import AccessPass
from core.util.errors import WireFormatError

RECENT = 16
"""Landed epochs a record carries: a reader may miss 15 of a peer's records in a row and still
credit every epoch (records are read every second or so; epochs take tens of seconds or more)."""
MAX_SAMPLES = 2**53
"""The coordinator's bound on a sample count (JSON's exact integers)."""
GONE_AFTER = 15.0
"""Seconds after a round before its witnessed weights may credit a member with no fresh record:
more than a record's lifetime (10 s), so that a live peer's record is always read first."""
WITNESS_KEPT = 600.0
"""Seconds a round's weights are kept for a member that has not been credited yet."""
CREDITED_KEPT = 8 * RECENT
"""Epochs, below the newest seen, for which (peer, epoch) credits are remembered: a claim older
than that can no longer arrive (records carry ``RECENT`` epochs)."""

Judge = Callable[[str, int, int, float], "int | None"]
"""(peer, epoch, samples claimed, now) -> samples to credit, or None while the share waits."""


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


@dataclass(frozen=True, slots=True)
class Share:
    """One peer's credit for one epoch: what the coordinator is told."""

    peer: str
    epoch: int
    samples: int
    access: AccessPass | None
    speed: float
    """The peer's last reported speed (samples per second), for the compute-time estimate."""
    witnessed: bool = False
    """Taken from a round's weights, the peer being gone; else from the peer's own record."""


@dataclass(slots=True)
class _Witness:
    samples: int
    at: float


class CreditBook:
    """Which (peer, epoch) were credited, and what is waiting to be.

    ``claim`` takes what a record says, ``witness`` what a round showed; ``take(epoch)`` hands out
    the shares of an epoch whose metrics are being made, ``late(reported)`` those of epochs already
    reported. Each (peer, epoch) leaves the book once.
    """

    def __init__(self) -> None:
        self._credited: dict[int, set[str]] = {}
        self._waiting: dict[int, dict[str, Share]] = {}
        self._witnessed: dict[tuple[str, int], _Witness] = {}
        self._peers: dict[str, tuple[AccessPass | None, float]] = {}
        self._claims: dict[tuple[str, int], int] = {}
        self._given: dict[tuple[str, int], Share] = {}
        self._newest = -1
        self.judge: Judge | None = None
        """What the work checks support of a share (None: every claim as made)."""
        self.withheld = 0
        """Samples claimed that the checks did not support."""
        self.witnessed_shares = 0
        """Shares credited from rounds' weights (their peers were gone)."""
        self.withdrawn = 0
        """Samples credited and then withdrawn."""

    def credited(self, peer: str, epoch: int) -> bool:
        return peer in self._credited.get(epoch, ())

    def claim(self, peer: str, landed: Iterable[Landed], access: AccessPass | None,
              speed: float) -> None:  # fmt: skip
        """A fresh record of ``peer`` lists these landed epochs."""
        self._peers[peer] = (access, speed)
        for item in landed:
            self._newest = max(self._newest, item.epoch)
            if item.samples <= 0 or self.credited(peer, item.epoch):
                continue
            self._claims[(peer, item.epoch)] = item.samples
            waiting = self._waiting.setdefault(item.epoch, {})
            # a record newer than the one that first listed the epoch says the same or corrects it
            waiting[peer] = Share(peer, item.epoch, item.samples, access, speed)

    def witness(self, epoch: int, weights: Mapping[str, float], now: float) -> None:
        """A round of ``epoch`` averaged these senders' weights (their samples)."""
        for peer, weight in weights.items():
            samples = int(weight)
            if 0 < samples < MAX_SAMPLES and not self.credited(peer, epoch):
                self._witnessed.setdefault((peer, epoch), _Witness(samples, now))

    def settle_witnesses(self, fresh: Iterable[str], now: float) -> None:
        """Credit from rounds' weights the members that are gone: no fresh record (``fresh``: the
        peers that have one) ``GONE_AFTER`` seconds after their round, and no claim of their own."""
        alive = set(fresh)
        for key, seen in list(self._witnessed.items()):
            peer, epoch = key
            if self.credited(peer, epoch) or now - seen.at > WITNESS_KEPT:
                del self._witnessed[key]
            elif now - seen.at >= GONE_AFTER and peer not in alive:
                del self._witnessed[key]
                waiting = self._waiting.setdefault(epoch, {})
                if peer not in waiting:
                    access, speed = self._peers.get(peer, (None, 0.0))
                    waiting[peer] = Share(peer, epoch, seen.samples, access, speed, witnessed=True)

    def claimed(self, peer: str, epoch: int) -> int | None:
        """The samples ``peer``'s records claim for ``epoch`` (None: none read)."""
        return self._claims.get((peer, epoch))

    def take(self, epoch: int, now: float = 0.0) -> list[Share]:
        """The shares of ``epoch`` the judge lets out now (all of them without one), with what it
        supports; they count as credited from here on. The others keep waiting."""
        waiting = self._waiting.pop(epoch, {})
        shares, settled, held = [], [], {}
        for peer, share in waiting.items():
            judged = self.judge(peer, epoch, share.samples, now) if self.judge else share.samples
            if judged is None:
                held[peer] = share
                continue
            settled.append(share)
            self.withheld += share.samples - judged
            if judged > 0:
                given = dataclasses.replace(share, samples=judged)
                shares.append(given)
                if self.judge is not None:  # only checked work is ever withdrawn
                    self._given[(peer, epoch)] = given
        if held:
            self._waiting[epoch] = held
        self._mark(epoch, settled)
        return shares

    def withdraw(self, peer: str, after: int) -> dict[int, Share]:
        """Take back what ``peer`` was handed out for epochs after ``after`` (those the book still
        remembers): per epoch, the share that was credited. They stay credited: no claim of them
        is handed out again."""
        found = {
            epoch: self._given.pop((who, epoch))
            for who, epoch in sorted(self._given)
            if who == peer and epoch > after
        }
        self.withdrawn += sum(share.samples for share in found.values())
        return found

    def late(self, reported: int, now: float = 0.0) -> dict[int, list[Share]]:
        """Shares waiting for epochs up to ``reported`` (whose metrics went out without them)."""
        found = {}
        for epoch in sorted(e for e in self._waiting if e <= reported):
            shares = self.take(epoch, now)
            if shares:
                found[epoch] = shares
        return found

    def _mark(self, epoch: int, shares: list[Share]) -> None:
        credited = self._credited.setdefault(epoch, set())
        for share in shares:
            credited.add(share.peer)
            self.witnessed_shares += share.witnessed
        floor = self._newest - CREDITED_KEPT
        for old in [e for e in self._credited if e < floor]:
            del self._credited[old]
        for old in [e for e in self._waiting if e < floor]:
            del self._waiting[old]
        for key in [k for k in self._claims if k[1] < floor]:
            del self._claims[key]
        for key in [k for k in self._given if k[1] < floor]:
            del self._given[key]
        if len(self._peers) > 10_000:
            self._peers.clear()  # refilled by the next records; only a gone peer's pass is lost
