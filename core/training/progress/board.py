"""ProgressBoard: publishing this peer's record and reading everyone's; CollaborationView, where
the collaboration stands as far as this peer can tell.

Records live ``RECORD_TTL`` seconds and live peers refresh theirs every ``KEEPALIVE`` seconds, so the
record of a peer that vanished (killed, link lost) stops counting within seconds. Records of peers
this one caught lying (``Averager.bans``) are left out of the view, and so are those of peers that
kept announcing epochs nothing confirms (``confirmed.Strikes``).

The collaboration's epoch is the confirmed one (``confirmed``): a backbone running with a key the
manifest names publishes a ``Confirmation`` under ``<prefix>.confirmed`` (a subkey only its key can
sign; a node that knows the schema keeps no one else's), and every read fetches it beside the
records. It lives ``CONFIRMATION_TTL``, so that a newcomer still finds it while the backbone is
away.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from core.averaging.robust.medians import typical_claim
from core.config.roles import BACKBONE
from core.dht import DHTNode, owner_marker
from core.dht.records import InvalidRecord, owner_of
from core.dht.validation import RecordSchema, renewal_bound
from core.net.host.gate import AccessGate
from core.training.progress.confirmed import (
    NOTHING,
    Confirmation,
    Confirmed,
    Listing,
    Strikes,
    by_records,
    confirm,
)
from core.training.progress.record import LEFT, WIRE_FIELDS, HeldOut, PeerProgress
from core.trust.passes import AccessDenied
from core.trust.peer_id import PeerID
from core.util.errors import BarnraiseError, WireFormatError
from core.util.msgpack_codec import unpack

log = logging.getLogger(__name__)

RECORD_TTL = 10.0
"""Seconds a progress record lives in the DHT (and counts) unless its peer refreshes it."""
KEEPALIVE = 2.0
"""Seconds between refreshes of an idle peer's record: several per ``RECORD_TTL``, so that one lost
store does not make a live peer look gone."""
CONFIRMATION_READS = 10
"""While a confirming backbone's records are read, the stored confirmation is read with every
this many reads of the records (for the members it lists)."""
CONFIRM_EVERY = 600.0
"""Seconds after which a backbone stores its confirmation again though nothing changed."""
CONFIRMATION_TTL = 23 * 3600.0
"""Seconds a confirmation lives in the DHT after its last store (a node keeps nothing past a day):
the collaboration's last confirmed state outlives a backbone's absence of hours."""


def pass_carrying_schema(
    name: str,
    key: str,
    access: AccessGate,
    fields: int,
    *,
    max_ahead: float | None = None,
    after_pass: int = 0,
) -> RecordSchema:
    """Records under ``key`` must be signed by their peer and be lists of ``fields`` values followed
    by a pass that admits that peer, then at most ``after_pass`` more values (and expire at most
    ``max_ahead`` seconds ahead)."""

    def authorize(signer: PeerID | None, data: bytes) -> None:
        if signer is None:
            raise InvalidRecord(f"{name} records must be signed by their peer")
        try:
            value = unpack(data)
        except WireFormatError as exc:
            raise InvalidRecord(f"{name} record: {exc}") from None
        shaped = isinstance(value, list) and 0 < len(value) - fields <= 1 + after_pass
        presented = value[fields] if shaped else None
        try:
            access.admit(signer, presented)
        except AccessDenied as exc:
            raise InvalidRecord(f"{name} record of {signer}: {exc}") from None

    return RecordSchema(name, key, subkeys="owned", authorize=authorize, max_ahead=max_ahead)


@dataclass(frozen=True)
class CollaborationView:
    """Where the collaboration stands, as far as this peer can tell."""

    epoch: int
    """The newest epoch any fresh peer has reached."""
    samples: int
    """Samples accumulated towards ``epoch`` by the peers at it (reported, so a lower bound)."""
    samples_per_second: float
    """Summed speed of the trainers at ``epoch``."""
    peers: list[PeerProgress]
    """Every fresh record, this peer's own included (not those of peers that left)."""
    target: int
    departed: list[PeerProgress] = dataclasses.field(default_factory=list)
    """Fresh records of peers that left: they count for nothing, but still carry the totals of
    the last epoch they finished (for that epoch's metrics)."""
    confirmed: Confirmed = NOTHING
    """What is confirmed (``confirmed.confirm``): ``epoch`` is this, or this peer's own when it
    is further."""

    @property
    def reports(self) -> list[PeerProgress]:
        """What the metrics of finished epochs are built from: everyone's, the departed's too."""
        return self.peers + self.departed

    @property
    def trainers_at_epoch(self) -> list[PeerProgress]:
        return [p for p in self.peers if p.epoch == self.epoch and p.training]

    @property
    def ready(self) -> bool:
        return self.samples >= self.target

    def eta(self) -> float:
        """Seconds until the target is reached at the current speed (inf when nobody trains)."""
        missing = max(0, self.target - self.samples)
        if missing == 0:
            return 0.0
        return missing / self.samples_per_second if self.samples_per_second > 0 else math.inf


class ProgressBoard:
    """Publishing our record and reading everyone's.

    In a moderated project (``access`` given) every record carries its peer's pass, and this peer's
    DHT refuses to keep or believe a progress record whose pass does not admit its signer.
    """

    def __init__(
        self,
        dht: DHTNode,
        prefix: str,
        *,
        ttl: float = RECORD_TTL,
        access: AccessGate | None = None,
        ignored: Callable[[], Collection[str]] = frozenset,
        confirmers: Collection[str] = frozenset(),
    ) -> None:
        """``confirmers``: the PeerIDs whose confirmations count (``AccessSection.confirmers``;
        empty: the project names none, and its epoch is what most records say)."""
        self._dht = dht
        self._ignored = ignored
        """PeerIDs whose records the view leaves out: the members this peer caught lying (their
        samples never reach our rounds, and their epoch must not make us wait for their state)."""
        self._key = f"{prefix}.progress"
        self._ttl = ttl
        self._me = str(dht.peer_id)
        self._access = access
        self._held_out: HeldOut | None = None
        self.confirmers = frozenset(confirmers)
        self.confirmation: Confirmation | None = None
        """The newest confirmation a confirming key signed that this peer has read (or made)."""
        self.strikes = Strikes()
        self.on_struck: Callable[[PeerProgress, Confirmed], None] | None = None
        """Told of each peer that lost its standing (its last record, what was confirmed)."""
        self._confirmed_key = f"{prefix}.confirmed"
        self.last_confirmed: Confirmed = NOTHING
        """What the last view or read found confirmed."""
        self.members: tuple[tuple[str, float], ...] = ()
        """A confirming backbone: the members of the last rounds it landed, with the weights they
        counted with (``landed_with``), which its confirmations list."""
        self._listing = Listing()
        self.rollback = 0
        """A confirming backbone: the rollbacks its state went through."""
        self._said: Confirmation | None = None
        self._read = False
        self._reads = 0
        # a record is renewed every few seconds: one that claims a day would let a stranger's
        # epoch stall the collaboration long after its last store
        ahead = renewal_bound(ttl)
        if access is not None:
            schema = pass_carrying_schema(
                "progress", self._key, access, WIRE_FIELDS, max_ahead=ahead, after_pass=3
            )
        else:
            schema = RecordSchema("progress", self._key, subkeys="owned", max_ahead=ahead)
        dht.rules.add_schema(schema)
        if self.confirmers:
            dht.rules.add_schema(self._confirmation_schema())

    def landed_with(
        self, epoch: int, weights: Mapping[str, float], present: Collection[str]
    ) -> None:
        """A confirming backbone landed the round of ``epoch``, its senders counting with
        ``weights``; ``present``: the peers whose fresh records it read. Its confirmations list
        the members of its last rounds from now on (``confirmed.Listing``)."""
        self.members = self._listing.landed(epoch, weights, present)

    @property
    def confirms(self) -> bool:
        """This peer's key is one whose confirmations count."""
        return self._me in self.confirmers

    def _confirmation_schema(self) -> RecordSchema:
        confirmers = self.confirmers

        def authorize(signer: PeerID | None, data: bytes) -> None:
            if signer is None or str(signer) not in confirmers:
                raise InvalidRecord("only a key the manifest names confirms the collaboration")

        return RecordSchema(
            "confirmation",
            self._confirmed_key,
            subkeys="owned",
            authorize=authorize,
            max_ahead=CONFIRMATION_TTL + renewal_bound(0.0),
        )

    def _take(self, confirmation: Confirmation, *, stored: bool = True) -> bool:
        """Keep ``confirmation`` if it is newer than the one held (a ``stored`` one, read from
        the confirmations' key, also when it is of the same epoch: it lists the members); whether
        it was."""
        held = self.confirmation
        if held is not None and (
            confirmation.order[:2] < held.order[:2]
            or (confirmation.order <= held.order and not stored)
        ):
            return False
        self.confirmation = confirmation
        return True

    async def _confirm_held(self, progress: PeerProgress) -> None:
        if not self._read:
            return  # nothing read yet: the collaboration may be confirmed far past our state
        held = self.confirmation
        rolled_back = held is not None and self.rollback > held.rollback
        if progress.epoch < self.last_confirmed.epoch and not rolled_back:
            return
        # a backbone back from an absence lists who confirmed meanwhile until it lands a round
        members = self.members or (held.members if held is not None else ())
        confirmation = Confirmation(
            progress.epoch, progress.anchor, progress.time, members, self.rollback
        )
        said = self._said
        if (
            said is not None
            and progress.time - said.time < CONFIRM_EVERY
            and dataclasses.replace(said, time=confirmation.time) == confirmation
        ):
            return
        try:
            await self.confirm(confirmation)
        except BarnraiseError as exc:
            log.debug("publishing the confirmation failed: %s", exc)
            return
        self._said = confirmation

    async def confirm(self, confirmation: Confirmation) -> bool:
        """Publish our confirmation (only a confirming key's counts; others' readers drop it)."""
        if not self.confirms:
            return False
        self._take(confirmation)
        return await self._dht.store(
            self._confirmed_key,
            confirmation.to_wire(),
            time.time() + CONFIRMATION_TTL,
            subkey=owner_marker(self._dht.peer_id),
        )

    async def _fetch_confirmation(self) -> None:
        if not self.confirmers:
            return
        found = await self._dht.get(self._confirmed_key, latest=True)
        if found is None or not isinstance(found.value, dict):
            return
        for subkey, entry in found.value.items():
            try:
                owner = owner_of(subkey)
            except InvalidRecord:
                continue
            if owner is None or str(owner) not in self.confirmers:
                continue
            try:
                self._take(Confirmation.from_wire(entry.value))
            except WireFormatError:
                continue

    def confirmed_claim(self) -> float | None:
        """The typical claim of the round the newest confirmation lists (``medians.typical_claim``
        of the weights its members counted with): what bounds a round's medians where a swarm of
        identities would move them (``Averager.confirmed_claim``). None: no confirmation lists
        members yet (the round's claims alone decide)."""
        held = self.confirmation
        if held is None or not held.members:
            return None
        return typical_claim([weight for _, weight in held.members]) or None

    def confirmed(self, peers: Sequence[PeerProgress]) -> Confirmed:
        """What ``peers``' fresh records and the newest confirmation confirm."""
        found = by_records(peers) if not self.confirmers else confirm(self.confirmation, peers)
        self.last_confirmed = found
        return found

    def evaluated(self, held_out: HeldOut) -> None:
        """The backbone measured its replica: every backbone record published from now on carries the
        evaluation (an older epoch's never replaces a newer one's)."""
        if self._held_out is None or held_out.epoch >= self._held_out.epoch:
            self._held_out = held_out

    async def publish(self, progress: PeerProgress) -> bool:
        """Store our record; a backbone with a confirming key confirms what it holds with it,
        unless the collaboration is confirmed further (a backbone back from an absence, until it
        caught up)."""
        if progress.role == BACKBONE and self.confirms:
            await self._confirm_held(progress)
        if progress.role == BACKBONE and progress.held_out is None and self._held_out is not None:
            progress = dataclasses.replace(progress, held_out=self._held_out)
        if self._access is not None:
            if self._access.own_pass is None:
                raise AccessDenied("no access pass yet: cannot report progress")
            progress = dataclasses.replace(progress, access=self._access.own_pass)
        expiration = progress.time + self._ttl
        return await self._dht.store(
            self._key, progress.to_wire(), expiration, subkey=owner_marker(self._dht.peer_id)
        )

    async def withdraw(self, last: PeerProgress) -> bool:
        """Say that we left (a record newer than ``last``, which counts for nothing), so that nobody counts
        on us until our record would have expired."""
        when = max(time.time(), last.time + 0.001)  # a store keeps only the newer expiration
        return await self.publish(
            dataclasses.replace(last, role=LEFT, samples=0, samples_per_second=0.0, time=when)
        )

    async def fetch(self) -> list[PeerProgress]:
        """Every record, those of peers that left (role ``left``) included, but not those of
        ``ignored`` peers nor of peers struck for announcing what nothing confirms; the newest
        confirmation is read too, when the records do not carry it (``_from_backbone``)."""
        self._reads += 1
        if self.confirmers and self.confirmation is None:
            found, _ = await asyncio.gather(
                self._dht.get(self._key, latest=True), self._fetch_confirmation()
            )
        else:
            found = await self._dht.get(self._key, latest=True)
        self._read = True
        if found is None or not isinstance(found.value, dict):
            return []
        records = []
        ignored = {*self._ignored(), *self.strikes.struck}
        for subkey, entry in found.value.items():
            try:
                owner = owner_of(subkey)
            except InvalidRecord:
                continue
            if owner is None or str(owner) in ignored:
                continue
            record = PeerProgress.from_wire(str(owner), entry.value)
            if record is None:
                continue
            if self._access is not None:
                # records stored before a ban or an expiry are still in the DHT: ask again
                if record.access is None:
                    continue
                try:
                    self._access.recheck(record.access)
                except AccessDenied:
                    continue
            records.append(record)
        if self.confirmers and (
            not self._from_backbone(records) or self._reads % CONFIRMATION_READS == 0
        ):
            await self._fetch_confirmation()
        return self._strike(records)

    def _from_backbone(self, records: Sequence[PeerProgress]) -> bool:
        """The fresh record of a confirming backbone confirms its epoch and digest as its stored
        confirmation does (it is signed by the same key), listing the members the held one lists:
        while the backbone is there, the stored one is read only every ``CONFIRMATION_READS``
        reads (for its members). Whether there was such a record."""
        held = self.confirmation
        found = False
        for record in records:
            if record.peer not in self.confirmers or record.role != BACKBONE or held is None:
                continue
            found = True
            # a later epoch only, named as the stored ones name theirs (a diloco backbone's record
            # between a landing and its digest says nothing of the bytes)
            if record.epoch > held.epoch and (record.anchor or not held.digest):
                members, rollback = held.members, held.rollback
                self._take(
                    Confirmation(record.epoch, record.anchor, record.time, members, rollback),
                    stored=False,
                )
        return found

    def _strike(self, records: list[PeerProgress]) -> list[PeerProgress]:
        """Count this read's announcements beyond what is confirmed; the records of the peers
        that keep their standing."""
        if not self.confirmers:
            return records
        confirmed = self.confirmed(records)
        others = [r for r in records if r.peer != self._me]
        away = not any(r.peer in self.confirmers and r.role == BACKBONE for r in others)
        if self.confirms:
            away = False  # we are the backbone
        new = set(self.strikes.read(confirmed, others, time.time(), away=away))
        for record in records:
            if record.peer in new and self.on_struck is not None:
                self.on_struck(record, confirmed)
        return [r for r in records if r.peer not in self.strikes.struck]

    def view(
        self, records: list[PeerProgress], mine: PeerProgress, target: int
    ) -> CollaborationView:
        """Combine fetched records with our own, fresher, one; records not refreshed within the
        TTL (by the time of ``mine``) are left out."""
        others = [r for r in records if r.peer != self._me and mine.time - r.time <= self._ttl]
        peers = [r for r in others if r.role != LEFT] + [mine]
        confirmed = self.confirmed(peers)
        # what nothing confirms moves nothing: a record from a fresh identity announcing a later
        # epoch neither makes this peer download nor makes its round wait
        epoch = max(mine.epoch, confirmed.epoch)
        at_epoch = [p for p in peers if p.epoch == epoch and p.training]
        samples = sum(p.samples for p in at_epoch)
        speed = sum(p.samples_per_second for p in at_epoch)
        departed = [r for r in others if r.role == LEFT]
        return CollaborationView(epoch, samples, speed, peers, target, departed, confirmed)
