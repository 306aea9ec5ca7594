"""How a reducer turns its senders' chunks into one: screening, then the mean or CenteredClip.

Every chunk is screened first (``screening``): non-finite chunks and chunks whose norm is far above
the group's are left out. The claimed sample weights of the rest are bounded (``bounded_weights``):
none counts for more than ``weight_ratio_limit`` times the group's lower median weight, since a
weight is only its sender's say-so. In the medians all this takes over the senders, each counts by
its vote (``medians``: whole for typical work or more, a share of one for less), so identities
claiming next to nothing cannot set them by their number. Then the chunks are aggregated by the
configured method:

- ``mean``: the sample-weighted mean, as plain averaging has always done.
- ``centered_clip``: CenteredClip (``centered_clip``): a sender far from the others pulls the
  result with a bounded force, so a minority cannot drag it away.

Choices, and why (CenteredClip's own are in ``centered_clip``):

- **Scratch memory reused** (``Workspace``): a fresh 1 MiB buffer costs a page fault per 4 KiB on
  first touch, 0.5 ms here, more than the arithmetic done in it; a reducer keeps one workspace for
  its round, so each chunk allocates only the aggregate it hands out.
- **Senders in ascending index, float32**: a pure, deterministic function, so that a verifier can
  recompute a reducer's chunk from the same inputs and get the same bits on the same machine. Sums
  over a chunk's elements (norms, CenteredClip's Gram matrix) use BLAS, whose kernel differs between
  CPUs: on another machine the result may differ in the last bits, so comparisons across machines
  need a small relative tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from core.averaging.robust.alignment import leave_one_out
from core.averaging.robust.centered_clip import centered_clip
from core.averaging.robust.medians import median_by, votes
from core.averaging.robust.screening import screen
from core.codecs.arrays import F32
from core.util.errors import ConfigError

CLIP_WEIGHT = "clip_weight"


class Method(StrEnum):
    MEAN = "mean"
    CENTERED_CLIP = "centered_clip"


CLIP_FINDING_SENDERS = 4
"""Clipped senders are findings only in chunks with this many senders. With three, τ is the nearer
of two distances, and honest chunks that one batch touched far more than the others (embedding
rows) sat more than five times farther: the demo swarm accused honest trainers that way."""


@dataclass(frozen=True)
class AggregationConfig:
    method: Method = Method.MEAN
    clip_tau: float = 1.0
    """τ as a multiple of the senders' median distance from their medoid (see ``centered_clip``)."""
    clip_iterations: int = 3
    """At most this many CenteredClip steps; it stops sooner at its fixed point."""
    norm_ratio_limit: float = 10.0
    """A chunk whose norm exceeds this times the group's lower median norm is left out. A sign
    flipped x10 sits at the limit (CenteredClip handles what passes); x1000 is far beyond it, while
    honest peers' gradients over similar batches differ by a few times at most."""
    clip_finding_below: float = 0.2
    """A sender whose clip factor falls below this is recorded (not excluded): it was more than
    five times τ from the aggregate. Honest senders sit within about 0.6 τ on average, but with
    0.5 (2 τ) every defended test run accused one honest trainer (shards differ), and a finding
    becomes signed evidence against a user."""
    weight_ratio_limit: float = math.inf
    """No sender's weight counts for more than this times the lower median of the senders'
    weights (``bounded_weights``); inf: weights as claimed, as plain averaging has always done.
    A project's manifest sets it (``averaging.weight_ratio_limit``)."""
    accuse_from: float = 1.0
    """A chunk left out for its norm is a finding only from this multiple of the limit (below:
    unattributed, ``screening``); a mode whose honest updates can sit just over the limit raises
    it (``Mode.aggregation``)."""
    opposed_from: float | None = None
    """Screen by direction too (``screening``): a chunk above this share of the norm limit that
    points away from the others is left out. None: off, as for one batch's gradients; a mode whose
    updates span many steps turns it on (``Mode.aggregation``)."""
    spread_floor: float = 1e-3
    """The spread that sets τ is at least this times the reference norm: differences below it are
    rounding, not outliers."""
    alignments: bool = False
    """Also keep each sender's sums along the others' mean (``ChunkAggregate.along``), which
    diloco's backbone scores work by. They nearly double the arithmetic of a chunk (not its
    decoding or transfer), so only a mode that scores them asks: diloco, once a round."""
    typical_claim: float | None = None
    """The round's typical claim, which every sender's vote in the medians is measured against
    (``medians.votes``): ``medians.typical_claim`` of the weights the group's members declared,
    held by the collaboration's last confirmed round's. Set per round by the averager
    (``Averager.round_config``), never by a manifest; None: from each chunk's claims alone."""
    screen: bool = True
    """False turns the checks off (NaN then reaches the aggregate): only for showing, in tests and
    benchmarks, what the checks prevent."""

    def __post_init__(self) -> None:
        method: object = self.method  # a plain string from a settings file is accepted
        if not isinstance(method, Method):
            try:
                object.__setattr__(self, "method", Method(str(method)))
            except ValueError:
                choices = ", ".join(repr(m.value) for m in Method)
                raise ConfigError(
                    f"aggregation method must be one of {choices}, got {method!r}"
                ) from None
        if not (math.isfinite(self.clip_tau) and self.clip_tau > 0):
            raise ConfigError(f"clip_tau must be a positive number, got {self.clip_tau}")
        if isinstance(self.clip_iterations, bool) or not 1 <= self.clip_iterations <= 100:
            raise ConfigError(f"clip_iterations must be 1 to 100, got {self.clip_iterations}")
        if math.isnan(self.norm_ratio_limit) or self.norm_ratio_limit <= 1:
            raise ConfigError(
                f"norm_ratio_limit must be above 1 (inf turns the check off), "
                f"got {self.norm_ratio_limit}"
            )
        if math.isnan(self.weight_ratio_limit) or self.weight_ratio_limit < 1:
            raise ConfigError(
                f"weight_ratio_limit must be at least 1 (inf: weights as claimed), "
                f"got {self.weight_ratio_limit}"
            )
        if not 0 <= self.clip_finding_below <= 1:
            raise ConfigError(
                f"clip_finding_below must be in [0, 1], got {self.clip_finding_below}"
            )
        if math.isnan(self.accuse_from) or self.accuse_from < 1:
            raise ConfigError(f"accuse_from must be at least 1, got {self.accuse_from}")
        if self.opposed_from is not None and not 0 < self.opposed_from <= 1:
            raise ConfigError(f"opposed_from must be in (0, 1], got {self.opposed_from}")
        claim = self.typical_claim
        if claim is not None and not (math.isfinite(claim) and claim > 0):
            raise ConfigError(f"typical_claim must be a positive number, got {claim}")
        if not 0 <= self.spread_floor < 1:
            raise ConfigError(f"spread_floor must be in [0, 1), got {self.spread_floor}")


class Workspace:
    """Scratch matrices kept from one chunk to the next (their contents mean nothing between calls)."""

    def __init__(self) -> None:
        self._matrices: dict[str, np.ndarray] = {}

    def matrix(self, name: str, rows: int, size: int) -> np.ndarray:
        """A (rows x size) float32 matrix, the same memory as last time when it is big enough."""
        kept = self._matrices.get(name)
        if kept is None or kept.shape[0] < rows or kept.shape[1] < size:
            kept = np.empty((rows, size), dtype=np.float32)
            self._matrices[name] = kept
        return kept[:rows, :size]

    def row(self, name: str, size: int) -> F32:
        row: F32 = self.matrix(name, 1, size)[0]
        return row


@dataclass
class ChunkAggregate:
    values: F32 | None
    """The aggregate, a new array (None when nothing could be aggregated)."""
    weight: float
    """Total sample weight the included senders claimed (the samples that reached the round; how
    much each of them steered ``values`` is bounded: ``capped``)."""
    included: frozenset[int]
    """Sender indices whose data went in."""
    screened: dict[int, tuple[str, float, str]] = field(default_factory=dict)
    """Sender -> (statistic, value, reason), for chunks the checks left out."""
    clipped: dict[int, float] = field(default_factory=dict)
    """Sender -> its CenteredClip factor min(1, τ/‖x − v‖), when below ``clip_finding_below``."""
    unattributed: frozenset[int] = frozenset()
    """Screened senders that are no finding (``Screening.unattributed``)."""
    capped: dict[int, float] = field(default_factory=dict)
    """Sender -> the weight it counted with, for included senders whose claim was above the bound
    (``bounded_weights``). Not a finding: honest devices differ in speed."""
    along: dict[int, tuple[float, float, float]] = field(default_factory=dict)
    """Included sender -> (<x, r>, ‖x‖², ‖r‖²), ``r`` the others' mean by the weights they
    counted with (``alignment.leave_one_out``); empty with fewer than two included, or unless
    ``AggregationConfig.alignments``."""


def aggregate_chunk(
    inputs: Mapping[int, F32],
    weights: Mapping[int, float],
    config: AggregationConfig,
    workspace: Workspace | None = None,
) -> ChunkAggregate:
    """Screen the senders' chunks, then aggregate the rest; the inputs are only read.

    ``workspace`` only lends memory (pass the same one for every chunk of a part); the result is
    the same without it.
    """
    _check(inputs, weights)
    workspace = workspace or Workspace()
    senders = sorted(inputs)
    typical = config.typical_claim
    held = dict(zip(senders, votes([float(weights[s]) for s in senders], typical), strict=True))
    checks = screen(
        inputs, config.norm_ratio_limit, config.opposed_from, config.accuse_from, votes=held
    )
    if not config.screen:
        checks.screened = {}
        checks.unattributed = set()
    kept = [s for s in senders if s not in checks.screened]
    if not kept:
        return ChunkAggregate(
            None, 0.0, frozenset(), checks.screened, unattributed=frozenset(checks.unattributed)
        )
    rows = [inputs[s] for s in kept]
    claims = [float(weights[s]) for s in kept]
    total = math.fsum(claims)
    shares = bounded_weights(claims, config.weight_ratio_limit, typical)
    capped = {s: b for s, w, b in zip(kept, claims, shares, strict=True) if b < w}
    clipped: dict[int, float] = {}
    along = None
    if len(rows) == 1:
        values = rows[0].copy()
    elif config.method is Method.MEAN:
        values = weighted_mean(rows, shares, workspace)
        if config.alignments:
            along = leave_one_out(rows, shares, values)
    else:
        count, size = len(rows), rows[0].size
        values, factors = centered_clip(
            rows,
            shares,
            [checks.norms[s] for s in kept],
            tau=config.clip_tau,
            iterations=config.clip_iterations,
            spread_floor=config.spread_floor,
            reference=checks.reference,
            offsets=workspace.matrix("offsets", count, size),
            votes=[held[s] for s in kept],
        )
        if count >= CLIP_FINDING_SENDERS:
            clipped = {
                s: f for s, f in zip(kept, factors, strict=True) if f < config.clip_finding_below
            }
        if config.alignments:
            along = leave_one_out(rows, [b * f for b, f in zip(shares, factors, strict=True)])
    return ChunkAggregate(
        values,
        total,
        frozenset(kept),
        checks.screened,
        clipped,
        frozenset(checks.unattributed),
        capped,
        dict(zip(kept, along, strict=True)) if along is not None else {},
    )


def bounded_weights(
    claims: Sequence[float], ratio_limit: float, typical: float | None = None
) -> list[float]:
    """Each claimed weight, at most ``ratio_limit`` times the lower median claim by the senders'
    votes (``medians.votes``).

    A claim is a number its sender chose. That median is one a minority cannot move, however much
    it claims, nor can half of the senders raise it, nor identities claiming next to nothing
    lower it (counted per sender, as many of them as honest members brought it down to their
    thousandth, and held a fifth of the mean); so a sender claiming 100 times its samples counts
    for at most ``ratio_limit`` honest medians. Honest weights within the limit of each other come out as
    claimed (the exact weighted mean), and a fast device far above the others still counts for
    more, only less than it did. ``typical``: the round's typical claim, which the votes are
    measured against (``AggregationConfig.typical_claim``; None: from ``claims``).
    """
    if math.isinf(ratio_limit) or len(claims) < 2:
        return list(claims)
    ceiling = ratio_limit * median_by(claims, votes(claims, typical))
    return [min(w, ceiling) for w in claims]


def _check(inputs: Mapping[int, F32], weights: Mapping[int, float]) -> None:
    if set(inputs) != set(weights):
        raise ValueError("every sender needs both a chunk and a weight")
    sizes = {v.size for v in inputs.values()}
    if len(sizes) > 1:
        raise ValueError(f"the senders' chunks differ in length: {sorted(sizes)}")
    for sender, values in inputs.items():
        if values.dtype != np.float32 or values.ndim != 1:
            raise ValueError(f"sender {sender}'s chunk is not a flat float32 array")
        weight = weights[sender]
        if not (math.isfinite(weight) and weight > 0):
            raise ValueError(f"sender {sender}'s weight must be finite and positive, got {weight}")


def weighted_mean(
    rows: Sequence[F32], weights: Sequence[float], workspace: Workspace | None = None
) -> F32:
    """Σ w_i x_i / Σ w_i, adding in the rows' order.

    Equal weights (the common case in tests and benchmarks) skip the multiplications. Otherwise each
    row is scaled by its share w_i / Σ w, not by w_i: a claimed weight of 1e30 cannot overflow.
    """
    total = math.fsum(weights)
    if len(rows) == 1:
        return rows[0].copy()
    if all(w == weights[0] for w in weights):
        mean = np.add(rows[0], rows[1])
        for row in rows[2:]:
            mean += row
        mean /= np.float32(len(rows))
        return mean
    mean = np.multiply(rows[0], np.float32(weights[0] / total))
    scaled = (workspace or Workspace()).row("scaled", mean.size)
    for row, weight in zip(rows[1:], weights[1:], strict=True):
        np.multiply(row, np.float32(weight / total), out=scaled)
        mean += scaled
    return mean
