"""Progress records in the DHT, and the collaboration's view built from them.

Every peer publishes one signed record (a subkey only it can sign) under ``<prefix>.progress``: its
epoch, the samples it has accumulated towards that epoch, its speed, the time, its mode, and the
loss totals of its current and last finished epochs. From all fresh records a peer estimates where
the collaboration stands: the newest epoch, the samples accumulated towards it, when the target batch
will be reached, and who is alive.

Records live ``RECORD_TTL`` seconds and live peers refresh theirs every ``KEEPALIVE`` seconds, so the
record of a peer that vanished (killed, link lost) stops counting within seconds. A peer that stops
on purpose (quit, SIGTERM) withdraws its record at once: it publishes a ``left`` record, newer than
its last, which counts for nothing but still carries the totals of the last epoch it finished (so
that a volunteer who quits right after a step keeps its part of that epoch's metrics). Records of
peers this one caught lying (``Averager.bans``) are left out of the view.

The backbone's record (``mode == "aux"``) also carries the newest held-out evaluation of its replica
(``HeldOut``, with the unigram floor beside the loss where the backbone computed one), so that
every trainer sees it in the records it reads anyway. Every record carries the
epochs whose work its peer saw land (``core.training.credit``): what the leaderboard credits, each
epoch once, however seldom the backbone reads. A diloco peer's record carries the digest of its
outer parameters too. The wire form is the record's eleven values, then the pass (nil in an open
project), the evaluation (nil but in the backbone's), the landed epochs and the digest.
A reader of a release that knew only the first twelve would drop such a record as malformed, and a
moderated project's DHT of that release would refuse to keep it: a mixed swarm misses the newer
peers, never misreads them.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from core.dht import DHTNode, owner_marker
from core.dht.records import InvalidRecord, owner_of
from core.dht.validation import RecordSchema, renewal_bound
from core.net.host.gate import AccessGate
from core.training.credit import Landed, landed_from_wire, landed_to_wire
from core.trust.passes import AccessDenied, AccessPass
from core.trust.peer_id import PeerID
from core.util.errors import WireFormatError
from core.util.msgpack_codec import unpack
from core.worker.events import PeerEvaluation

log = logging.getLogger(__name__)

COMPUTING = ("trainer", "client")
"""What a record says of a peer that computes (its role); not to be confused with the project's
training mode (``core.modes``), which every record of a project shares."""
RECORD_MODES = (*COMPUTING, "aux", "paused", "left")
"""A paused peer keeps its record (with its epoch) but counts neither samples nor speed; a peer that
left says so, and its record is dropped by readers."""
_WIRE_FIELDS = 11
"""Fields of a progress record (epoch ... last_samples); the pass, the held-out evaluation and the
landed epochs follow them (nil where a record has no pass or no evaluation)."""
MAX_DIGEST = 64
"""The longest anchor digest a record may carry (diloco's are 16 hexadecimal digits)."""
MAX_HELD_OUT_LOSS = 1e3
"""The largest held-out loss (or floor) a record may carry (per token: far beyond a uniform guess
over any vocabulary); a larger one, or one that is not finite, travels as unknown."""
RECORD_TTL = 10.0
"""Seconds a progress record lives in the DHT (and counts) unless its peer refreshes it."""
KEEPALIVE = 2.0
"""Seconds between refreshes of an idle peer's record: several per ``RECORD_TTL``, so that one lost
store does not make a live peer look gone."""


@dataclass
class StepTally:
    """This peer's work since its last report point: samples, the sum of its finite losses and
    their count, and its speed (an average over recent steps). Both optimizers count with it."""

    samples: int = 0
    loss_sum: float = 0.0
    mini_steps: int = 0
    speed: float = 0.0
    last_step_at: float | None = None

    def count(self, batch_size: int, loss: float | None) -> float | None:
        """One step of ``batch_size`` samples; the seconds since the last one (None: the first
        since a pause or a reset)."""
        now = time.monotonic()
        gap = None
        if self.last_step_at is not None and now > self.last_step_at:
            gap = now - self.last_step_at
            rate = batch_size / gap
            self.speed = rate if self.speed == 0 else 0.8 * self.speed + 0.2 * rate
        self.last_step_at = now
        self.samples += batch_size
        if loss is not None and math.isfinite(loss):
            self.loss_sum += loss
            self.mini_steps += 1
        return gap

    def take(self) -> tuple[int, float, int]:
        """(samples, loss sum, mini-steps) so far, which start again from zero."""
        taken = (self.samples, self.loss_sum, self.mini_steps)
        self.samples, self.loss_sum, self.mini_steps = 0, 0.0, 0
        return taken

    def stop(self) -> None:
        """Paused: no speed, and the next step's gap is not a measure of it."""
        self.speed = 0.0
        self.last_step_at = None


@dataclass(frozen=True)
class HeldOut:
    """The backbone's newest measure of its replica on the project's held-out text.

    What a record says, like the training loss the trainers report: in an open project anyone can
    publish an aux record, and with it any figures (a moderated project's records carry their
    peer's pass). Readers follow the evaluation of the newest epoch."""

    epoch: int
    """The replica's epoch when it was measured."""
    loss: float | None
    """Mean cross-entropy per predicted token; None when it was not a finite figure."""
    accuracy: float
    """Share of predicted tokens guessed right, 0 to 1."""
    samples: int
    """Sequences measured."""
    floor: float | None = None
    """The unigram floor on the same tokens (``PeerEvaluation.floor``); None where the backbone
    had none (or an older one, which sends none)."""

    @classmethod
    def of(cls, result: PeerEvaluation) -> HeldOut:
        """The figures of the backbone's evaluation, within the bounds every reader checks."""
        return cls(
            max(0, result.epoch),
            _bounded_loss(result.loss),
            min(1.0, max(0.0, result.accuracy)),
            max(0, result.samples),
            _bounded_loss(result.floor),
        )

    def to_wire(self) -> list[Any]:
        """[epoch, loss, accuracy, samples], then the floor where there is one: without it, the
        form a reader that knows no floor reads (with one, such a reader drops the record)."""
        figures = [self.epoch, self.loss, self.accuracy, self.samples]
        return figures if self.floor is None else [*figures, self.floor]

    @classmethod
    def from_wire(cls, value: Any) -> HeldOut:
        """Raise ``WireFormatError`` unless ``value`` is [epoch, loss or nil, accuracy, samples]
        with counts of at least 0, a loss of 0 to ``MAX_HELD_OUT_LOSS`` and an accuracy of 0 to 1,
        and maybe a fifth value: the floor, nil or bounded like the loss."""
        if not isinstance(value, list) or len(value) not in (4, 5):
            raise WireFormatError("a held-out evaluation is a list of 4 or 5 values")
        epoch, loss, accuracy, samples = value[:4]
        floor = value[4] if len(value) == 5 else None
        if not all(_is_int(x) and x >= 0 for x in (epoch, samples)):
            raise WireFormatError("a held-out evaluation counts with whole numbers of at least 0")
        for name, figure in (("loss", loss), ("floor", floor)):
            if figure is not None and not (_is_number(figure) and 0 <= figure <= MAX_HELD_OUT_LOSS):
                raise WireFormatError(f"a held-out {name} is nil or 0 to {MAX_HELD_OUT_LOSS:g}")
        if not (_is_number(accuracy) and 0 <= accuracy <= 1):
            raise WireFormatError("a held-out accuracy is 0 to 1")
        return cls(
            epoch,
            None if loss is None else float(loss),
            float(accuracy),
            samples,
            None if floor is None else float(floor),
        )


def _bounded_loss(loss: float | None) -> float | None:
    """``loss`` if a record may carry it, else None (unknown)."""
    if loss is None or not (math.isfinite(loss) and 0 <= loss <= MAX_HELD_OUT_LOSS):
        return None
    return loss


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    # NaN fails every comparison with the bounds, so the callers' ranges refuse it too
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class PeerProgress:
    """What one peer says about itself (also what this peer publishes)."""

    peer: str
    epoch: int
    samples: int
    """Samples accumulated towards ``epoch``'s step (not yet averaged)."""
    samples_per_second: float
    time: float
    mode: str = "trainer"
    loss_sum: float = 0.0
    mini_steps: int = 0
    """Loss totals of the microbatches accumulated in ``epoch`` so far."""
    last_epoch: int = -1
    last_loss_sum: float = 0.0
    last_mini_steps: int = 0
    last_samples: int = 0
    """The same totals for the last epoch this peer finished (for the metrics of that epoch)."""
    access: AccessPass | None = None
    """The peer's pass in a moderated project: says which user the samples belong to."""
    held_out: HeldOut | None = None
    """An aux record's newest held-out evaluation (only aux records carry one)."""
    landed: tuple[Landed, ...] | None = None
    """The last epochs whose work this peer saw land, with their samples (``core.training.credit``):
    what the leaderboard credits. None in a record of a release that did not list them."""
    anchor: str = ""
    """diloco: a digest of the outer parameters this peer holds at ``epoch`` (empty in dedloc
    mode): a peer whose digest most others at its epoch do not share took a mean they did not,
    and downloads theirs."""

    @property
    def username(self) -> str | None:
        return None if self.access is None else self.access.username

    @property
    def training(self) -> bool:
        """A trainer or client that is computing (not an auxiliary or a paused peer)."""
        return self.mode in COMPUTING

    def to_wire(self) -> list[Any]:
        held_out = self.held_out if self.mode == "aux" else None
        access = None if self.access is None else self.access.to_wire()
        # nil holds the place of a pass (open project) or of an evaluation (not the backbone)
        tail: list[Any] = [access] if access is not None else []
        if held_out is not None or self.landed is not None or self.anchor:
            tail = [access, None if held_out is None else held_out.to_wire()]
        if self.landed is not None or self.anchor:
            tail.append(None if self.landed is None else landed_to_wire(self.landed))
        if self.anchor:
            tail.append(self.anchor)
        return [
            self.epoch,
            self.samples,
            self.samples_per_second,
            self.time,
            self.mode,
            self.loss_sum,
            self.mini_steps,
            self.last_epoch,
            self.last_loss_sum,
            self.last_mini_steps,
            self.last_samples,
            *tail,
        ]

    @classmethod
    def from_wire(cls, peer: str, value: Any) -> PeerProgress | None:
        """None for anything malformed: another peer's bad record must not stop us."""
        try:
            if not isinstance(value, list) or not _WIRE_FIELDS <= len(value) <= _WIRE_FIELDS + 4:
                return None
            tail = value[_WIRE_FIELDS:]
            if tail == [None]:
                raise WireFormatError("a nil pass stands only before an evaluation")
            landed = landed_from_wire(tail[2]) if len(tail) >= 3 and tail[2] is not None else None
            anchor = tail[3] if len(tail) == 4 else ""
            if not isinstance(anchor, str) or len(anchor) > MAX_DIGEST:
                raise WireFormatError(f"an anchor digest is a string of at most {MAX_DIGEST}")
            # the pass was checked by the DHT's rules when the record was read
            access = AccessPass.from_wire(tail[0]) if tail and tail[0] is not None else None
            (
                epoch,
                samples,
                sps,
                when,
                mode,
                loss_sum,
                mini,
                last,
                last_loss,
                last_mini,
                last_n,
            ) = value[:_WIRE_FIELDS]
            numbers = (sps, when, loss_sum, last_loss)
            if mode not in RECORD_MODES or not all(isinstance(x, int | float) for x in numbers):
                return None
            ints = (epoch, samples, mini, last, last_mini, last_n)
            if not all(isinstance(x, int) and not isinstance(x, bool) for x in ints):
                return None
            if epoch < 0 or samples < 0 or sps < 0 or not math.isfinite(sps):
                return None
            # only the backbone's records carry an evaluation; anyone else's is not read
            evaluation = tail[1] if len(tail) >= 2 else None
            held_out = (
                HeldOut.from_wire(evaluation) if evaluation is not None and mode == "aux" else None
            )
            return cls(
                peer, epoch, samples, float(sps), float(when), mode, float(loss_sum), mini,
                last, float(last_loss), last_mini, last_n, access, held_out, landed, anchor,
            )  # fmt: skip
        except (TypeError, ValueError, WireFormatError):
            return None


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
    ) -> None:
        self._dht = dht
        self._ignored = ignored
        """PeerIDs whose records the view leaves out: the members this peer caught lying (their
        samples never reach our rounds, and their epoch must not make us wait for their state)."""
        self._key = f"{prefix}.progress"
        self._ttl = ttl
        self._me = str(dht.peer_id)
        self._access = access
        self._held_out: HeldOut | None = None
        # a record is renewed every few seconds: one that claims a day would let a stranger's
        # epoch stall the collaboration long after its last store
        ahead = renewal_bound(ttl)
        if access is not None:
            schema = pass_carrying_schema(
                "progress", self._key, access, _WIRE_FIELDS, max_ahead=ahead, after_pass=3
            )
        else:
            schema = RecordSchema("progress", self._key, subkeys="owned", max_ahead=ahead)
        dht.rules.add_schema(schema)

    def evaluated(self, held_out: HeldOut) -> None:
        """The backbone measured its replica: every aux record published from now on carries the
        evaluation (an older epoch's never replaces a newer one's)."""
        if self._held_out is None or held_out.epoch >= self._held_out.epoch:
            self._held_out = held_out

    async def publish(self, progress: PeerProgress) -> bool:
        if progress.mode == "aux" and progress.held_out is None and self._held_out is not None:
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
            dataclasses.replace(last, mode="left", samples=0, samples_per_second=0.0, time=when)
        )

    async def fetch(self) -> list[PeerProgress]:
        """Every record, those of peers that left (``mode == "left"``) included, but not those of
        ``ignored`` peers."""
        found = await self._dht.get(self._key, latest=True)
        if found is None or not isinstance(found.value, dict):
            return []
        records = []
        ignored = self._ignored()
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
        return records

    def view(
        self, records: list[PeerProgress], mine: PeerProgress, target: int
    ) -> CollaborationView:
        """Combine fetched records with our own, fresher, one; records not refreshed within the
        TTL (by the time of ``mine``) are left out."""
        others = [r for r in records if r.peer != self._me and mine.time - r.time <= self._ttl]
        peers = [r for r in others if r.mode != "left"] + [mine]
        epoch = max(p.epoch for p in peers)
        at_epoch = [p for p in peers if p.epoch == epoch and p.training]
        samples = sum(p.samples for p in at_epoch)
        speed = sum(p.samples_per_second for p in at_epoch)
        departed = [r for r in others if r.mode == "left"]
        return CollaborationView(epoch, samples, speed, peers, target, departed)
