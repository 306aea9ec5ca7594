"""The bodies the backbone reports to its project's coordinator, with their bounds: one definition
that the sender builds and the coordinator reads.

- ``EpochReport`` (``POST /contributions``): a completed epoch's samples, each peer's
  ``Contribution`` with the pass naming its user, and the project page's ``EpochFigures``; or, in
  its *late* form, more contributions to an epoch reported before, without figures; or, in its
  *withdrawn* form, the peers whose credit for an epoch reported before is taken back.
- ``Evaluation`` (``POST /evaluations``): one held-out evaluation of the backbone's replica.
- ``EVIDENCE`` and ``RECEIPTS`` (``POST /evidence``, ``POST /receipts``): lists of signed statements
  (``core.trust.evidence``, ``core.trust.receipts``), at most so many per report.

The sender keeps within the bounds (a figure beyond its bound goes as null, an evaluation without a
finite loss not at all). The reader checks every field and raises ``InvalidReport`` naming the first
one that is wrong; the coordinator answers it as a bad request in the same words. A contribution
that does not read is ``Refused`` alone, so that one bad entry does not cost the others their
credit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeGuard

from core.trust.errors import PeerIdError
from core.trust.passes import AccessDenied, AccessPass, pass_from_text, pass_to_text
from core.trust.peer_id import PeerID
from core.util.errors import BarnraiseError, WireFormatError

MAX_LOSS = 1e6
"""Far above the loss of any model that learns (a uniform guess over 2**20 tokens is about 14)."""
MAX_SPEED = 1e9
"""Samples per second of the whole collaboration."""
MAX_PEERS = 1_000_000
MAX_CONTRIBUTIONS = 10_000
MAX_COUNT = 2**53
"""Sample counts above this are not believable (and would lose precision in JSON)."""
MAX_SECONDS = 30 * 86400.0
"""An evaluation takes minutes; a month is not one."""
MAX_PEER_CHARS = 200
SHOWN_CHARS = 100
MAX_NOTE_CHARS = 200
"""Of the reason a contribution was credited below its claim."""
"""Of the peer a refused contribution names, what the answer repeats."""
FUTURE_SLACK = 3600.0
"""How far ahead of the coordinator's clock a reporting peer's may be."""
FIGURES = ("loss", "samples_per_second", "alive_peers")
"""The figures' fields in an epoch report; a report with none of them is an older peer's."""


class InvalidReport(WireFormatError):
    """A report's body that does not have the shape or the bounds of its kind."""


@dataclass(frozen=True, slots=True)
class EpochFigures:
    """The collaboration's figures for one epoch: the project page's live numbers and loss curve."""

    epoch: int
    time: float
    """When the epoch ended, by the reporting peer's clock."""
    loss: float | None
    """None when no peer had a finite one."""
    samples_per_second: float | None
    """The trainers' summed speed."""
    alive_peers: int | None
    """Trainers with fresh progress records."""

    @classmethod
    def within_bounds(
        cls,
        epoch: int,
        time: float,
        loss: float | None,
        samples_per_second: float,
        alive_peers: int,
    ) -> EpochFigures:
        """The figures as the sender reports them: one the coordinator would refuse (not finite,
        negative, beyond its bound: other peers' records make them) goes as None, so that one
        hostile record cannot cost the epoch its report."""
        return cls(
            epoch,
            time,
            loss if _is_within(loss, 0, MAX_LOSS) else None,
            samples_per_second if _is_within(samples_per_second, 0, MAX_SPEED) else None,
            alive_peers if alive_peers <= MAX_PEERS else None,
        )

    def to_json(self) -> dict[str, Any]:
        """The figures' fields of the epoch's report."""
        return dict(
            zip(FIGURES, (self.loss, self.samples_per_second, self.alive_peers), strict=True)
        )

    @classmethod
    def from_json(cls, body: Mapping[str, Any], epoch: int, time: float) -> EpochFigures | None:
        """The figures a report carries, or None if it carries none (an older backbone's);
        ``InvalidReport`` for a value that is not a finite number within its bound."""
        if not any(name in body for name in FIGURES):
            return None
        loss = _figure(body.get("loss"), "loss", MAX_LOSS)
        speed = _figure(body.get("samples_per_second"), "samples_per_second", MAX_SPEED)
        alive = body.get("alive_peers")
        if alive is not None and (
            not isinstance(alive, int) or isinstance(alive, bool) or not 0 <= alive <= MAX_PEERS
        ):
            raise InvalidReport(
                f"alive_peers must be a whole number from 0 to {MAX_PEERS}, or null"
            )
        return cls(epoch, time, loss, speed, alive)


@dataclass(frozen=True, slots=True)
class Contribution:
    """One peer's part of a completed epoch, with the pass that names its user."""

    peer: str
    """The peer's PeerID as the report writes it."""
    access: AccessPass
    """Bound to ``peer``: the reader refuses a pass bound to another key."""
    samples: int
    compute_seconds: float
    claimed: int | None = None
    """What the peer's records claimed, where the backbone's work checks credited less (None:
    credited as claimed)."""
    note: str = ""
    """Why the checks credited less, in a sentence (at most ``MAX_NOTE_CHARS``)."""

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "peer": self.peer,
            "pass": pass_to_text(self.access),
            "samples": self.samples,
            "compute_seconds": round(self.compute_seconds, 3),
        }
        if self.claimed is not None:
            body["claimed"] = self.claimed
            body["note"] = self.note[:MAX_NOTE_CHARS]
        return body

    @classmethod
    def from_json(cls, entry: object) -> Contribution:
        """The contribution ``entry`` writes; ``InvalidReport`` for one that is malformed,
        ``AccessDenied`` for a pass bound to another peer's key."""
        if not isinstance(entry, dict):
            raise InvalidReport("a contribution must be an object")
        raw_peer = entry.get("peer")
        if not isinstance(raw_peer, str) or len(raw_peer) > MAX_PEER_CHARS:
            raise InvalidReport("peer must be a PeerID string")
        try:
            peer = PeerID.from_string(raw_peer)
        except PeerIdError as exc:
            raise InvalidReport(f"not a PeerID: {exc}") from None
        samples = _count(entry.get("samples"), "samples")
        compute = _number(entry.get("compute_seconds"))
        if compute is None or compute < 0:
            raise InvalidReport("compute_seconds must be a number of seconds, 0 or more")
        text = entry.get("pass")
        if not isinstance(text, str):
            raise InvalidReport("the contribution carries no access pass")
        try:
            access = pass_from_text(text)
        except WireFormatError as exc:
            raise InvalidReport(f"a malformed access pass ({exc})") from None
        if access.peer != peer:
            raise AccessDenied(f"the pass of {access.username!r} belongs to another peer key")
        claimed, note = _cut(entry, samples)
        return cls(raw_peer, access, samples, compute, claimed, note)


def _cut(entry: dict[str, Any], samples: int) -> tuple[int | None, str]:
    """A contribution's claim and the reason it was credited less (None and "" for one credited
    as claimed); ``InvalidReport`` for a claim below the credit or a note that is no sentence."""
    if "claimed" not in entry:
        if "note" in entry:
            raise InvalidReport("a note comes with the claim it explains")
        return None, ""
    claimed = _count(entry.get("claimed"), "claimed")
    if claimed < samples:
        raise InvalidReport("claimed must be at least the samples credited")
    note = entry.get("note", "")
    if not isinstance(note, str) or len(note) > MAX_NOTE_CHARS or not note.isprintable():
        raise InvalidReport(f"note must be a line of text of at most {MAX_NOTE_CHARS} characters")
    return claimed, note


@dataclass(frozen=True, slots=True)
class Refused:
    """A contribution entry that does not read as one, refused alone: why, and which peer it
    names (shortened, or empty), for the reporting peer to find it."""

    peer: str
    reason: str

    @classmethod
    def of(cls, entry: object, error: BarnraiseError) -> Refused:
        shown = entry.get("peer") if isinstance(entry, dict) else None
        return cls(shown[:SHOWN_CHARS] if isinstance(shown, str) else "", str(error))


@dataclass(frozen=True, slots=True)
class EpochReport:
    """The backbone's report of one completed epoch."""

    epoch: int
    time: float
    """When the epoch ended, by the reporting peer's clock."""
    samples: int
    contributions: tuple[Contribution | Refused, ...]
    """Those of peers with a pass, in the report's order; the reader's ``Refused`` entries stand
    where the entries that did not read were."""
    figures: EpochFigures | None = None
    """None in a late report, and from a backbone that sends no figures (an older one)."""
    late: bool = False
    """More contributions to an epoch reported before (records read late, a gone peer's share of
    a round): they add to it, and the report carries no figures."""
    withdrawn: bool = False
    """Contributions to an epoch reported before that are taken back (their peer was caught
    faking work): the coordinator zeroes them; no figures."""

    def to_json(self) -> dict[str, Any]:
        """The ``POST /contributions`` body."""
        body: dict[str, Any] = {"epoch": self.epoch, "time": self.time, "samples": self.samples}
        if self.late:
            body["late"] = True
        elif self.withdrawn:
            body["withdrawn"] = True
        elif self.figures is not None:
            body.update(self.figures.to_json())
        body["contributions"] = [
            part.to_json() for part in self.contributions if isinstance(part, Contribution)
        ]
        return body

    @classmethod
    def from_json(cls, body: Mapping[str, Any], now: float) -> EpochReport:
        """The report ``body`` writes, with each contribution read or ``Refused``;
        ``InvalidReport`` for a body that is wrong as a whole."""
        epoch = _count(body.get("epoch"), "epoch")
        samples = _count(body.get("samples"), "samples")
        when = _number(body.get("time"))
        if when is None or when <= 0:
            raise InvalidReport("time must be the Unix time the epoch ended")
        if when > now + FUTURE_SLACK:
            raise InvalidReport(
                "the epoch's time is in the future; check the reporting peer's clock"
            )
        entries = body.get("contributions")
        if not isinstance(entries, list):
            raise InvalidReport("contributions must be a list")
        if len(entries) > MAX_CONTRIBUTIONS:
            raise InvalidReport(f"at most {MAX_CONTRIBUTIONS} contributions per report")
        late, withdrawn = body.get("late", False), body.get("withdrawn", False)
        if not isinstance(late, bool):
            raise InvalidReport("late must be true or false")
        if not isinstance(withdrawn, bool):
            raise InvalidReport("withdrawn must be true or false")
        if late and withdrawn:
            raise InvalidReport("a report adds late credit or withdraws credit, not both")
        figures = None if late or withdrawn else EpochFigures.from_json(body, epoch, when)
        contributions = tuple(_contribution(entry) for entry in entries)
        return cls(epoch, when, samples, contributions, figures, late=late, withdrawn=withdrawn)


def _contribution(entry: object) -> Contribution | Refused:
    try:
        return Contribution.from_json(entry)
    except BarnraiseError as exc:
        return Refused.of(entry, exc)


class Measurement(Protocol):
    """A held-out measurement as the backbone makes it (``core.worker.events.PeerEvaluation``)."""

    @property
    def epoch(self) -> int: ...
    @property
    def loss(self) -> float | None: ...
    @property
    def accuracy(self) -> float: ...
    @property
    def samples(self) -> int: ...
    @property
    def tokens(self) -> int: ...
    @property
    def seconds(self) -> float: ...
    @property
    def time(self) -> float: ...
    @property
    def floor(self) -> float | None: ...


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One held-out evaluation: the backbone's replica measured on text kept out of training."""

    epoch: int
    """The replica's epoch when it was measured."""
    time: float
    """When it was measured, by the reporting peer's clock."""
    loss: float
    accuracy: float
    """Share of predicted tokens guessed right, 0 to 1."""
    samples: int
    """Held-out sequences measured."""
    tokens: int
    seconds: float
    floor: float | None = None
    """The unigram floor on the same text (what a model that only counts tokens scores); None
    where the backbone had none, or is older than the floor (its reports do not name one)."""

    def to_json(self) -> dict[str, Any]:
        """The ``POST /evaluations`` body (a coordinator that knows no floor ignores it)."""
        return {
            "epoch": self.epoch,
            "time": self.time,
            "loss": self.loss,
            "accuracy": self.accuracy,
            "samples": self.samples,
            "tokens": self.tokens,
            "seconds": self.seconds,
            "floor": self.floor,
        }

    @classmethod
    def from_json(cls, body: Mapping[str, Any], now: float) -> Evaluation:
        """The evaluation ``body`` reports; ``InvalidReport`` naming the first field that is
        wrong: a finite loss from 0 to ``MAX_LOSS``, an accuracy from 0 to 1, whole counts, the
        seconds it took, and its time, not in the future; the floor, bounded like the loss, may be
        null or absent."""
        epoch = _count(body.get("epoch"), "epoch")
        loss = _measured(body.get("loss"), "loss", 0.0, MAX_LOSS)
        accuracy = _measured(body.get("accuracy"), "accuracy", 0.0, 1.0)
        samples = _count(body.get("samples"), "samples")
        tokens = _count(body.get("tokens"), "tokens")
        seconds = _measured(body.get("seconds"), "seconds", 0.0, MAX_SECONDS)
        when = _measured(body.get("time"), "time", 0.0, now + FUTURE_SLACK)
        if when <= 0:
            raise InvalidReport("time must be the Unix time of the evaluation")
        floor = body.get("floor")
        if floor is not None:
            floor = _measured(floor, "floor", 0.0, MAX_LOSS)
        return cls(epoch, when, loss, accuracy, samples, tokens, seconds, floor)


def evaluation_report(result: Measurement) -> dict[str, Any] | None:
    """The ``POST /evaluations`` body of a held-out measurement; None for one the coordinator
    would refuse (no finite loss within its bound: nothing to plot). A floor out of bounds is left
    out rather than costing the loss."""
    loss = result.loss
    if loss is None or not _is_within(loss, 0, MAX_LOSS):
        return None
    floor = (
        result.floor if result.floor is not None and _is_within(result.floor, 0, MAX_LOSS) else None
    )
    return Evaluation(
        result.epoch,
        result.time,
        loss,
        min(max(result.accuracy, 0.0), 1.0),
        result.samples,
        result.tokens,
        max(result.seconds, 0.0),
        floor,
    ).to_json()


class Signed(Protocol):
    def to_json(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class StatementList:
    """A report that is one list of signed statements: the field that holds it, what its
    statements are called, and how many one report may carry. Each statement is checked by its
    own kind's reader, on its own."""

    field: str
    called: str
    most: int

    def reports(self, statements: Sequence[Signed]) -> list[dict[str, Any]]:
        """``statements``, in order, as the fewest reports the coordinator takes."""
        return [
            {self.field: [s.to_json() for s in statements[start : start + self.most]]}
            for start in range(0, len(statements), self.most)
        ]

    def entries(self, body: Mapping[str, Any]) -> list[Any]:
        """The report's statements, each still to be checked; ``InvalidReport`` for a body
        without the list, or with too long a one."""
        items = body.get(self.field)
        if not isinstance(items, list):
            raise InvalidReport(f"{self.field} must be a list")
        if len(items) > self.most:
            raise InvalidReport(f"at most {self.most} {self.called} per report")
        return items


EVIDENCE = StatementList("evidence", "accusations", 256)
"""Members' signed accusations (``core.trust.evidence``)."""
RECEIPTS = StatementList("receipts", "receipts", 256)
"""Trainers' signed receipts for expert servers' work (``core.trust.receipts``)."""


def _is_within(value: object, least: float, most: float) -> TypeGuard[int | float]:
    """Whether ``value`` is a finite number from ``least`` to ``most``."""
    # json.loads reads NaN and Infinity, which fail the comparisons; the range comes before
    # math.isfinite, which raises for an int too large for a float
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and least <= value <= most
        and math.isfinite(value)
    )


def _figure(value: object, name: str, most: float) -> float | None:
    if value is None:
        return None
    if not _is_within(value, 0, most):
        raise InvalidReport(f"{name} must be a finite number from 0 to {most:,.0f}, or null")
    return float(value)


def _measured(value: object, name: str, least: float, most: float) -> float:
    if not _is_within(value, least, most):
        if name == "time":
            raise InvalidReport(
                "time must be the Unix time of the evaluation, not in the future; check the "
                "reporting peer's clock"
            )
        raise InvalidReport(f"{name} must be a finite number from {least:g} to {most:,.6g}")
    return float(value)


def _count(value: object, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < MAX_COUNT:
        raise InvalidReport(f"{name} must be a whole number, 0 or more")
    return value


def _number(value: object) -> float | None:
    """``value`` as a float if it is a finite JSON number, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)  # an int of hundreds of digits is too large for a float
    except OverflowError:
        return None
    return number if math.isfinite(number) else None
