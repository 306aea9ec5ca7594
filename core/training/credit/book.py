"""CreditBook: each epoch (diloco: round) whose work landed credited exactly once, whatever the
pace at which the backbone reads the records.

A record carries its peer's last landed epochs (``core.training.progress.landed``), so a reader that
misses some records still finds every epoch. The book turns what records claim into one ``Share``
per (peer, epoch) and never a second, and fills gaps from what averaging rounds showed: a member of
an all-reduce sees the sample weight each sender claimed, which is evidence of work. That evidence
is used only for a peer that is gone (no fresh record ``GONE_AFTER`` seconds after the round): a
peer killed after its round but before its record said so still gets what the round used, while a
live peer's own record stays the authority (a diloco member that did not land a round carries its
samples to the next one and claims them there, so crediting the round too would count them twice).

Where the backbone checks work, what the checks support of a share (``Support``: dedloc's spot
checks, ``checks.standing``; diloco's scores, ``scores``) is given to the book when it is built: a
share waits while its peer's claims wait for a check, and goes out with what the checks support
(nothing, for a peer caught faking work). A share cut below its claim carries the claim and the
checks' reason (``Support.why``), which the coordinator keeps and the volunteer's "check my credit"
shows.

A share of an epoch that the metrics already reported is *late*: it goes to the coordinator in a
report of its own for that epoch, which adds it (the coordinator counts each (epoch, peer) once).
A share handed out can be *withdrawn* (``withdraw``: its peer was caught faking work) while the book
still remembers it, ``CREDITED_KEPT`` epochs; it stays credited, so it is never handed out again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from core.training.progress.landed import MAX_SAMPLES, RECENT, Landed
from core.trust.passes import AccessPass

GONE_AFTER = 15.0
"""Seconds after a round before its witnessed weights may credit a member with no fresh record:
more than a record's lifetime (10 s), so that a live peer's record is always read first."""
WITNESS_KEPT = 600.0
"""Seconds a round's weights are kept for a member that has not been credited yet."""
CREDITED_KEPT = 8 * RECENT
"""Epochs, below the newest seen, for which (peer, epoch) credits are remembered: a claim older
than that can no longer arrive (records carry ``RECENT`` epochs)."""

MAX_NOTE = 200
"""Characters at most of the reason a share was cut (``core.trust.reports`` bounds it too)."""


class Support(Protocol):
    """What the work checks support of the claims."""

    def supported(
        self, peer: str, epoch: int, samples: int, now: float, began: str | None = None
    ) -> int | None:
        """Samples to credit of ``peer``'s claim of ``samples`` for ``epoch``, or None while the
        share waits for a check (``began``: where the claim says its round began,
        ``Landed.began``; only replayed diloco rounds use it)."""
        ...

    def why(self, peer: str, epoch: int) -> str:
        """In a sentence, why the last answer for (``peer``, ``epoch``) was below the claim."""
        ...


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
    claimed: int | None = None
    """What its records claimed, where the checks credited less (None: credited as claimed)."""
    note: str = ""
    """Why the checks credited less than the claim."""
    began: str | None = None
    """Where its record says its round began (``Landed.began``)."""


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

    def __init__(self, support: Support | None = None) -> None:
        """``support``: what the work checks support of a share (None: every claim as made)."""
        self._credited: dict[int, set[str]] = {}
        self._waiting: dict[int, dict[str, Share]] = {}
        self._witnessed: dict[tuple[str, int], _Witness] = {}
        self._peers: dict[str, tuple[AccessPass | None, float]] = {}
        self._claims: dict[tuple[str, int], int] = {}
        self._given: dict[tuple[str, int], Share] = {}
        self._newest = -1
        self._support = support
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
            waiting[peer] = Share(peer, item.epoch, item.samples, access, speed, began=item.began)

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
        """The shares of ``epoch`` the checks let out now (all of them where nothing is checked),
        with what they support; they count as credited from here on. The others keep waiting."""
        waiting = self._waiting.pop(epoch, {})
        shares, settled, held = [], [], {}
        for peer, share in waiting.items():
            support = self._support
            backed = (
                support.supported(peer, epoch, share.samples, now, share.began)
                if support
                else share.samples
            )
            if backed is None:
                held[peer] = share
                continue
            settled.append(share)
            self.withheld += share.samples - backed
            if backed > 0:
                cut = support is not None and backed < share.samples
                given = dataclasses.replace(
                    share,
                    samples=backed,
                    claimed=share.samples if cut else None,
                    note=support.why(peer, epoch)[:MAX_NOTE] if cut and support else "",
                )
                shares.append(given)
                if support is not None:  # only checked work is ever withdrawn
                    self._given[(peer, epoch)] = given
        if held:
            self._waiting[epoch] = held
        self._mark(epoch, settled)
        return shares

    def withdraw(self, peer: str, after: int) -> dict[int, Share]:
        """Take back what ``peer`` was handed out for epochs after ``after`` (those the book still
        remembers): per epoch, the share that was credited, with what was claimed (a share paid
        as claimed claimed its samples) and its note saying why it is taken back
        (``Support.why``). They stay credited: no claim of them is handed out again."""
        found = {
            epoch: self._given.pop((who, epoch))
            for who, epoch in sorted(self._given)
            if who == peer and epoch > after
        }
        why = self._support.why if self._support is not None else (lambda _peer, _epoch: "")
        found = {
            e: dataclasses.replace(
                s, claimed=s.samples if s.claimed is None else s.claimed, note=why(peer, e)
            )
            for e, s in found.items()
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
