"""The medians a reducer takes over a round's senders, and what each sender counts for in them.

Screening's reference norm and the direction a chunk is compared with, CenteredClip's start, radius
and the share a clipped sender pulls with, the bound on claimed weights
(``aggregation.bounded_weights``), and diloco's work scores are all medians over the senders.
Counted one per sender, they belong to whoever brings the most identities, and identities cost
nothing: as many members as there are honest ones, each claiming a thousandth of a sample and
sending small noise, set the reference norm at the noise's scale, and every honest chunk was then
screened out as an outlier and accused (the loss went 16x off the clean run). So each sender counts
by its vote (``votes``), which follows what it claims, bounded.

Choices, and why:

- **One whole vote at most** per sender, from half of the typical claim up (``FULL_VOTE``); less
  work, a share of a vote. An inflated claim buys nothing over an honest one, and an identity
  claiming a thousandth of a sample has a thousandth of a vote. Honest senders within twice of each
  other all hold whole votes, so their medians are the counted ones, to the last bit.
- **The typical claim** (``typical_claim``), what a whole vote is measured against, is the lower
  median of the claims, but never below ``TINY`` times their upper median: identities claiming
  nothing, as many as the others, pull the lower median down to their own size, not the upper
  one; inflated claims cannot raise either while they are fewer than the others. In a pair the
  upper median is the smaller claim: with two senders nobody can tell which claim is wrong.
- **The round's, not the chunk's.** A reducer takes the typical claim from what every member of
  the group declared when it formed (the same list on every member), not from the senders of one
  chunk: an honest member late for a chunk would leave more identities than honest members in it
  (in a demo swarm's first round, a reducer then screened three honest members out and accused
  them). Where no group is known (a verifier, a column's round), the chunk's claims serve.
- **Held by the last confirmed round** (``confirmed``). From claims alone, tiny identities around
  honest members and honest members around inflated claimers are the same numbers with the labels
  swapped: a round's claims hold against as many tiny identities as there are typical senders, and
  against inflated claimers while they are fewer than the others, no further. The typical claim of
  the members the backbone's newest confirmation lists says which side is which: between a quarter
  of it and it, no swarm of tiny identities pulls the typical claim down, and no number of inflated
  claimers lifts it (they hold one vote each, and a tie goes to the lower value).
- **Lower medians** (``weighted_lower_median``): the smallest value at which the votes reach half
  of all of them, so votes short of half cannot raise it; ``weighted_median`` (the mean of the
  lower and upper ones) is ``statistics.median`` with equal votes, for the statistics that used it.
  Votes add up as fractions, so that exactly half is a tie (which goes low), not what rounding
  makes of it.

Everything here is a pure function of (values, claims) in the callers' ascending sender order, so
a verifier recomputing a reducer's chunk reaches the same values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from core.codecs.arrays import F32

FULL_VOTE = 0.5
"""A sender claiming at least this share of the typical claim holds a whole vote."""
TINY = 0.25
"""The typical claim is never below this share of the claims' upper median (nor of the last
confirmed round's typical claim)."""
BLOCK = 1 << 15
"""Values per block of the coordinate-wise median: its sort keeps a few arrays of senders x block
(8 bytes a value), not of the whole chunk."""


def lower_median(values: Sequence[float]) -> float:
    """The ⌈k/2⌉-th smallest of k values (the median for odd k, the lower middle for even k)."""
    if not values:
        raise ValueError("the median of no values is undefined")
    return sorted(values)[(len(values) - 1) // 2]


def typical_claim(claims: Sequence[float], confirmed: float | None = None) -> float:
    """The lower median of the positive claims, at least ``TINY`` times their upper median (the
    smaller claim of a pair); 0 when no claim is positive.

    ``confirmed``: the typical claim of the last confirmed round, which holds the result between
    ``TINY`` times it and it: then no number of tiny identities pulls it down, and no number of
    inflated claims lifts it past the confirmation.
    """
    _finite(claims)
    positive = sorted(c for c in claims if c > 0)
    found = 0.0
    if positive:
        upper = positive[min(len(positive) // 2, max(len(positive) - 2, 0))]
        found = max(lower_median(positive), TINY * upper)
    if confirmed is None:
        return found
    return min(max(found, TINY * confirmed), confirmed)


def votes(claims: Sequence[float], typical: float | None = None) -> list[float]:
    """Each sender's vote in the medians over the senders, in [0, 1]: whole from ``FULL_VOTE``
    times the typical claim up, its share of that below (0 for a claim of 0). ``typical``: the
    round's (``typical_claim`` of what the group's members declared, held by the last confirmed
    round's); None: ``typical_claim(claims)``. Whole for every sender when no claim is positive
    (nothing tells them apart)."""
    if not any(c > 0 for c in claims):
        _finite(claims)
        return [1.0] * len(claims)
    if typical is None:
        typical = typical_claim(claims)
    else:
        _finite(claims)
    if not typical > 0:
        return [1.0] * len(claims)
    return [min(1.0, c / (FULL_VOTE * typical)) for c in claims]


def voters(held: Sequence[float]) -> float:
    """How many senders the votes ``held`` are worth together."""
    return math.fsum(held)


def median_by(values: Sequence[float], held: Sequence[float]) -> float:
    """The lower median of ``values`` by their senders' votes ``held``; counted (``lower_median``)
    when no vote is positive."""
    if not any(v > 0 for v in held):
        return lower_median(values)
    return weighted_lower_median(values, held)


def weighted_lower_median(values: Sequence[float], weights: Sequence[float]) -> float:
    """The smallest value at which the weights of the values up to it reach half of all weights.

    Weights must be finite and not negative, with a positive total (a zero weight counts for
    nothing); equal weights give exactly ``lower_median``.
    """
    _check(values, weights)
    if all(w == weights[0] for w in weights):
        return lower_median(values)
    half = sum(map(Fraction, weights)) / 2
    seen = Fraction(0)
    for value, weight in sorted(zip(values, weights, strict=True), key=lambda p: p[0]):
        seen += Fraction(weight)
        if weight > 0 and seen >= half:
            return value
    raise AssertionError("the weights add up to their total")  # pragma: no cover


def weighted_median(values: Sequence[float], weights: Sequence[float]) -> float:
    """The mean of the weighted lower median and the weighted upper median (the largest value at
    which the weights from it up reach half): ``statistics.median`` with equal weights."""
    lower = weighted_lower_median(values, weights)
    upper = -weighted_lower_median([-v for v in values], weights)
    return lower if lower == upper else (lower + upper) / 2


def coordinate_median(rows: Sequence[F32], weights: Sequence[float]) -> F32:
    """Each coordinate's weighted median over the rows (``weighted_median``, in float32): with
    equal weights exactly ``np.median`` of them, as the direction screen always took."""
    _check([0.0] * len(rows), weights)
    if all(w == weights[0] for w in weights):
        equal: F32 = np.median(np.stack(rows), axis=0).astype(np.float32)
        return equal
    shares = np.asarray(weights, dtype=np.float64)
    total = float(np.cumsum(shares)[-1])  # the same sequential sum as each column's last
    centre = np.empty(rows[0].size, dtype=np.float32)
    for start in range(0, centre.size, BLOCK):
        block = np.stack([row[start : start + BLOCK] for row in rows])
        order = np.argsort(block, axis=0, kind="stable")
        ordered = np.take_along_axis(block, order, axis=0)
        reached = np.cumsum(shares[order], axis=0)
        # lower: the first row at which the weights up to it reach half; upper: the last row at
        # which the weights from it up do (``reached`` less the rows before it)
        lower = np.count_nonzero(2.0 * reached < total, axis=0)
        above = total - reached + shares[order]
        upper = np.count_nonzero(2.0 * above >= total, axis=0) - 1
        low = np.take_along_axis(ordered, lower[None, :], axis=0)[0]
        high = np.take_along_axis(ordered, upper[None, :], axis=0)[0]
        centre[start : start + block.shape[1]] = (low + high) * np.float32(0.5)
    return centre


def _finite(claims: Sequence[float]) -> None:
    if any(not (math.isfinite(c) and c >= 0) for c in claims):
        raise ValueError(f"claims must be finite and not negative, got {list(claims)}")


def _check(values: Sequence[float], weights: Sequence[float]) -> None:
    if not values:
        raise ValueError("the median of no values is undefined")
    if len(weights) != len(values):
        raise ValueError(f"{len(values)} values but {len(weights)} weights")
    if any(not (math.isfinite(w) and w >= 0) for w in weights) or not any(w > 0 for w in weights):
        raise ValueError(
            f"weights must be finite and not negative, some positive; got {list(weights)}"
        )
