"""Confirmed epochs and states: what the collaboration counts as where it stands.

Records cost nothing to write: any stranger can publish one from a fresh identity, announcing
any epoch and any digest. So the collaboration's epoch is not the largest any record announces,
nor what most records say. An epoch counts once it is **confirmed**:

- **by a confirming key**: the project key, or a backbone key the manifest names
  (``access.backbone_keys``). The backbone publishes a ``Confirmation`` under a key only it can
  sign (its epoch, the digest of its state there, and the members of its last landed rounds
  with the weights they counted with, ``Listing``). Every volunteer pinned the manifest when
  joining, so every peer knows whose word this is.
- **by the listed members**, while the backbone is away or was left behind: an epoch and
  digest held, in fresh records, by members carrying more than ``QUORUM`` of the weight the
  newest confirmation lists. New identities are not members, and a member counts by the weight
  a round bounded, so identities that cost nothing buy no say.

A confirmation only grows: one of a later epoch (or of a later rollback) replaces it, an older one
is never taken back. Records announcing epochs beyond what is confirmed move nothing (``confirm``
ignores them); ``Strikes`` counts a peer that keeps announcing them.

A project that names no confirming key has no root to anchor on: its epoch is the highest that at
least half of the fresh records of peers whose state moved reach (``by_records``), as strong as
the count of identities.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.config.roles import BACKBONE
from core.training.progress.record import LEFT, MAX_DIGEST, PeerProgress
from core.util.errors import WireFormatError

QUORUM = 0.5
"""Share of the listed members' weight above which the members confirm an epoch by themselves."""
MAX_MEMBERS = 256
"""Members a confirmation lists: the heaviest ones, when its rounds had more."""
LISTED_ROUNDS = 8
"""Landed rounds whose members a backbone's confirmation lists (``Listing``): with groups of a
third of a round's members, a member shares none of eight rounds with the backbone about one
time in twenty."""
TAG_BYTES = 8
"""A member is listed by a tag of its PeerID (a 64-bit hash: finding another key with the same
tag takes about 2^64 key generations)."""
STRIKES = 3
"""Reads in a row in which a peer announces an epoch beyond the confirmed one before it loses its
standing..."""
GRACE = 30.0
"""...spanning at least this many seconds: an honest peer is one epoch ahead from its landing
until the backbone's (or the members') confirmation of it, seconds later."""
MISSED = 60.0
"""Seconds a peer's count is kept while no read finds its record (a lookup that timed out under
load returns fewer records than there are); after that it is taken to have left."""


def member_tag(peer: str) -> str:
    """The tag a confirmation lists ``peer`` by."""
    return hashlib.blake2b(
        peer.encode(), digest_size=TAG_BYTES, person=b"barnraise-member"
    ).hexdigest()


@dataclass(frozen=True)
class Confirmation:
    """What a confirming key says: the collaboration's state at ``epoch`` (after ``rollback``
    rollbacks) is ``digest``, landed by ``members``."""

    epoch: int
    digest: str
    """The state's digest (diloco: ``DilocoState.digest``); empty where honest peers' states
    differ in their bytes (dedloc): then it confirms the epoch only."""
    time: float
    members: tuple[tuple[str, float], ...] = ()
    """(``member_tag``, weight) of each member that landed the backbone's last rounds with a
    weight (``Listing``)."""
    rollback: int = 0

    @property
    def order(self) -> tuple[int, int, float]:
        return (self.rollback, self.epoch, self.time)

    def to_wire(self) -> list[Any]:
        members = [[tag, weight] for tag, weight in self.members]
        return [self.epoch, self.digest, self.time, members, self.rollback]

    @classmethod
    def from_wire(cls, value: Any) -> Confirmation:
        """Raise ``WireFormatError`` unless ``value`` is [epoch, digest, time, members,
        rollback] within bounds."""
        if not isinstance(value, list) or len(value) != 5:
            raise WireFormatError("a confirmation is a list of 5 values")
        epoch, digest, when, members, rollback = value
        if not all(_is_int(x) and x >= 0 for x in (epoch, rollback)):
            raise WireFormatError("a confirmation counts epochs and rollbacks from 0")
        if not isinstance(digest, str) or len(digest) > MAX_DIGEST:
            raise WireFormatError(f"a confirmation's digest is a string of at most {MAX_DIGEST}")
        if not (_is_number(when) and math.isfinite(when)):
            raise WireFormatError("a confirmation's time is a finite number")
        if not isinstance(members, list) or len(members) > MAX_MEMBERS:
            raise WireFormatError(f"a confirmation lists at most {MAX_MEMBERS} members")
        listed: list[tuple[str, float]] = []
        for item in members:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
                raise WireFormatError("a member is [tag, weight]")
            tag, weight = item
            if len(tag) != 2 * TAG_BYTES or not (_is_number(weight) and 0 <= weight < math.inf):
                raise WireFormatError("a member's tag or weight is out of range")
            listed.append((tag, float(weight)))
        if len({tag for tag, _ in listed}) != len(listed):
            raise WireFormatError("a member is listed twice")
        return cls(epoch, digest, float(when), tuple(listed), rollback)


def members_of(weights: Mapping[str, float]) -> tuple[tuple[str, float], ...]:
    """A round's members as a confirmation lists them: those with a positive weight, the heaviest
    ``MAX_MEMBERS``."""
    positive = sorted(
        ((w, p) for p, w in weights.items() if w > 0 and math.isfinite(w)), reverse=True
    )
    return tuple((member_tag(p), float(w)) for w, p in positive[:MAX_MEMBERS])


class Listing:
    """Who a backbone's confirmation lists: the members of its last ``rounds`` landed rounds that
    are still there, each with the weight its newest round counted (``members_of``).

    In a round of several groups the backbone counts the weights of its own group only, and the
    groups change from round to round. Listed from one round, a round that the backbone's group
    missed while the others landed it would be confirmed by nobody: the listed members missed it
    too, so the backbone would not know it is behind, and would strike the trainers that are
    ahead of it. Over a few rounds the listing holds the other groups' members as well, and
    their quorum confirms the round the backbone missed."""

    def __init__(self, rounds: int = LISTED_ROUNDS) -> None:
        if rounds < 1:
            raise ValueError(f"a listing covers at least one round, not {rounds}")
        self.rounds = rounds
        self._seen: dict[str, tuple[int, float]] = {}
        """Peer -> (the epoch of the newest landed round it counted in, its weight there)."""

    def landed(
        self, epoch: int, weights: Mapping[str, float], present: Collection[str]
    ) -> tuple[tuple[str, float], ...]:
        """The round of ``epoch`` landed with ``weights`` (what each sender counted with);
        ``present``: the peers whose fresh records say they are still here. The members to list
        now."""
        for peer, weight in weights.items():
            if weight > 0 and math.isfinite(weight):
                self._seen[peer] = (epoch, float(weight))
        self._seen = {
            peer: (at, weight)
            for peer, (at, weight) in self._seen.items()
            # a rollback lands lower epochs again: what was seen past it is of another history
            if epoch - self.rounds < at <= epoch and (peer in present or peer in weights)
        }
        return members_of({peer: weight for peer, (_, weight) in self._seen.items()})


@dataclass(frozen=True)
class Confirmed:
    """Where the collaboration stands, as far as what this peer can check goes."""

    epoch: int
    """-1: nothing is confirmed yet."""
    digest: str = ""
    by: str = "nobody"
    """``backbone`` (a confirming key's word), ``members`` (a quorum of the last confirmed
    round's members), ``records`` (a project without a confirming key: most records) or
    ``nobody``."""
    members: frozenset[str] = frozenset()
    """The tags of the members the newest confirmation lists (they keep their standing when they
    run ahead of it: the backbone is away)."""

    def digest_at(self, epoch: int) -> str | None:
        """The confirmed digest of ``epoch``'s state, if that epoch is the confirmed one."""
        return self.digest if epoch == self.epoch and self.digest else None


NOTHING = Confirmed(-1)


def confirm(latest: Confirmation | None, records: Iterable[PeerProgress]) -> Confirmed:
    """What is confirmed, from the newest confirmation a confirming key signed and the fresh
    ``records`` (those of peers that left are ignored)."""
    if latest is None:
        return NOTHING
    tags = frozenset(tag for tag, _ in latest.members)
    found = Confirmed(latest.epoch, latest.digest, "backbone", tags)
    total = math.fsum(w for _, w in latest.members)
    if total <= 0:
        return found
    weights = dict(latest.members)
    held: dict[tuple[int, str], dict[str, float]] = {}
    for record in records:
        if record.role == LEFT or record.epoch <= latest.epoch:
            continue
        tag = member_tag(record.peer)
        if tag in weights:
            held.setdefault((record.epoch, record.anchor), {})[tag] = weights[tag]
    for (epoch, digest), by in sorted(held.items(), reverse=True):
        if math.fsum(by.values()) > QUORUM * total:
            return Confirmed(epoch, digest, "members", tags)
    return found


def by_records(records: Sequence[PeerProgress]) -> Confirmed:
    """A project without a confirming key: the highest epoch at least half of the fresh records
    (of peers still taking part) are at or past. Only records of peers whose state the
    collaboration moved count while there are any: a backbone's, or a trainer's that finished an
    epoch. A newcomer at its initial weights knows nothing of where the collaboration stands:
    two that start together beside a lone backbone (after a spell with no trainer) would otherwise
    outvote it and train from scratch. (Any stranger can write either kind of record: without a
    confirming key this rule is as strong as the count of identities, as before.)"""
    taking_part = [r for r in records if r.role != LEFT]
    moved = [r for r in taking_part if r.role == BACKBONE or r.last_epoch >= 0]
    epochs = sorted((r.epoch for r in moved or taking_part), reverse=True)
    if not epochs:
        return NOTHING
    return Confirmed(epochs[(len(epochs) - 1) // 2], by="records")


class Strikes:
    """Peers that keep announcing epochs nothing confirms: one whose records stay ahead of the
    confirmed epoch for ``STRIKES`` reads in a row spanning ``GRACE`` seconds loses its standing
    (the owner leaves its records out and signs evidence). An honest peer is ahead only between
    its landing and the backbone's (seconds); while the backbone is away, the members of the last
    confirmed round run ahead of its last word, and are not struck for it. A read that finds no
    record of a peer neither counts nor breaks its run: only a record of it that is not ahead
    does."""

    def __init__(self, limit: int = STRIKES, grace: float = GRACE) -> None:
        self.limit = limit
        self.grace = grace
        self._since: dict[str, tuple[float, int, float]] = {}
        """Peer -> (when it was first seen ahead, reads in a row since, when last seen ahead)."""
        self.struck: set[str] = set()
        """Peers that lost their standing (for the life of this peer)."""

    def read(
        self, confirmed: Confirmed, records: Iterable[PeerProgress], now: float, *, away: bool
    ) -> list[str]:
        """Count one read at ``now``; the peers struck by it (new ones only). ``away``: no fresh
        record of a confirming backbone was read (then members may run ahead)."""
        if confirmed.by not in ("backbone", "members"):
            self._since = {}
            return []
        ahead = {
            r.peer
            for r in records
            if r.role != LEFT
            and r.epoch > confirmed.epoch
            and not (away and member_tag(r.peer) in confirmed.members)
        }
        read = {r.peer for r in records}
        since = {
            peer: counted
            for peer, counted in self._since.items()
            if peer not in read and now - counted[2] <= MISSED
        }
        for peer in ahead:
            first, reads, _ = self._since.get(peer, (now, 0, now))
            since[peer] = (first, reads + 1, now)
        self._since = since
        new = [
            p
            for p, (first, reads, _) in since.items()
            if p in ahead and reads >= self.limit and now - first >= self.grace
            and p not in self.struck
        ]  # fmt: skip
        self.struck.update(new)
        return sorted(new)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
