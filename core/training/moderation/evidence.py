"""Publishing what a peer found against others in its rounds, and collecting everyone's.

A round's ``AveragingResult.findings`` (a sender screened out or clipped, a reducer caught lying)
become signed ``Evidence`` (``core.trust.evidence``); a screen's finding only once it repeats
(``repeated``). Each peer keeps its newest ``KEPT`` records
and publishes them under ``<prefix>.evidence`` in one subkey that only it can write (the DHT's
owned subkeys, as progress records do), living ``EVIDENCE_TTL`` seconds; in a moderated project the
record carries the reporter's pass, and peers' DHTs refuse one whose pass does not admit its
signer. Why the DHT and not a direct call to the backbone: every peer already reaches it,
there may be several backbones or none for a while, and a record outlives its reporter.

The backbone reads the key every epoch (``EvidenceCollector``): each item must be signed by
the subkey's owner for this project, and is passed on once (a record is republished unchanged
until it expires). Bounds: ``KEPT`` items per reporter (a longer record is dropped whole), and at
most ``MAX_COLLECTED`` new items per collection.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from core.averaging import Averager, AveragingResult
from core.dht import DHTNode, owner_marker
from core.dht.records import InvalidRecord, owner_of
from core.dht.validation import renewal_bound
from core.net.host.gate import AccessGate
from core.training.moderation.repeated import Found, RepeatedFindings
from core.training.progress import pass_carrying_schema
from core.trust.evidence import Evidence, InvalidEvidence, sign_evidence
from core.trust.identity import Identity
from core.trust.passes import AccessDenied
from core.trust.peer_id import PeerID
from core.util.clock import SYSTEM_CLOCK, Clock
from core.util.errors import BarnraiseError

log = logging.getLogger(__name__)

EVIDENCE_TTL = 600.0
"""Seconds a reporter's record lives: several epochs, so that a backbone that was busy or
restarting still reads it."""
KEPT = 32
"""Items in one reporter's record (its newest): a flood from one member costs it its own older
accusations, nobody else's."""
MAX_COLLECTED = 256
"""New items passed on per collection (one coordinator report's worth)."""
REMEMBERED = 20_000
"""Accusations remembered as already passed on (far more than live in the DHT at once)."""


@dataclass(frozen=True)
class Reported:
    """An accusation as the backbone read it, with the reporter's username when known."""

    evidence: Evidence
    reporter_user: str | None = None


class EvidenceBoard:
    """This peer's evidence record, and reading everyone's."""

    def __init__(
        self,
        dht: DHTNode,
        identity: Identity,
        prefix: str,
        *,
        access: AccessGate | None = None,
        ttl: float = EVIDENCE_TTL,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if identity.peer_id != dht.peer_id:
            raise ValueError("the evidence must be signed by the DHT node's own identity")
        self.project = prefix
        self._dht = dht
        self._identity = identity
        self._key = f"{prefix}.evidence"
        self._access = access
        self._ttl = ttl
        self._clock = clock
        self._mine: list[Evidence] = []
        self.repeated = RepeatedFindings()
        """The screens' findings held until they repeat."""
        if access is not None:
            dht.rules.add_schema(
                pass_carrying_schema("evidence", self._key, access, 1, max_ahead=renewal_bound(ttl))
            )

    @property
    def clock(self) -> Clock:
        return self._clock

    @classmethod
    def of(cls, averager: Averager) -> EvidenceBoard:
        """The board of the peer that ``averager`` averages for (its Host, DHT node and prefix)."""
        host = averager.host
        return cls(averager.dht, host.identity, averager.prefix, access=host.access)

    def sign(self, result: AveragingResult, round_key: str) -> list[Evidence]:
        """The round's findings as evidence signed by this peer: its facts, and its screens'
        findings against senders found in enough epochs lately (``repeated``), with those held
        against them until now."""
        now = self._clock.time()
        epoch = _epoch_of(round_key)
        found = [Found(round_key, result.group_id, epoch, f) for f in result.findings]
        signed = []
        for item in self.repeated.admit(found):
            finding = item.finding
            try:
                signed.append(
                    sign_evidence(
                        self._identity,
                        self.project,
                        finding.peer,
                        round_key=item.round_key,
                        group=item.group,
                        epoch=item.epoch,
                        part=finding.part,
                        chunk=finding.chunk,
                        statistic=finding.statistic,
                        value=finding.value,
                        reason=finding.reason,
                        time=now,
                    )
                )
            except InvalidEvidence as exc:
                log.warning("a finding of round %s cannot be signed: %s", round_key, exc)
        return signed

    def accuse(
        self,
        accused: PeerID,
        *,
        round_key: str,
        group: bytes,
        chunk: int,
        statistic: str,
        value: float,
        reason: str,
    ) -> Evidence | None:
        """One accusation outside an averaging round, signed by this peer (None, logged, if its
        fields cannot be signed)."""
        try:
            return sign_evidence(
                self._identity,
                self.project,
                accused,
                round_key=round_key,
                group=group,
                epoch=0,
                part=0,
                chunk=chunk,
                statistic=statistic,
                value=value,
                reason=reason,
                time=self._clock.time(),
            )
        except InvalidEvidence as exc:
            log.warning("an accusation of %s cannot be signed: %s", accused, exc)
            return None

    async def publish(self, result: AveragingResult, round_key: str) -> list[Evidence]:
        """Sign the round's findings and publish them with our other recent ones (best effort: a
        failed store is logged; the next round's publish carries them again)."""
        signed = self.sign(result, round_key)
        await self.publish_signed(signed, f"round {round_key}")
        return signed

    async def publish_signed(self, signed: list[Evidence], what: str) -> None:
        """Publish accusations this peer signed (``what`` names them in the log) with its other
        recent ones, best effort as ``publish``."""
        if not signed:
            return
        now = self._clock.time()
        fresh = [e for e in self._mine if now - e.time < self._ttl]
        self._mine = (fresh + signed)[-KEPT:]
        # built before any await: a later publish holds a superset and a later expiration
        value: list[object] = [[e.to_wire() for e in self._mine]]
        if self._access is not None:
            if self._access.own_pass is None:
                log.info("no access pass yet: %d finding(s) not published", len(signed))
                return
            value.append(self._access.own_pass.to_wire())
        subkey = owner_marker(self._dht.peer_id)
        try:
            await self._dht.store(self._key, value, now + self._ttl, subkey=subkey)
        except BarnraiseError as exc:
            log.warning("publishing evidence of %s failed: %s", what, exc)

    async def fetch(self) -> list[Reported]:
        """Every valid accusation in the DHT now; a malformed or forged record is skipped whole."""
        found = await self._dht.get(self._key, latest=True)
        if found is None or not isinstance(found.value, dict):
            return []
        reported: list[Reported] = []
        for subkey, entry in found.value.items():
            try:
                owner = owner_of(subkey)
                if owner is None:
                    continue
                reported.extend(self._read(owner, entry.value))
            except (InvalidRecord, InvalidEvidence, AccessDenied) as exc:
                log.info("an evidence record was skipped: %s", exc)
        return reported

    def _read(self, owner: PeerID, value: object) -> list[Reported]:
        expected = 1 if self._access is None else 2
        if not isinstance(value, list) or len(value) != expected:
            raise InvalidEvidence("an evidence record is a list of accusations (and a pass)")
        items = value[0]
        if not isinstance(items, list) or len(items) > KEPT:
            raise InvalidEvidence(f"an evidence record holds at most {KEPT} accusations")
        user = None
        if self._access is not None:
            # records stored before a ban or an expiry are still in the DHT: ask again
            user = self._access.admit(owner, value[1]).username
        out = []
        for raw in items:
            evidence = Evidence.from_wire(raw)
            if evidence.reporter != owner or evidence.project != self.project:
                raise InvalidEvidence(f"the record of {owner} holds another peer's or project's")
            evidence.verify()
            out.append(Reported(evidence, user))
        return out


class EvidenceCollector:
    """What is new since the last collection: each accusation is passed on once."""

    def __init__(self, board: EvidenceBoard, *, remembered: int = REMEMBERED) -> None:
        self.board = board
        self._seen: OrderedDict[tuple[object, ...], None] = OrderedDict()
        self._remembered = remembered

    async def collect(self) -> list[Reported]:
        return self.new(await self.board.fetch())

    def new(self, reported: Iterable[Reported]) -> list[Reported]:
        fresh: list[Reported] = []
        for item in reported:
            key = item.evidence.identity
            if key in self._seen:
                continue
            if len(fresh) >= MAX_COLLECTED:
                log.warning("more than %d new accusations at once: the rest wait", MAX_COLLECTED)
                break
            self._seen[key] = None
            if len(self._seen) > self._remembered:
                self._seen.popitem(last=False)
            fresh.append(item)
        return fresh


async def pass_on(
    collector: EvidenceCollector,
    users: Mapping[str, str],
    on_evidence: Callable[[list[Evidence]], None] | None,
) -> list[Reported]:
    """What a backbone does with the members' evidence: collect what is new, name each accused
    peer in its log (one line per peer and round: ``accusations``) and hand the evidence to
    ``on_evidence`` (the coordinator's reporter). Nothing when the collection fails (said)."""
    try:
        fresh = await collector.collect()
    except BarnraiseError as exc:
        log.debug("collecting evidence failed: %s", exc)
        return []
    for line in accusations(fresh, users):
        log.warning("%s", line)
    if fresh and on_evidence is not None:
        on_evidence([item.evidence for item in fresh])
    return fresh


def accusations(reported: Iterable[Reported], users: Mapping[str, str]) -> list[str]:
    """One line per accused peer and round, for the backbone's log: who, as which user
    (``users``: PeerID to username, from progress records; else the accused's own word is not
    taken), how many distinct reporters, and the first reporter's words."""
    grouped: dict[tuple[str, str], list[Reported]] = {}
    for item in reported:
        grouped.setdefault((str(item.evidence.accused), item.evidence.round_key), []).append(item)
    lines = []
    for (accused, _), items in grouped.items():
        first = items[0].evidence
        reporters = {str(item.evidence.reporter) for item in items}
        user = users.get(accused)
        named = f"peer {accused}" + (f" (user {user})" if user else "")
        by = items[0].reporter_user or users.get(str(first.reporter)) or first.reporter.short()
        lines.append(
            f"evidence: {named} accused by {len(reporters)} peer(s) ({len(items)} finding(s)); "
            f"{first.describe()} [reported by {by}]"
        )
    return lines


def _epoch_of(round_key: str) -> int:
    """The epoch in a round key such as ``grads.12`` (0 when it names none)."""
    tail = round_key.rpartition(".")[2]
    return int(tail) if tail.isascii() and tail.isdigit() and len(tail) < 16 else 0
