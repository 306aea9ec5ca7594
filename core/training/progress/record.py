"""PeerProgress: the record every peer publishes in the DHT, and its wire form.

Every peer publishes one signed record (a subkey only it can sign) under ``<prefix>.progress``: its
epoch, the samples it has accumulated towards that epoch, its speed, the time, its role, and the
loss totals of its current and last finished epochs (``board`` reads them into a view). A peer that
stops on purpose (quit, SIGTERM) withdraws its record at once: it publishes a ``left`` record, newer
than its last, which counts for nothing but still carries the totals of the last epoch it finished
(so that a volunteer who quits right after a step keeps its part of that epoch's metrics).

The backbone's record (role ``backbone``) also carries the newest held-out evaluation of its replica
(``HeldOut``, with the unigram floor beside the loss where the backbone computed one), so that
every trainer sees it in the records it reads anyway. Every record carries the
epochs whose work its peer saw land (``landed``): what the leaderboard credits, each
epoch once, however seldom the backbone reads. A diloco peer's record carries the digest of its
outer parameters too. The wire form is the record's eleven values, then the pass (nil in an open
project), the evaluation (nil but in the backbone's), the landed epochs and the digest.
A reader of a release that knew only the first twelve would drop such a record as malformed, and a
moderated project's DHT of that release would refuse to keep it: a mixed swarm misses the newer
peers, never misreads them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from core.config.roles import BACKBONE, COMPUTING, ROLES, WIRE_NAMES
from core.training.progress.landed import Landed, landed_from_wire, landed_to_wire
from core.trust.passes import AccessPass
from core.util.errors import WireFormatError
from core.worker.events import PeerEvaluation

PAUSED = "paused"
LEFT = "left"
RECORD_ROLES = (*ROLES, PAUSED, LEFT)
"""What a record says its peer is: its role (``core.config.roles``) while it takes part; a paused
peer keeps its record (with its epoch) but counts neither samples nor speed; a peer that left says
so, and its record is dropped by readers."""
_ON_WIRE = MappingProxyType({**WIRE_NAMES, PAUSED: PAUSED, LEFT: LEFT})
_FROM_WIRE = MappingProxyType({wire: role for role, wire in _ON_WIRE.items()})
WIRE_FIELDS = 11
"""Fields of a progress record (epoch ... last_samples); the pass, the held-out evaluation and the
landed epochs follow them (nil where a record has no pass or no evaluation)."""
MAX_DIGEST = 64
"""The longest anchor digest a record may carry (diloco's, a SHA-256 in hexadecimal, have 64)."""
MAX_HELD_OUT_LOSS = 1e3
"""The largest held-out loss (or floor) a record may carry (per token: far beyond a uniform guess
over any vocabulary); a larger one, or one that is not finite, travels as unknown."""


@dataclass(frozen=True)
class HeldOut:
    """The backbone's newest measure of its replica on the project's held-out text.

    What a record says, like the training loss the trainers report: in an open project anyone can
    publish a backbone's record, and with it any figures (a moderated project's records carry their
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
    role: str = "trainer"
    """One of ``RECORD_ROLES``."""
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
    """The backbone's newest held-out evaluation (only the backbone's records carry one)."""
    landed: tuple[Landed, ...] | None = None
    """The last epochs whose work this peer saw land, with their samples (``landed``):
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
        """A trainer or client that is computing (not the backbone, not a paused peer)."""
        return self.role in COMPUTING

    def to_wire(self) -> list[Any]:
        held_out = self.held_out if self.role == BACKBONE else None
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
            _ON_WIRE[self.role],
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
            if not isinstance(value, list) or not WIRE_FIELDS <= len(value) <= WIRE_FIELDS + 4:
                return None
            tail = value[WIRE_FIELDS:]
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
                wire_role,
                loss_sum,
                mini,
                last,
                last_loss,
                last_mini,
                last_n,
            ) = value[:WIRE_FIELDS]
            numbers = (sps, when, loss_sum, last_loss)
            role = _FROM_WIRE.get(wire_role) if isinstance(wire_role, str) else None
            if role is None or not all(isinstance(x, int | float) for x in numbers):
                return None
            ints = (epoch, samples, mini, last, last_mini, last_n)
            if not all(isinstance(x, int) and not isinstance(x, bool) for x in ints):
                return None
            if epoch < 0 or samples < 0 or sps < 0 or not math.isfinite(sps):
                return None
            # only the backbone's records carry an evaluation; anyone else's is not read
            evaluation = tail[1] if len(tail) >= 2 else None
            held_out = (
                HeldOut.from_wire(evaluation)
                if evaluation is not None and role == BACKBONE
                else None
            )
            return cls(
                peer, epoch, samples, float(sps), float(when), role, float(loss_sum), mini,
                last, float(last_loss), last_mini, last_n, access, held_out, landed, anchor,
            )  # fmt: skip
        except (TypeError, ValueError, WireFormatError):
            return None
